"""Mismatch: steer the learner's train/inference correction bounds instead of asking a user for C.

Per learner step, from its `train_infer_corr` and `train_infer_k3` (KL(rollout || train), nats per
token): bad when the correlation is below `corr_low` or the KL above `kl_high`; good when the
correlation is at least `corr_ok` and the KL at most `kl_ok`; in between, neither (the hysteresis
band: a value hovering at one threshold cannot flip the bounds back and forth). `tighten_after` bad
steps in a row multiply the scale of the bounds by `factor` (down to `min_scale`); `relax_after`
good steps in a row divide it (up to 1, the configured bounds). Each change is one `set_correction`
with its evidence; any step that breaks a streak starts it again, and so does each change. A bad streak
does not tighten while the correction already drops `max_dropped` of the tokens: the correlation and the
KL are measured before any correction, so no bound can bring them down, and a rule that kept tightening
would reach its floor and discard a fifth of every batch (bench/mismatch.py measured that: -0.2 pass@1).

A step's rows arrive together; rows of a step already counted (its tail split across two reads) are
not counted again.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from svc_monitor.config import MismatchConfig
from svc_monitor.outcome import Command, Evidence, Outcome, Signal
from svc_monitor.schema import MetricRow

RULE = "mismatch"


@dataclass
class MismatchState:
    scale: float = 1.0
    bad: int = 0  # bad steps in a row
    good: int = 0  # good steps in a row
    since: int = 0  # the first step of the current streak
    last_step: int = -1


class MismatchRule:
    def __init__(self, cfg: MismatchConfig, state: dict | None = None) -> None:
        self.cfg = cfg
        self.state = MismatchState(**(state or {}))

    def snapshot(self) -> dict:
        return asdict(self.state)

    def scale_set(self, scale: float) -> None:
        """A set_correction was published (by this rule or a person): streaks start again from it."""
        if scale > 0:
            self.state.scale, self.state.bad, self.state.good = scale, 0, 0

    def verdict(self, values: dict[str, float]) -> int:
        """-1 bad, +1 good, 0 neither; for one step's {metric: value} (NaN: says nothing)."""
        c = self.cfg
        corr, kl = values.get(c.corr_metric, math.nan), values.get(c.kl_metric, math.nan)
        if corr < c.corr_low or kl > c.kl_high:
            return -1
        seen = [v for v in (corr, kl) if math.isfinite(v)]
        ok = (math.isnan(corr) or corr >= c.corr_ok) and (math.isnan(kl) or kl <= c.kl_ok)
        return 1 if seen and ok else 0

    def evaluate(self, rows: list[MetricRow], act: bool = True) -> Outcome:
        """The learner's metric rows (both names, oldest first); `act` False: count, change nothing."""
        steps: dict[int, dict[str, float]] = {}
        for row in rows:
            if row.step > self.state.last_step:
                steps.setdefault(row.step, {})[row.name] = row.value
        out = Outcome()
        for step, values in sorted(steps.items()):
            out.extend(self._step(step, values, act))
        if steps:
            self.state.last_step = max(steps)
            out.signals.append(Signal("mismatch/scale", self.state.scale, min(steps), max(steps)))
        return out

    def _step(self, step: int, values: dict[str, float], act: bool) -> Outcome:
        s, c = self.state, self.cfg
        verdict = self.verdict(values)
        s.bad, s.good = (s.bad + 1, 0) if verdict < 0 else (0, s.good + 1) if verdict > 0 else (0, 0)
        if max(s.bad, s.good) == 1:
            s.since = step
        if s.bad >= c.tighten_after and values.get(c.dropped_metric, 0.0) >= c.max_dropped:
            s.bad = 0  # held: tighter bounds would only drop more
            return Outcome()
        if s.bad >= c.tighten_after:
            scale, streak, thresholds = max(s.scale * c.factor, c.min_scale), s.bad, {
                c.corr_metric: c.corr_low, c.kl_metric: c.kl_high}
            why = "high"
        elif s.good >= c.relax_after:
            scale, streak, thresholds = min(s.scale / c.factor, 1.0), s.good, {
                c.corr_metric: c.corr_ok, c.kl_metric: c.kl_ok}
            why = "low"
        else:
            return Outcome()
        since = s.since
        s.bad = s.good = 0
        if scale == s.scale or not (act and c.enabled):
            return Outcome()
        evidence = Evidence(RULE, {**values, "mismatch/scale_from": s.scale, "mismatch/scale_to": scale},
                            thresholds, since, step, streak)
        shown = ", ".join(f"{k.rsplit('/', 1)[-1]} {v:.4g}" for k, v in sorted(values.items()))
        reason = (f"train/inference mismatch {why} for {streak} steps (v{since}..v{step}; last: {shown}): "
                  f"correction bounds scale {s.scale:g} -> {scale:g}")
        s.scale = scale
        return Outcome(commands=[Command("set_correction", reason, evidence, scale=scale)])
