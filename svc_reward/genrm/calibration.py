"""Length-controlled recalibration of pairwise GenRM scores.

A judge that likes long answers teaches the policy to ramble. Following AlpacaEval's
length-controlled win rate, we fit P(A beats B) = sigmoid(b0 + b1 * tanh(dlen / sd)), where dlen is
len(A) - len(B) and sd its standard deviation in the fitted data; b1 is the length preference and
sigmoid(b0), the prediction at zero length difference, the length-controlled win rate.

To correct one verdict we keep its direction but move its expected value from the fitted
q = sigmoid(b0 + b1 x) to q0 = sigmoid(b0): in probability space p = (score + 1) / 2 becomes
p * q0 / q when length favoured the verdict's expectation (q > q0) and 1 - (1 - p)(1 - q0)/(1 - q)
otherwise. Both maps keep p in [0, 1] and give E[p'] = q0 whatever the length difference, so a
refit on corrected verdicts finds b1 near 0: that is `coefficient_after`.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable

import numpy as np

from m1flow.stats import fit_logistic

from .config import CalibrationConfig


@dataclass(frozen=True)
class LengthRecord:
    """One verdict: `score` in [-1, 1] for A against B, and the two lengths (tokens or characters)."""

    score: float
    len_a: int
    len_b: int


@dataclass(frozen=True)
class LengthCoefficients:
    """What the monitor publishes after a recalibration."""

    before: float  # b1 fitted on raw verdicts
    after: float  # b1 refitted on corrected verdicts
    intercept: float  # b0
    scale: float  # sd of the length difference
    raw_win_rate: float  # mean of (score + 1) / 2
    lc_win_rate: float  # sigmoid(b0)
    records: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


class LengthCalibrator:
    """Fits the length preference of recent verdicts and removes it from new ones."""

    def __init__(self, config: CalibrationConfig | None = None) -> None:
        self.config = config or CalibrationConfig()
        self.fitted = False
        self.intercept = 0.0
        self.coefficient_before = 0.0
        self.coefficient_after = 0.0
        self.scale = 1.0
        self.raw_win_rate = 0.5
        self.records = 0

    def fit(self, records: Iterable[LengthRecord]) -> LengthCoefficients:
        """Fit on raw verdicts, then refit on the corrected ones to check the length term is gone."""
        records = list(records)
        if len(records) < self.config.min_records:
            raise ValueError(f"need at least {self.config.min_records} verdicts, got {len(records)}")
        diff = np.array([r.len_a - r.len_b for r in records], dtype=float)
        p = np.clip((np.array([r.score for r in records], dtype=float) + 1) / 2, 0.0, 1.0)
        if p.min() == p.max():  # e.g. every rollout lost to the reference: no length signal to fit
            raise ValueError(f"all {len(records)} verdicts are equal; nothing to calibrate on")
        self.scale = float(diff.std()) or float(np.abs(diff).mean()) or 1.0
        x = np.tanh(diff / self.scale)
        self.intercept, self.coefficient_before = fit_logistic(x, p, self.config.l2, self.config.max_iter)
        self.fitted = True
        corrected = np.array([self._correct_p(pi, xi) for pi, xi in zip(p, x)])
        _, self.coefficient_after = fit_logistic(x, corrected, self.config.l2, self.config.max_iter)
        self.raw_win_rate = float(p.mean())
        self.records = len(records)
        return self.coefficients()

    def correct(self, score: float, len_a: int, len_b: int) -> float:
        """`score` of A against B with the fitted length preference removed; unchanged before a fit."""
        if not self.fitted:
            return score
        p = min(max((score + 1) / 2, 0.0), 1.0)
        return 2 * self._correct_p(p, math.tanh((len_a - len_b) / self.scale)) - 1

    def _correct_p(self, p: float, x: float) -> float:
        q = _sigmoid(self.intercept + self.coefficient_before * x)
        q0 = _sigmoid(self.intercept)
        if q >= q0:
            return p * q0 / q
        return 1 - (1 - p) * (1 - q0) / (1 - q)

    def coefficients(self) -> LengthCoefficients:
        return LengthCoefficients(
            before=self.coefficient_before, after=self.coefficient_after,
            intercept=self.intercept, scale=self.scale, raw_win_rate=self.raw_win_rate,
            lc_win_rate=_sigmoid(self.intercept), records=self.records)
