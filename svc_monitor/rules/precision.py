"""Precision: the learner's correlation between training-mode and inference-mode token probabilities.

The report saw 0.9x with a bf16 LM head and 0.99x in fp32, and reward grew only with the latter.
Below `threshold` raises an alert; back at or above it resolves it. A NaN (too few tokens) says nothing.
"""
from __future__ import annotations

import math

from svc_monitor.config import PrecisionConfig
from svc_monitor.outcome import AlertChange, Evidence, Outcome
from svc_monitor.schema import MetricRow

RULE = "precision"
ALERT = "precision"


class PrecisionRule:
    def __init__(self, cfg: PrecisionConfig, state: dict | None = None) -> None:
        self.cfg = cfg
        self.active = bool((state or {}).get("active", False))

    def snapshot(self) -> dict:
        return {"active": self.active}

    def evaluate(self, rows: list[MetricRow]) -> Outcome:
        out = Outcome()
        for row in rows:
            if not math.isfinite(row.value):
                continue
            low = row.value < self.cfg.threshold
            if low == self.active:
                continue
            self.active = low
            evidence = Evidence(RULE, {self.cfg.metric: row.value}, {self.cfg.metric: self.cfg.threshold},
                                row.step, row.step, 1)
            message = (f"train/inference probability correlation {row.value:.4f} below {self.cfg.threshold} "
                       f"at policy v{row.step}: check the LM head precision" if low
                       else f"train/inference probability correlation back to {row.value:.4f}")
            out.alerts.append(AlertChange(ALERT, row.service or "learner", low, message,
                                          "critical" if low else "warning", evidence))
        return out
