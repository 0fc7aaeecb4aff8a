"""Length-controlled recalibration of pairwise GenRM scores.

A judge that likes long answers teaches the policy to ramble. Following AlpacaEval's
length-controlled win rate, we model P(A beats B) = sigmoid(b0 + b1 * tanh(dlen / sd)), where dlen is
len(A) - len(B) and sd its standard deviation in the fitted data; b1 is the length preference and
sigmoid(b0), the prediction at zero length difference, the length-controlled win rate.

Rollouts are scored against their group's Swiss-round winner, so each group has its own intercept
(how strong its reference is), and pooling groups under one b0 attenuates b1. The Swiss games
themselves (records without a group: two peers judged against each other, both orders) have no such
confound, so b1 and its tanh scale (a multiple of sd in SCALES, the one that fits best) are fitted on
them when there are `min_records`. They are also where a length-loving judge's preference shows: its
reference is the longest answer and beats nearly every rollout (all 256 verdicts against references
were losses in one simulated episode, tests/reward/test_genrm_adapting_policy.py), which leaves nothing
to fit b1 on. Without games, b1 is fitted within groups: for two verdicts against the same reference
of which one won, P(i is the winner) = sigmoid(b1 (x_i - x_j)), whatever the group's intercept
(conditional logit over discordant pairs); without `min_pairs` of those, pooled.

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
from typing import Callable, Iterable, Sequence

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
    after: float  # b1 refitted on the verdicts it was fitted on, as corrected (`LengthCalibrator._residual`)
    intercept: float  # b0
    scale: float  # sd of the length difference
    raw_win_rate: float  # mean of (score + 1) / 2
    lc_win_rate: float  # sigmoid(b0)
    records: int
    stages: int = 1  # correction stages in force after this fit (0: the judge's verdicts stand)

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


@dataclass
class _Stage:
    """One thinning pass: the length preference (b0, b1, tanh scale) fitted on the verdicts it corrects."""

    intercept: float = 0.0
    coefficient: float = 0.0
    scale: float = 1.0
    salt: str = ""  # makes this stage's draws independent of the other stages'
    within: bool = False  # b1 fitted on pairs (within groups or games between peers), else pooled over all
    peers: bool = False  # b1 fitted on the games between peers
    max_iter: int = 50

    def x(self, diff: np.ndarray | float) -> np.ndarray:
        return np.tanh(np.asarray(diff, dtype=float) / self.scale)

    def draw(self, key: str) -> float:
        return uniform(key + self.salt)

    def group_intercept(self, x: np.ndarray, p: np.ndarray) -> float:
        """MAP intercept of one group's verdicts under b1, with a normal prior around the pooled b0."""
        a = self.intercept
        for _ in range(self.max_iter):
            q = 1.0 / (1.0 + np.exp(-(a + self.coefficient * x)))
            grad = float((p - q).sum()) - GROUP_PRIOR * (a - self.intercept)
            step = grad / (float((q * (1 - q)).sum()) + GROUP_PRIOR)
            a += step
            if abs(step) < 1e-10:
                break
        return a

    def thin(self, x: np.ndarray, p: np.ndarray, keys: Sequence[str], a: float) -> list[float]:
        """Each verdict of a group with intercept `a` kept or replaced (see the module docstring)."""
        q0 = _sigmoid(a)
        out = []
        for pi, xi, key in zip(p, x, keys):
            q = _sigmoid(a + self.coefficient * xi)
            if q >= q0:
                out.append(float(pi) if self.draw(key) < q0 / q else 0.0)
            else:
                out.append(float(pi) if self.draw(key) < (1 - q0) / (1 - q) else 1.0)
        return out

    def correct_p(self, p: float, x: float) -> float:
        q = _sigmoid(self.intercept + self.coefficient * x)
        q0 = _sigmoid(self.intercept)
        if q >= q0:
            return p * q0 / q
        return 1 - (1 - p) * (1 - q0) / (1 - q)


class LengthCalibrator:
    """Fits the length preference of recent verdicts and removes it from new ones.

    A fit removes most of a judge's length preference, not always all of it: at 0.01 per character
    (bench/genrm.py calibration) the rank correlation falls from +0.46 to +0.11 (one stream +0.18), and
    a policy trained on the rewards climbs what is left (the demo's run 3: 11.8 -> 14.6 tokens after its
    first recalibration). Refitting on raw verdicts starts from scratch and leaves a residual again;
    `extended` instead fits one more stage on the verdicts as the current correction scored them
    (b1 1.33 left there; after that stage +0.00), so each recalibration removes what the ones before it
    left (or over-did), measured on traffic they did not see. New verdicts go through every stage in order.
    """

    def __init__(self, config: CalibrationConfig | None = None) -> None:
        self.config = config or CalibrationConfig()
        self.stages: list[_Stage] = []
        self.coefficient_before = 0.0
        self.coefficient_after = 0.0
        self.raw_win_rate = 0.5
        self.records = 0
        self._first = _Stage()

    @property
    def fitted(self) -> bool:
        return bool(self.stages)

    @property
    def intercept(self) -> float:
        return self._first.intercept

    @property
    def scale(self) -> float:
        return self._first.scale

    def fit(self, records: Iterable[LengthRecord]) -> LengthCoefficients:
        """Fit on raw verdicts, then refit on the corrected ones to check the length term is gone."""
        self.stages = []
        return self._add_stage(records, lambda b1: b1 > self.config.min_coefficient)

    def extended(self, records: Iterable[LengthRecord]) -> "LengthCalibrator":
        """A calibrator with this one's stages and one more, fitted on `records` as this one corrected
        them (`score` is the corrected score); the new stage corrects a residual preference either way
        (what is left, or an over-correction), if it is above `min_coefficient` in size."""
        out = LengthCalibrator(self.config)
        out.stages = list(self.stages)
        out._first = self._first
        out._add_stage(records, lambda b1: abs(b1) > self.config.min_coefficient)
        return out

    def _add_stage(self, records: Iterable[LengthRecord], needed: Callable[[float], bool]) -> LengthCoefficients:
        records = list(records)
        if len(records) < self.config.min_records:
            raise ValueError(f"need at least {self.config.min_records} verdicts, got {len(records)}")
        diff = np.array([r.len_a - r.len_b for r in records], dtype=float)
        p = np.clip((np.array([r.score for r in records], dtype=float) + 1) / 2, 0.0, 1.0)
        if p.min() == p.max():  # e.g. every rollout lost to the reference: no length signal to fit
            raise ValueError(f"all {len(records)} verdicts are equal; nothing to calibrate on")
        members = self._members([r.group for r in records])
        peers = np.array([not r.group for r in records])
        draws = [""] * len(records)  # the fit's draw key of each verdict: its group and place in it
        for key, idx in (members or {}).items():
            for i, j in enumerate(idx):
                draws[j] = f"{key}/{i}"
        stage = self._fit_stage(diff, p, members, peers, salt=f"#{len(self.stages)}" if self.stages else "")
        if not self.stages:
            self._first = stage
        self.coefficient_before = self.coefficient_after = stage.coefficient
        if needed(stage.coefficient):  # else: no length preference worth removing, verdicts stay as they are
            self.stages.append(stage)
            self.coefficient_after = self._residual(stage, diff, p, members, draws, peers)
        self.raw_win_rate = float(p[~peers].mean() if members else p.mean())
        self.records = len(records)
        return self.coefficients()

    def correct(self, score: float, len_a: int, len_b: int) -> float:
        """The expected score of A against B with the fitted length preference removed (pooled intercepts);
        unchanged before a fit. A group's rewards go through `correct_group`."""
        p = min(max((score + 1) / 2, 0.0), 1.0)
        for stage in self.stages:
            p = stage.correct_p(p, float(stage.x(len_a - len_b)))
        return 2 * p - 1 if self.stages else score

    def correct_group(self, scores: Sequence[float], lengths: Sequence[int], reference_length: int,
                      keys: Sequence[str], is_reference: Sequence[bool]) -> list[float]:
        """Scores of a group's answers against its reference, thinned so that none is worth more or less
        for its length; an answer that is the reference (it tied itself) is drawn at q0. `keys` fix
        each answer's draw."""
        others = [i for i, ref in enumerate(is_reference) if not ref]
        if not self.stages or not others:
            return list(scores)
        diff = np.array(lengths, dtype=float)[others] - reference_length
        p = np.clip((np.array(scores, dtype=float) + 1) / 2, 0.0, 1.0)[others]
        q0 = 0.5
        for stage in self.stages:
            x = stage.x(diff)
            a = stage.group_intercept(x, p)
            q0 = _sigmoid(a)
            p = np.array(stage.thin(x, p, [keys[i] for i in others], a))
        last = self.stages[-1]
        out = [1.0 if last.draw(key) < q0 else -1.0 for key in keys]
        for i, value in zip(others, p):
            out[i] = 2 * float(value) - 1
        return out

    def _members(self, keys: list[str]) -> dict[str, list[int]] | None:
        """Indices of the verdicts against a reference, by group; None when there are none."""
        members: dict[str, list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            if key:
                members[key].append(i)
        return dict(sorted(members.items())) or None

    def _fit_stage(self, diff: np.ndarray, p: np.ndarray, members: dict[str, list[int]] | None,
                   peers: np.ndarray, salt: str) -> _Stage:
        """b1 and its tanh scale, the one of SCALES that explains the verdicts best: from games between
        peers when there are `min_records` of them, else within groups, else pooled; and b0, pooled
        over the verdicts against references (all verdicts when there are none)."""
        spread = float(diff.std()) or float(np.abs(diff).mean()) or 1.0
        stage, best = _Stage(scale=spread, salt=salt, max_iter=self.config.max_iter), -math.inf
        games = p[peers]
        use_peers = members is not None and len(games) >= self.config.min_records and games.min() < games.max()
        for scale in (spread * m for m in SCALES):
            if use_peers:
                b1, loglik = self._pooled(np.tanh(diff[peers] / scale), games)
            else:
                groups = self._groups(members, np.tanh(diff / scale), p)
                if groups is None:
                    continue
                b1, loglik = self._within(groups)
            if loglik > best:
                best, stage.within, stage.scale, stage.coefficient = loglik, True, scale, b1
                stage.peers = use_peers
        judged = ~peers if members is not None else np.ones(len(p), dtype=bool)
        stage.intercept, pooled = fit_logistic(stage.x(diff[judged]), p[judged], self.config.l2, self.config.max_iter)
        if not stage.within:
            stage.coefficient = pooled
        return stage

    def _residual(self, stage: _Stage, diff: np.ndarray, p: np.ndarray, members: dict[str, list[int]] | None,
                  draws: list[str], peers: np.ndarray) -> float:
        """b1 of the verdicts the stage's b1 was fitted on, as the stage corrects them, at its scale: the games
        between peers, each thinned at the games' own intercept, when b1 came from them; else each group
        thinned, or each pair mapped.

        The same verdicts as the fit's, so `before` and `after` compare. A length-loving judge's reference
        beats nearly every rollout, which leaves few discordant pairs within groups (18 of 112 verdicts at the
        broker loop's detection, tests/integration/test_genrm_loop.py); b1 refitted on those after thinning
        came out anywhere from -0.05 to 5.98 for a fit of 4.75-6.6 (the 112 games: 0.33-0.70)."""
        x = stage.x(diff)
        if stage.peers:
            games = p[peers]
            intercept = fit_logistic(x[peers], games, self.config.l2, self.config.max_iter)[0]
            thinned = stage.thin(x[peers], games, [f"game/{i}" for i in range(len(games))], intercept)
            return self._pooled(x[peers], np.array(thinned))[0]
        groups = self._groups(members, x, p) if stage.within else None
        if groups is None:
            judged = [j for idx in members.values() for j in idx] if members else list(range(len(p)))
            corrected = np.array([stage.correct_p(p[j], x[j]) for j in judged])
            return fit_logistic(x[judged], corrected, self.config.l2, self.config.max_iter)[1]
        thinned = [(gx, np.array(stage.thin(gx, gp, [draws[j] for j in idx], stage.group_intercept(gx, gp))))
                   for (gx, gp), idx in zip(groups, members.values())]
        return self._within(thinned)[0]

    def _groups(self, members: dict[str, list[int]] | None, x: np.ndarray,
                p: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Verdicts by group, or None when too few discordant within-group pairs to fit on."""
        if members is None:
            return None
        groups = [(x[idx], p[idx]) for idx in members.values()]
        dx, _ = within_group_pairs(groups)
        return groups if len(dx) // 2 >= self.config.min_pairs else None

    def _pooled(self, x: np.ndarray, p: np.ndarray) -> tuple[float, float]:
        """b1 of independent pairs and their mean log-likelihood under the fit."""
        b0, b1 = fit_logistic(x, p, self.config.l2, self.config.max_iter)
        q = np.clip(1.0 / (1.0 + np.exp(-(b0 + b1 * x))), 1e-12, 1 - 1e-12)
        return b1, float(np.mean(p * np.log(q) + (1 - p) * np.log(1 - q)))

    def _within(self, groups: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float]:
        """b1 of the within-group pairs and their mean log-likelihood under it."""
        dx, won = within_group_pairs(groups)
        return self._pooled(dx, won) if len(dx) else (0.0, 0.0)  # the pairs are independent given b1

    def coefficients(self) -> LengthCoefficients:
        return LengthCoefficients(
            before=self.coefficient_before, after=self.coefficient_after,
            intercept=self.intercept, scale=self.scale, raw_win_rate=self.raw_win_rate,
            lc_win_rate=_sigmoid(self.intercept), records=self.records, stages=len(self.stages))
