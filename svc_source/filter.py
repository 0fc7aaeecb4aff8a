"""Online difficulty filter: the source follows `scored`, keeps each drawn row's pass rate under the
current policy and retires the rows that leave the band, so rollouts stop being spent on them.

Retired, not down-weighted: a group whose samples all pass (or all fail, or whose partial-credit
rewards do not vary) has zero advantage under group normalisation, so its G rollouts train nothing;
retiring the row skips its draw (the position passes, nothing is published), which keeps the draw
order a pure function of the seeds, while a per-row weight would not.

The pass rate is the raw verifier outcome (ScoredSample.correct), not the shaped reward, counted over
the row's groups (passes and samples, halved once past `memory_samples` so the count follows the
current policy): one group of 4 is too little evidence (a row the policy solves one time in four comes
back all wrong a third of the time). A row at or above the band's top after `min_samples` samples
retires (the policy only gets better at it); one at or below the bottom waits for `hard_samples`,
since a better policy may yet solve it. Rewards that are not 0/1 are judged by their variance in the
group: `hard_strikes` flat groups in a row retire the row. When the monitor moves the output window to
a new stage (the report's 80K step) the too-hard rows come back and the easy bound can tighten
(`window_step`). The learner's dynamic sampling stays the last gate. The retired rows are kept on `source_state`
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
    min_samples: int = Field(8, ge=1, description="samples of a row before it can retire as too easy")
    hard_samples: int = Field(16, ge=1, description="samples of a row before it can retire as too hard")
    memory_samples: int = Field(32, ge=2, description="past this many samples a row's counts are halved")
    hard_strikes: int = Field(2, ge=1, description="rewards that are not 0/1: flat groups in a row before it retires")
    min_variance: float = Field(1e-4, ge=0, description="rewards that are not 0/1: a group whose reward variance "
                                                        "is at most this is out of band")
    remember: int = Field(200_000, ge=1, description="published prompts whose row is remembered for their scores")
    save_every_s: float = Field(10.0, gt=0, description="how often changed retired sets go to `source_state`")
    window_step: WindowStep | None = Field(None, description="on a larger output window: readmit hard rows, "
                                                             "tighten the easy bound (None: nothing)")

    @model_validator(mode="after")
    def _bands(self) -> "FilterConfig":
        if self.memory_samples < max(self.min_samples, self.hard_samples):
            raise ValueError(f"filter memory_samples ({self.memory_samples}) must be at least min_samples and "
                             f"hard_samples ({self.min_samples}, {self.hard_samples}): no row could retire")
        for name, (lo, hi) in {"band": self.band, **self.bands}.items():
            if not 0 <= lo < hi <= 1:
                raise ValueError(f"filter band {name}: need 0 <= lo < hi <= 1, got ({lo}, {hi})")
        return self


def outcomes(group: events.ScoredGroup) -> tuple[int, int] | None:
    """(passes, samples) of a group whose samples all have a verdict; None: rewards that are not 0/1."""
    samples = list(group.samples)
    if samples and all(s.HasField("correct") for s in samples):
        return sum(bool(s.correct) for s in samples), len(samples)
    return None


def flat(group: events.ScoredGroup, min_variance: float) -> bool:
    """Partial-credit rewards that do not vary in the group: nothing to learn from it."""
    rewards = np.asarray([s.reward for s in group.samples], dtype=np.float64)
    return len(rewards) < 2 or float(rewards.var()) <= min_variance


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
        self.counts_of: dict[str, np.ndarray] = {}  # per source, per row: (passes, samples) so far
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
        if where is None or group.incomplete or not group.samples:
            return ""
        source, row = where
        counted = outcomes(group)
        kind = self._by_rate(source, row, *counted) if counted else self._by_variance(source, row, group)
        if kind and row not in self.retired[source]:
            self.retired[source][row] = kind
            self.changed.add(source)
        return kind

    def _by_rate(self, source: str, row: int, passes: int, samples: int) -> str:
        counts = self.counts_of.get(source)
        if counts is None:
            counts = self.counts_of[source] = np.zeros((self.sizes[source], 2), dtype=np.uint16)
        counts[row] += np.array((passes, samples), dtype=np.uint16)
        p, n = int(counts[row, 0]), int(counts[row, 1])
        if n > self.cfg.memory_samples:
            counts[row] //= 2  # after this verdict: the older half of the evidence fades
        lo, hi = self.band(source)
        if n >= self.cfg.min_samples and p / n >= min(hi, self.easy_above[source]):
            return EASY
        if n >= self.cfg.hard_samples and p / n <= lo:
            return HARD
        return ""

    def _by_variance(self, source: str, row: int, group: events.ScoredGroup) -> str:
        if not flat(group, self.cfg.min_variance):
            self.strikes.pop((source, row), None)
            return ""
        strikes = self.strikes[(source, row)] = self.strikes.get((source, row), 0) + 1
        if strikes < self.cfg.hard_strikes:
            return ""
        self.strikes.pop((source, row), None)
        return HARD

    def rate(self, source: str, row: int) -> float:
        """The row's pass rate so far (NaN: no verdict yet)."""
        counts = self.counts_of.get(source)
        if counts is None or not counts[row, 1]:
            return float("nan")
        return float(counts[row, 0]) / float(counts[row, 1])

    def window_stage(self) -> tuple[int, int]:
        """The 80K-stage step: readmit the too-hard rows, retire rows now above the tighter easy bound.
        Returns (readmitted, newly retired)."""
        step = self.cfg.window_step
        if step is None:
            return 0, 0
        readmitted = retired = 0
        for name, rows in self.retired.items():
            counts = self.counts_of.get(name)
            if step.readmit_hard:
                hard = [row for row, kind in rows.items() if kind == HARD]
                for row in hard:
                    del rows[row]
                    if counts is not None:
                        counts[row] = 0  # a fresh start under the longer window
                readmitted += len(hard)
            if step.easy_above is not None:
                self.easy_above[name] = min(self.easy_above[name], step.easy_above)
                if counts is not None:
                    seen = counts[:, 1] >= self.cfg.min_samples
                    rate = counts[:, 0] / np.maximum(counts[:, 1], 1)
                    fresh = [int(r) for r in np.flatnonzero(seen & (rate >= self.easy_above[name])) if int(r) not in rows]
                    rows.update({r: EASY for r in fresh})
                    retired += len(fresh)
            self.changed.add(name)
        self.strikes.clear()
        return readmitted, retired

    def counts(self) -> dict[str, dict[str, int]]:
        return {name: {EASY: sum(k == EASY for k in rows.values()), HARD: sum(k == HARD for k in rows.values())}
                for name, rows in self.retired.items()}
