"""Online difficulty filter: the source follows `scored`, keeps each drawn row's pass rate under the
current policy and retires the rows that leave the band, so rollouts stop being spent on them.

Retired, not down-weighted: a group whose samples all pass (or all fail, or whose partial-credit
rewards do not vary) has zero advantage under group normalisation, so its G rollouts train nothing;
retiring the row skips its draw (the position passes, nothing is published), which keeps the draw
order a pure function of the seeds, while a per-row weight would not. A too-easy row retires at
once: the policy only gets better on it. A too-hard (or flat) row retires after `hard_strikes`
groups out of band, since a better policy may yet solve it; and when the monitor moves the output
window to a new stage (the report's 80K step) the too-hard rows come back, and the easy bound can
tighten (`window_step`). The learner's dynamic sampling stays the last gate.

The pass rate is the raw verifier outcome (ScoredSample.correct), not the shaped reward; rewards that
are not 0/1 are judged by their variance in the group. The retired rows are kept on `source_state`
(one record per source, '<state key>/retired/<source>', written at most every `save_every_s`): a
restart keeps them, a crash loses at most the last few seconds of retirements (those rows are drawn
once more). A replay does not follow `scored`: it reproduces the sequence of a run without the filter.
"""
from __future__ import annotations

import logging
import time
import zlib
from collections import OrderedDict

import numpy as np
from pydantic import BaseModel, Field, model_validator

from m1flow.contracts import events

log = logging.getLogger(__name__)

EASY, HARD = "easy", "hard"


class WindowStep(BaseModel):
    """What a new output-window stage does to the filter (the report's 80K-stage data step)."""

    readmit_hard: bool = Field(True, description="rows retired as too hard are drawn again")
    easy_above: float | None = Field(None, ge=0, le=1, description="the new easy bound (e.g. 0.7: drop more easy rows)")


class FilterConfig(BaseModel):
    enabled: bool = Field(False, description="follow `scored` and retire rows whose pass rate leaves the band")
    band: tuple[float, float] = Field((0.0, 0.9), description="keep rows with lo < pass rate < hi (the report's "
                                                               "(0, 0.9) for math)")
    bands: dict[str, tuple[float, float]] = Field(default_factory=dict, description="per source name, over `band`")
    hard_strikes: int = Field(2, ge=1, description="groups at or below lo (or flat) before a row retires")
    min_variance: float = Field(1e-4, ge=0, description="rewards that are not 0/1: a group whose reward variance "
                                                        "is at most this is out of band")
    remember: int = Field(200_000, ge=1, description="published prompts whose row is remembered for their scores")
    save_every_s: float = Field(10.0, gt=0, description="how often changed retired sets go to `source_state`")
    window_step: WindowStep | None = Field(None, description="on a larger output window: readmit hard rows, "
                                                             "tighten the easy bound (None: nothing)")

    @model_validator(mode="after")
    def _bands(self) -> "FilterConfig":
        for name, (lo, hi) in {"band": self.band, **self.bands}.items():
            if not 0 <= lo < hi <= 1:
                raise ValueError(f"filter band {name}: need 0 <= lo < hi <= 1, got ({lo}, {hi})")
        return self


def verdict(group: events.ScoredGroup, lo: float, hi: float, min_variance: float) -> tuple[str, float]:
    """("", rate) in band, (EASY, rate) or (HARD, rate) out of it, for one scored group."""
    samples = list(group.samples)
    if samples and all(s.HasField("correct") for s in samples):
        rate = sum(bool(s.correct) for s in samples) / len(samples)
        return (EASY if rate >= hi else HARD if rate <= lo else ""), rate
    rewards = np.asarray([s.reward for s in samples], dtype=np.float64)
    mean = float(rewards.mean()) if len(rewards) else 0.0
    flat = len(rewards) < 2 or float(rewards.var()) <= min_variance
    return (HARD if flat else ""), mean


def pack(rows: dict[int, str]) -> bytes:
    """Retired rows as sorted 2*row + (1 if too hard), delta-coded uint32, zlib."""
    ordered = np.asarray(sorted(2 * row + (kind == HARD) for row, kind in rows.items()), dtype=np.int64)
    return zlib.compress(np.diff(ordered, prepend=0).astype(np.uint32).tobytes())


def unpack(blob: bytes) -> dict[int, str]:
    if not blob:
        return {}
    codes = np.cumsum(np.frombuffer(zlib.decompress(blob), dtype=np.uint32).astype(np.int64))
    return {int(c) // 2: HARD if c % 2 else EASY for c in codes}


class DifficultyFilter:
    """Which rows are retired, per source, and the pass rates that retired them."""

    def __init__(self, cfg: FilterConfig, sizes: dict[str, int]) -> None:
        self.cfg, self.sizes = cfg, sizes
        self.retired: dict[str, dict[int, str]] = {name: {} for name in sizes}  # row -> EASY or HARD
        self.strikes: dict[tuple[str, int], int] = {}
        self.rates: dict[str, np.ndarray] = {}  # last pass rate per row (NaN: not scored), for the window step
        self.drawn: OrderedDict[str, tuple[str, int]] = OrderedDict()  # prompt id -> (source, row)
        self.changed: set[str] = set()
        self.saved_at = time.monotonic()
        self.easy_above = {name: self.band(name)[1] for name in sizes}

    def band(self, source: str) -> tuple[float, float]:
        return self.cfg.bands.get(source, self.cfg.band)

    # ---- state ------------------------------------------------------------------------------
    def restore(self, records: dict[str, events.SourceState]) -> None:
        for record in records.values():
            name = record.cursors[0].source if record.cursors else ""
            if name in self.retired and record.retired_rows:
                self.retired[name] = {row: kind for row, kind in unpack(record.retired_rows).items()
                                      if row < self.sizes[name]}

    def records(self, force: bool = False) -> list[tuple[str, events.SourceState]]:
        """(source, record) for each source whose retired set changed, at most every save_every_s."""
        if not self.changed or not (force or time.monotonic() - self.saved_at >= self.cfg.save_every_s):
            return []
        self.saved_at = time.monotonic()
        out = []
        for name in sorted(self.changed):
            rows = self.retired[name]
            out.append((name, events.SourceState(cursors=[events.SourceCursor(source=name)],
                                                 retired_rows=pack(rows))))
        self.changed = set()
        return out

    # ---- the draw side ------------------------------------------------------------------------
    def drew(self, prompt_id: str, source: str, row: int) -> None:
        self.drawn[prompt_id] = (source, row)
        self.drawn.move_to_end(prompt_id)
        while len(self.drawn) > self.cfg.remember:
            self.drawn.popitem(last=False)

    def is_retired(self, source: str, row: int) -> bool:
        return row in self.retired[source]

    def spent(self, source: str) -> bool:
        """Every row of the source retired: nothing is left to draw from it."""
        return len(self.retired[source]) >= self.sizes[source] > 0

    # ---- the scored side ----------------------------------------------------------------------
    def scored(self, group: events.ScoredGroup) -> str:
        """Judge one scored group of a prompt this source drew; the retirement it caused or ""."""
        where = self.drawn.get(group.prompt_id)
        if where is None or group.incomplete:
            return ""
        source, row = where
        lo, hi = self.band(source)
        kind, rate = verdict(group, lo, min(hi, self.easy_above[source]), self.cfg.min_variance)
        rates = self.rates.get(source)
        if rates is None:
            rates = self.rates[source] = np.full(self.sizes[source], np.nan, dtype=np.float16)
        rates[row] = rate
        if not kind:
            self.strikes.pop((source, row), None)
            return ""
        if kind == HARD:
            strikes = self.strikes[(source, row)] = self.strikes.get((source, row), 0) + 1
            if strikes < self.cfg.hard_strikes:
                return ""
        self.strikes.pop((source, row), None)
        if row not in self.retired[source]:
            self.retired[source][row] = kind
            self.changed.add(source)
        return kind

    def window_stage(self) -> tuple[int, int]:
        """The 80K-stage step: readmit the too-hard rows, retire rows now above the tighter easy bound.
        Returns (readmitted, newly retired)."""
        step = self.cfg.window_step
        if step is None:
            return 0, 0
        readmitted = retired = 0
        for name, rows in self.retired.items():
            if step.readmit_hard:
                hard = [row for row, kind in rows.items() if kind == HARD]
                for row in hard:
                    del rows[row]
                readmitted += len(hard)
            if step.easy_above is not None:
                self.easy_above[name] = min(self.easy_above[name], step.easy_above)
                rates = self.rates.get(name)
                if rates is not None:
                    easy = np.flatnonzero(rates.astype(np.float64) >= self.easy_above[name])
                    fresh = [int(r) for r in easy if int(r) not in rows]
                    rows.update({r: EASY for r in fresh})
                    retired += len(fresh)
            self.changed.add(name)
        self.strikes.clear()
        return readmitted, retired

    def counts(self) -> dict[str, dict[str, int]]:
        return {name: {EASY: sum(k == EASY for k in rows.values()), HARD: sum(k == HARD for k in rows.values())}
                for name, rows in self.retired.items()}
