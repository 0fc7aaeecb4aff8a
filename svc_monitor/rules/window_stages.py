"""Output window stages (the report grew 40K -> 48K -> ... -> 80K) and pattern collapse.

Per window of `window_rollouts` rollouts, over those generated under the window in force:
* `window/p99_length` against the window: near when p99 >= (1 - near_fraction) * window;
* `window/perplexity`: exp(mean negative log-prob per token); converged when it changed by at most
  `ppl_tolerance` (relative) window to window, `ppl_windows` times in a row.
Near and converged advance to the next stage, once: the evidence starts again under the new
window, so each satisfied condition moves exactly one stage.

Pattern collapse (the report saw garbled, repetitive tails late in training), over all rollouts of
the window: a jump, against the mean of the last `baseline_windows` healthy windows, in the share
of repetition truncations, in token-level repetition (repeated n-grams) or in the share of
responses that hit the window. It raises an alert and, with `hold_on_collapse`, holds the stage
until a window is healthy again.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from m1flow.contracts import events
from svc_monitor.config import WindowConfig
from svc_monitor.outcome import AlertChange, Command, Evidence, Outcome, Signal
from svc_monitor.schema import RolloutRow

RULE = "window_stage"
ALERT = "pattern_collapse"
COLLAPSE_SIGNALS = ("window/repetition_stops", "window/token_repetition", "window/hit_window")


def collapse_signals(rows: list[RolloutRow]) -> dict[str, float]:
    n = len(rows)
    return {"window/repetition_stops": sum(r.finish == events.FINISH_REASON_REPETITION for r in rows) / n,
            "window/token_repetition": float(np.mean([r.repetition for r in rows])),
            "window/hit_window": sum(r.finish == events.FINISH_REASON_LENGTH for r in rows) / n}


def perplexity(rows: list[RolloutRow]) -> float | None:
    tokens = sum(r.length for r in rows)
    return math.exp(sum(r.nll_sum for r in rows) / tokens) if tokens else None


@dataclass
class WindowState:
    window: int = 0  # max new tokens in force; 0 until seen
    perplexities: list[float] = field(default_factory=list)  # under the current window, oldest first
    baseline: list[dict] = field(default_factory=list)  # collapse signals of recent healthy windows
    collapse: bool = False
    advances: int = 0


class WindowStageRule:
    def __init__(self, cfg: WindowConfig, state: dict | None = None) -> None:
        self.cfg = cfg
        self.state = WindowState(**(state or {}))

    def snapshot(self) -> dict:
        return asdict(self.state)

    @property
    def stage(self) -> int:
        """Index of the window in force among the stages; -1 when it is not one of them."""
        stages = self.cfg.stages
        return stages.index(self.state.window) if self.state.window in stages else -1

    def next_stage(self) -> int | None:
        return next((s for s in self.cfg.stages if s > self.state.window), None)

    def window_set(self, max_new_tokens: int) -> None:
        """A set_window was published (by this rule or a person): evidence starts again."""
        if max_new_tokens and max_new_tokens != self.state.window:
            self.state.window = max_new_tokens
            self.state.perplexities = []

    def evaluate(self, rows: list[RolloutRow], act: bool = True) -> Outcome:
        """One closed window of rollouts; `act` False: record signals, advance nothing."""
        s = self.state
        if not s.window:  # first sight: the window most rollouts were generated under
            s.window = Counter(r.window for r in rows).most_common(1)[0][0]
        versions = [r.policy_version for r in rows]
        lo, hi = min(versions), max(versions)
        out = Outcome()
        out.alerts += self._collapse(rows, out, lo, hi)
        current = [r for r in rows if r.window == s.window]
        if len(current) * 2 < len(rows):  # mostly generated under another window: no evidence here
            return out
        p99 = float(np.percentile([r.length for r in current], 99))
        ppl = perplexity(current)
        out.signals += [Signal("window/p99_length", p99, lo, hi), Signal("window/max_new_tokens", s.window, lo, hi)]
        if ppl is None:
            return out
        out.signals.append(Signal("window/perplexity", ppl, lo, hi))
        s.perplexities = (s.perplexities + [ppl])[-(self.cfg.ppl_windows + 1):]
        changes = [abs(b - a) / a for a, b in zip(s.perplexities, s.perplexities[1:]) if a > 0]
        converged = len(changes) >= self.cfg.ppl_windows and max(changes) <= self.cfg.ppl_tolerance
        near = p99 >= (1 - self.cfg.near_fraction) * s.window
        nxt = self.next_stage()
        if near and converged and nxt is not None and self.cfg.enabled and act:
            if s.collapse and self.cfg.hold_on_collapse:
                out.signals.append(Signal("window/held", 1.0, lo, hi))
                return out
            evidence = Evidence(RULE, {"window/p99_length": p99, "window/max_new_tokens": s.window,
                                       "window/perplexity": ppl, "window/perplexity_change": max(changes)},
                                {"window/p99_length": (1 - self.cfg.near_fraction) * s.window,
                                 "window/perplexity_change": self.cfg.ppl_tolerance}, lo, hi, len(changes) + 1)
            out.commands.append(Command("set_window", f"p99 length {p99:.0f} near window {s.window} and perplexity "
                                        f"converged: {s.window} -> {nxt}", evidence, max_new_tokens=nxt))
            s.advances += 1
            self.window_set(nxt)
        return out

    def _collapse(self, rows: list[RolloutRow], out: Outcome, lo: int, hi: int) -> list[AlertChange]:
        s = self.state
        values = collapse_signals(rows)
        out.signals += [Signal(n, v, lo, hi) for n, v in values.items()]
        jumps = {"window/repetition_stops": self.cfg.repetition_stop_jump,
                 "window/token_repetition": self.cfg.token_repetition_jump,
                 "window/hit_window": self.cfg.hit_window_jump}
        if not s.baseline:  # nothing healthy to compare with yet
            s.baseline.append(values)
            return []
        base = {n: float(np.mean([b[n] for b in s.baseline])) for n in COLLAPSE_SIGNALS}
        jumped = sorted(n for n in COLLAPSE_SIGNALS if values[n] - base[n] >= jumps[n])
        evidence = Evidence(RULE, {**values, **{f"{n}_baseline": base[n] for n in COLLAPSE_SIGNALS}},
                            {n: base[n] + jumps[n] for n in COLLAPSE_SIGNALS}, lo, hi, 1)
        if jumped:
            if s.collapse:
                return []
            s.collapse = True
            hold = " holding the window stage" if self.cfg.hold_on_collapse else ""
            return [AlertChange(ALERT, "rollouts", True, f"pattern collapse: {', '.join(jumped)} jumped;{hold}",
                                "critical", evidence)]
        s.baseline = (s.baseline + [values])[-self.cfg.baseline_windows:]
        if s.collapse:
            s.collapse = False
            return [AlertChange(ALERT, "rollouts", False, "rollouts healthy again", evidence=evidence)]
        return []
