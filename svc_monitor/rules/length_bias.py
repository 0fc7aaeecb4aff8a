"""GenRM length bias (the report: the GenRM favours longer outputs, and RL then buys length instead
of quality): signals per window of GenRM-scored groups, and when to ask svc_reward to recalibrate.

Signals of one window:
* `genrm/length_corr`: the mean over prompts of the rank correlation between GenRM score and
  response length within the prompt's group (rewards.md: above about 0.3 is suspicious);
* `genrm/length_coef`: b1 of the model svc_reward's recalibration fits, P(i preferred to j) =
  sigmoid(b0 + b1 tanh(dlen / sd)), fitted here on the preferences the scores imply within each
  group (the score difference's sign; equal scores are half a preference);
* `genrm/verified_drift`: only where samples also have a rule verifier: the GenRM reward gained over
  the last `drift_windows` windows while length rose and verified accuracy did not.

A window is biased when at least `min_signals` of the signals it has are past their thresholds
(hysteresis: `consecutive` biased windows before acting). Then `recalibrate`, `cooldown_windows`
windows of cool-down (groups scored before the recalibration still arrive), and one window to
verify: still biased raises an alert instead of recalibrating again; the alert resolves after
`consecutive` unbiased windows. A verify window that passes starts an audit: the groups' correlations
are pooled until `audit_groups` of them, and a 95% interval of their mean above zero asks for another
recalibration (svc_reward then adds a stage fitted on what its correction left). The thresholds above
are for telling a biased window from noise (16 groups, a third of them with any ordering); a residual
of +0.1 passes them every time, and in `m1flow demo --genrm` a policy climbed one from 14.6 to 19.7
tokens (README, run C), which a hundred pooled groups can tell from zero.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field

import numpy as np

from m1flow.stats import fit_logistic, spearman
from svc_monitor.config import LengthBiasConfig
from svc_monitor.outcome import AlertChange, Command, Evidence, Outcome, Signal
from svc_monitor.schema import GenRMSampleRow

RULE = "genrm_length_bias"
ALERT = "genrm_length_bias_persists"
MIN_PAIRS = 10


def by_group(rows: list[GenRMSampleRow]) -> dict[str, list[GenRMSampleRow]]:
    groups: dict[str, list[GenRMSampleRow]] = defaultdict(list)
    for row in rows:
        groups[row.group_id].append(row)
    return groups


def group_correlations(groups: dict[str, list[GenRMSampleRow]]) -> list[float]:
    """Each group's rank correlation of score and length (groups with no ordering left out)."""
    corrs = [spearman(np.array([r.score for r in g]), np.array([r.length for r in g]))
             for g in groups.values() if len(g) >= 3]
    return [c for c in corrs if c is not None]


def length_correlation(groups: dict[str, list[GenRMSampleRow]]) -> float | None:
    """Mean within-group rank correlation of score and length (groups with no ordering left out)."""
    corrs = group_correlations(groups)
    return float(np.mean(corrs)) if corrs else None


def length_coefficient(groups: dict[str, list[GenRMSampleRow]], l2: float = 1e-3) -> float | None:
    """b1 of the logistic preference-on-length fit over all ordered pairs within groups."""
    diffs, prefs = [], []
    for g in groups.values():
        if len({r.score for r in g}) < 2:
            continue  # every answer scored alike: no preference to explain
        for a in g:
            for b in g:
                if a is not b:
                    diffs.append(a.length - b.length)
                    prefs.append(0.5 + 0.5 * float(np.sign(a.score - b.score)))
    if len(diffs) < MIN_PAIRS:
        return None
    diff = np.array(diffs, dtype=float)
    scale = float(diff.std()) or 1.0
    return fit_logistic(np.tanh(diff / scale), np.array(prefs), l2, 50)[1]


def mean_interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% interval (normal approximation; the audit pools about 100 groups)."""
    arr = np.array(values, dtype=float)
    return float(arr.mean()), float(1.96 * arr.std(ddof=1) / math.sqrt(len(arr))) if len(arr) > 1 else math.inf


@dataclass
class Trend:
    """Means of the samples that have both a GenRM score and a verdict, one window."""

    genrm: float
    accuracy: float
    length: float


@dataclass
class LengthBiasState:
    phase: str = "watch"  # watch -> cooldown -> verify -> audit -> watch | recalibrate again; verify -> stuck
    streak: int = 0  # biased windows in a row (watch), unbiased windows in a row (stuck)
    cooldown_left: int = 0
    alert_active: bool = False
    recalibrations: int = 0
    trend: list[dict] = field(default_factory=list)
    audit: list[float] = field(default_factory=list)  # per-group correlations since the verify window passed


class LengthBiasRule:
    def __init__(self, cfg: LengthBiasConfig, state: dict | None = None) -> None:
        self.cfg = cfg
        self.state = LengthBiasState(**(state or {}))

    def snapshot(self) -> dict:
        return asdict(self.state)

    def thresholds(self) -> dict[str, float]:
        return {"genrm/length_corr": self.cfg.corr_threshold, "genrm/length_coef": self.cfg.coef_threshold,
                "genrm/verified_drift": self.cfg.drift_threshold}

    def signals(self, rows: list[GenRMSampleRow]) -> dict[str, float]:
        groups = by_group(rows)
        values = {"genrm/length_corr": length_correlation(groups), "genrm/length_coef": length_coefficient(groups),
                  "genrm/verified_drift": self._verified_drift(rows)}
        return {k: v for k, v in values.items() if v is not None and math.isfinite(v)}

    def _verified_drift(self, rows: list[GenRMSampleRow]) -> float | None:
        dual = [r for r in rows if r.correct is not None]
        if not dual:
            return None
        trend = Trend(genrm=float(np.mean([r.score for r in dual])),
                      accuracy=float(np.mean([bool(r.correct) for r in dual])),
                      length=float(np.mean([r.length for r in dual])))
        self.state.trend = (self.state.trend + [asdict(trend)])[-self.cfg.drift_windows:]
        if len(self.state.trend) < self.cfg.drift_windows:
            return None
        first, last = Trend(**self.state.trend[0]), Trend(**self.state.trend[-1])
        if last.length > first.length and last.accuracy - first.accuracy <= self.cfg.accuracy_flat:
            return max(0.0, last.genrm - first.genrm)
        return 0.0

    def evaluate(self, rows: list[GenRMSampleRow], act: bool = True) -> Outcome:
        """One closed window of GenRM-scored groups; `act` False: record signals, decide nothing new."""
        values = self.signals(rows)
        versions = [r.policy_version for r in rows]
        lo, hi = min(versions), max(versions)
        thresholds = self.thresholds()
        past = [name for name, value in values.items() if value > thresholds[name]]
        biased = len(past) >= self.cfg.min_signals
        out = Outcome(signals=[Signal(n, v, lo, hi) for n, v in values.items()])
        out.signals.append(Signal("genrm/biased_window", float(biased), lo, hi))

        def evidence(windows: int) -> Evidence:
            return Evidence(RULE, values, {n: thresholds[n] for n in values}, lo, hi, windows)

        s = self.state
        if s.phase == "watch":
            s.streak = s.streak + 1 if biased else 0
            if s.streak >= self.cfg.consecutive and self.cfg.enabled and act:
                out.commands.append(Command("recalibrate", f"length bias: {', '.join(sorted(past))} past "
                                            f"threshold for {s.streak} windows", evidence(s.streak)))
                self.recalibrated()
        elif s.phase == "cooldown":
            s.cooldown_left -= 1
            if s.cooldown_left <= 0:
                s.phase = "verify"
        elif s.phase == "verify":
            s.streak = 0
            if biased:
                s.phase = "stuck"
                if not s.alert_active:
                    s.alert_active = True
                    out.alerts.append(AlertChange(
                        ALERT, "genrm", True, f"length bias persists after {s.recalibrations} recalibration(s) "
                        f"({', '.join(sorted(past))}); not recalibrating again", "critical", evidence(1)))
            else:
                s.phase, s.audit = ("audit" if self.cfg.audit_groups else "watch"), []
                out.alerts += self._resolve(evidence(1))
        elif s.phase == "audit":
            s.audit += group_correlations(by_group(rows))
            s.streak = s.streak + 1 if biased else 0
            if s.streak >= self.cfg.consecutive and self.cfg.enabled and act:  # back in full, as in watch
                out.commands.append(Command("recalibrate", f"length bias: {', '.join(sorted(past))} past "
                                            f"threshold for {s.streak} windows", evidence(s.streak)))
                self.recalibrated()
            elif len(s.audit) >= self.cfg.audit_groups:
                mean, half = mean_interval(s.audit)
                if mean - half > 0 and self.cfg.enabled and act:
                    values["genrm/residual_corr"] = mean
                    out.commands.append(Command(
                        "recalibrate", f"residual length bias after recalibration: rank correlation {mean:+.3f} "
                        f"+- {half:.3f} over {len(s.audit)} groups", Evidence(
                            RULE, values, {**{n: thresholds[n] for n in values if n in thresholds},
                                           "genrm/residual_corr": 0.0}, lo, hi, 1)))
                    self.recalibrated()
                else:
                    s.phase, s.streak = "watch", 0
                s.audit = []
        elif s.phase == "stuck":
            s.streak = 0 if biased else s.streak + 1
            if s.streak >= self.cfg.consecutive:
                s.phase, s.streak = "watch", 0
                out.alerts += self._resolve(evidence(self.cfg.consecutive))
        return out

    def recalibrated(self) -> None:
        """A recalibration happened (ours, or one a person sent): cool down, then verify."""
        s = self.state
        s.recalibrations += 1
        s.streak = 0
        s.cooldown_left = self.cfg.cooldown_windows
        s.phase = "cooldown" if self.cfg.cooldown_windows > 0 else "verify"

    def _resolve(self, evidence: Evidence) -> list[AlertChange]:
        if not self.state.alert_active:
            return []
        self.state.alert_active = False
        return [AlertChange(ALERT, "genrm", False, "length bias back under threshold", evidence=evidence)]
