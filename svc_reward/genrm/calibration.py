"""Length-controlled recalibration of pairwise GenRM scores.

A judge that likes long answers teaches the policy to ramble. Following AlpacaEval's
length-controlled win rate, we model P(A beats B) = sigmoid(b0 + b1 * tanh(dlen / sd)), where dlen is
len(A) - len(B) and sd its standard deviation in the fitted data; b1 is the length preference and
sigmoid(b0), the prediction at zero length difference, the length-controlled win rate.

Rollouts are scored against their group's Swiss-round winner, so each group has its own intercept
(how strong its reference is). Pooling groups under one b0 attenuates b1, so b1 is fitted within
groups: for two verdicts against the same reference of which one won, P(i is the winner) =
sigmoid(b1 (x_i - x_j)), whatever the group's intercept (conditional logit over discordant pairs),
with the tanh scale (a multiple of sd in SCALES) that fits those pairs best. Records without a group
(independent pairs) fall back to the pooled fit.

A group is corrected as a whole (`correct_group`): its intercept a is fitted to its own verdicts
under b1 (shrunk towards the pooled b0), and each verdict is thinned so that, at every length
difference, it is distributed as a verdict at zero length difference, Bernoulli(q0 = sigmoid(a)):
a verdict the length favoured (q = sigmoid(a + b1 x) > q0) is kept with chance q0 / q and becomes a
loss otherwise; one it disfavoured is kept with chance (1 - q0) / (1 - q) and becomes a win
otherwise. Thinning keeps the judge's score levels. The deterministic map p -> p q0 / q (one pooled
fit, each verdict moved to its expectation) had the same mean but gave the many tied losses against a
strong reference a strict shorter-is-better order, which the monitor's rank signals read as a length
correlation of -0.3 to -0.5 while the mean reward still rose with length: the over-correction
(tests/reward/test_genrm_calibration_stream.py, bench/genrm.py). The reference, which tied itself, is
drawn from Bernoulli(q0) too: the Swiss rounds of a length-loving judge pick a long reference, and its
tie with itself was the largest length-bought reward left once the others were thinned.

A fit whose b1 is at most `min_coefficient` leaves verdicts as judged, so recalibrating a judge
without a length preference does not turn its references into coin flips. The draws come from a
hash of the texts, so a group scored again gets the same rewards.
"""
from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np

from m1flow.stats import fit_logistic

from .config import CalibrationConfig

GROUP_PRIOR = 1.0  # precision of a group's intercept around the pooled b0 (logit units)
SCALES = (0.25, 0.5, 1.0, 2.0)  # multiples of the length difference's sd tried as the tanh scale


@dataclass(frozen=True)
class LengthRecord:
    """One verdict: `score` in [-1, 1] for A against B, the two lengths (tokens or characters), and the
    group (verdicts against the same reference share one; empty: an independent pair)."""

    score: float
    len_a: int
    len_b: int
    group: str = ""


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


def text_key(*texts: str) -> str:
    """A short stable key of texts: a group is its prompt and reference, an answer its group and text."""
    return hashlib.blake2b("\x1f".join(texts).encode(), digest_size=12).hexdigest()


def uniform(key: str) -> float:
    """A draw in [0, 1) fixed by `key`: the same verdict is thinned the same way every time."""
    return int(text_key(key)[:16], 16) / 2.0 ** 64


def within_group_pairs(groups: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(x_i - x_j, 1) and (x_j - x_i, 0) for every pair in a group where verdict i beat verdict j."""
    dx: list[float] = []
    for x, p in groups:
        for i in range(len(p)):
            for j in range(len(p)):
                if p[i] > p[j]:
                    dx.append(x[i] - x[j])
    dx_arr = np.array(dx, dtype=float)
    return np.concatenate([dx_arr, -dx_arr]), np.concatenate([np.ones(len(dx)), np.zeros(len(dx))])


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
        spread = float(diff.std()) or float(np.abs(diff).mean()) or 1.0
        keys = [r.group for r in records]
        grouped, self.scale, best = None, spread, -math.inf
        for scale in (spread * m for m in SCALES):  # the scale whose within-group fit explains them best
            groups = self._groups(keys, np.tanh(diff / scale), p)
            if groups is None:
                continue
            b1, loglik = self._within(groups)
            if loglik > best:
                best, grouped, self.scale, self.coefficient_before = loglik, groups, scale, b1
        x = np.tanh(diff / self.scale)
        self.intercept, pooled = fit_logistic(x, p, self.config.l2, self.config.max_iter)
        if grouped is None:
            self.coefficient_before = pooled
        self.fitted = self.coefficient_before > self.config.min_coefficient
        if not self.fitted:  # no length preference worth removing: verdicts stay as judged
            self.coefficient_after = self.coefficient_before
        elif grouped is not None:
            corrected = [(gx, np.array(self._thin(gx, gp, [f"{k}/{i}" for i in range(len(gp))],
                                                  self._group_intercept(gx, gp))))
                         for (gx, gp), k in zip(grouped, sorted(set(keys)))]
            self.coefficient_after = self._within(corrected)[0]
        else:
            corrected_p = np.array([self._correct_p(pi, xi) for pi, xi in zip(p, x)])
            _, self.coefficient_after = fit_logistic(x, corrected_p, self.config.l2, self.config.max_iter)
        self.raw_win_rate = float(p.mean())
        self.records = len(records)
        return self.coefficients()

    def correct(self, score: float, len_a: int, len_b: int) -> float:
        """The expected score of A against B with the fitted length preference removed (pooled intercept);
        unchanged before a fit. A group's rewards go through `correct_group`."""
        if not self.fitted:
            return score
        p = min(max((score + 1) / 2, 0.0), 1.0)
        return 2 * self._correct_p(p, math.tanh((len_a - len_b) / self.scale)) - 1

    def correct_group(self, scores: Sequence[float], lengths: Sequence[int], reference_length: int,
                      keys: Sequence[str], is_reference: Sequence[bool]) -> list[float]:
        """Scores of a group's answers against its reference, thinned so that none is worth more or less
        for its length; an answer that is the reference (it tied itself) is drawn at q0. `keys` fix
        each answer's draw."""
        if not self.fitted:
            return list(scores)
        others = [i for i, ref in enumerate(is_reference) if not ref]
        if not others:
            return list(scores)
        x = np.tanh((np.array(lengths, dtype=float) - reference_length) / self.scale)[others]
        p = np.clip((np.array(scores, dtype=float) + 1) / 2, 0.0, 1.0)[others]
        a = self._group_intercept(x, p)
        out = [1.0 if uniform(key) < _sigmoid(a) else -1.0 for key in keys]
        for i, value in zip(others, self._thin(x, p, [keys[i] for i in others], a)):
            out[i] = 2 * value - 1
        return out

    def _groups(self, keys: list[str], x: np.ndarray, p: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Verdicts by group, or None when too few discordant within-group pairs to fit on."""
        if not all(keys):
            return None
        members: dict[str, list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            members[key].append(i)
        groups = [(x[idx], p[idx]) for _, idx in sorted(members.items())]
        dx, _ = within_group_pairs(groups)
        return groups if len(dx) // 2 >= self.config.min_records else None

    def _within(self, groups: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float]:
        """b1 of the within-group pairs and their mean log-likelihood under it."""
        dx, won = within_group_pairs(groups)
        if not len(dx):
            return 0.0, 0.0
        b0, b1 = fit_logistic(dx, won, self.config.l2, self.config.max_iter)
        q = np.clip(1.0 / (1.0 + np.exp(-(b0 + b1 * dx))), 1e-12, 1 - 1e-12)
        return b1, float(np.mean(won * np.log(q) + (1 - won) * np.log(1 - q)))

    def _group_intercept(self, x: np.ndarray, p: np.ndarray) -> float:
        """MAP intercept of one group's verdicts under b1, with a normal prior around the pooled b0."""
        a = self.intercept
        for _ in range(self.config.max_iter):
            q = 1.0 / (1.0 + np.exp(-(a + self.coefficient_before * x)))
            grad = float((p - q).sum()) - GROUP_PRIOR * (a - self.intercept)
            step = grad / (float((q * (1 - q)).sum()) + GROUP_PRIOR)
            a += step
            if abs(step) < 1e-10:
                break
        return a

    def _thin(self, x: np.ndarray, p: np.ndarray, keys: Sequence[str], a: float) -> list[float]:
        """Each verdict of a group with intercept `a` kept or replaced (see the module docstring)."""
        q0 = _sigmoid(a)
        out = []
        for pi, xi, key in zip(p, x, keys):
            q = _sigmoid(a + self.coefficient_before * xi)
            if q >= q0:
                out.append(float(pi) if uniform(key) < q0 / q else 0.0)
            else:
                out.append(float(pi) if uniform(key) < (1 - q0) / (1 - q) else 1.0)
        return out

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
