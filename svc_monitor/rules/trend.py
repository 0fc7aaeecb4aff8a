"""Proportions with their sampling error, and the trend of a series of them with a confidence bound:
what the curriculum's "stopped improving" is decided on, so that it does not fire on noise.

**A window's accuracy** (`Estimate.from_groups`) is correct / judged over the window's groups. Its
standard error respects that the samples of one group answer one prompt and are correlated (an easy
prompt is solved by most of its G samples, a hard one by none): it is the cluster-robust
(linearisation) variance of a ratio over the m groups,

    Var = m / (m - 1) * sum_i (c_i - p * n_i)^2 / N^2        (c_i correct of n_i judged, N = sum n_i)

which is, in expectation for groups of G samples, the binomial p(1-p)/N times the design effect
1 + (G-1)*ICC, whatever the intra-group correlation ICC, without having to know it. It is floored
at the binomial variance of the Laplace-smoothed proportion (C+1)/(N+2): with few groups the
cluster estimate is itself noisy and can come out far too small, and a window at 0 or 1 is not
known exactly. Other series (held-out pass@1
per set, from an evaluation stage) come as `Estimate.from_counts` (a binomial with a design effect,
e.g. 1 + (k-1)*ICC for k samples per prompt) or with a standard error they computed themselves: the
rule only needs (estimate, standard error, samples) per point.

**The gain** (`trend`) over the last K points (K = `windows` + 1 of a condition: N window-to-window
gains) is the ordinary least-squares slope against the window index, in accuracy per window, the
unit of the old window-to-window gain. Its variance is exact for independent points of known
variance: Var(b) = sum_i w_i^2 se_i^2 with w_i = (x_i - mean x) / sum (x_j - mean x)^2 (windows hold
disjoint groups, so their errors are independent). Equal weights, not 1/se^2: an estimated standard
error is correlated with its proportion (below 0.5 a lower accuracy has a smaller binomial error),
and weighting by it would bias the slope. A slope over K points is much more precise than one
difference (K = 3: standard error se/sqrt(2) against se*sqrt(2) for the difference of two windows;
K = 4: se/sqrt(5)), which is what lets a true plateau be recognised within a few windows. Other
references were weighed: the previous window alone is that noisy difference; the best earlier
window is the maximum of noisy estimates, biased upward, so a gain over it reads too low and fires
early; a slope over the whole stage mixes the learning phase into the plateau and recognises it late.

**The decision** is a one-sided test: "gain below T" holds when the upper bound b + t*se(b) is below
T; "above T" when the lower bound b - t*se(b) is above it. t is the one-sided quantile of Student's
t at `confidence` with the Welch-Satterthwaite degrees of freedom of se(b) (each point's variance
estimated from its m groups has m - 1; a binomial one counts as known): the standard errors are
estimated, and with the normal quantile (1.645 at 0.95) the rule fired on a gain exactly at the
threshold on 5.4% of windows in the simulation (icc 0.25) instead of 5.0%. If the true gain over the
span is at or above T, the bound falls below T with a chance of at most 1 - confidence, so on any
one window the rule fires on a real gain with a chance of at most 5% at the default confidence
(checked by simulation with the real rule, tests/monitor/test_plateau_simulation.py). That is a rate
per window: over k windows at risk the chance of one false trigger adds up to as much as k times it,
which the simulation reports too; a higher `confidence` lowers both, and so does a longer `windows`
for gains above T.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist


@dataclass(frozen=True)
class Estimate:
    """A proportion measured on `n` samples (in `groups` independent groups of them; 0: not known)
    with its standard error, estimated with `df` degrees of freedom (inf: taken as known)."""

    value: float
    se: float
    n: int
    groups: int = 0
    df: float = math.inf

    @classmethod
    def from_groups(cls, counts: Iterable[tuple[int, int]]) -> Estimate | None:
        """From (correct, judged) per group: the ratio and its cluster-robust standard error (floored
        at the smoothed binomial one, module docstring). None when nothing was judged."""
        groups = [(c, n) for c, n in counts if n > 0]
        total = sum(n for _, n in groups)
        if not total:
            return None
        correct = sum(c for c, _ in groups)
        p = correct / total
        variance, df = _binomial_variance(correct, total), math.inf
        m = len(groups)
        if m > 1:
            cluster = m / (m - 1) * sum((c - p * n) ** 2 for c, n in groups) / total ** 2
            if cluster > variance:
                variance, df = cluster, m - 1
        return cls(p, math.sqrt(variance), total, m, df)

    @classmethod
    def from_counts(cls, correct: float, n: int, design_effect: float = 1.0, groups: int = 0) -> Estimate:
        """From totals alone: the binomial standard error (smoothed) times sqrt(design_effect)
        (taken as known: df inf)."""
        if n <= 0:
            raise ValueError(f"an estimate needs samples, got n={n}")
        if design_effect < 1.0:
            raise ValueError(f"a design effect is at least 1, got {design_effect}")
        return cls(correct / n, math.sqrt(_binomial_variance(correct, n) * design_effect), n, groups)


def _binomial_variance(correct: float, n: int) -> float:
    p = (correct + 1) / (n + 2)
    return p * (1 - p) / n


@dataclass(frozen=True)
class Gain:
    """The slope of a series per step (window) over `windows` steps, with its standard error (of
    `df` degrees of freedom) and the samples behind its points."""

    value: float
    se: float
    windows: int
    n: int
    df: float = math.inf

    def upper(self, confidence: float) -> float:
        return self.value + t_score(confidence, self.df) * self.se

    def lower(self, confidence: float) -> float:
        return self.value - t_score(confidence, self.df) * self.se


def t_score(confidence: float, df: float = math.inf) -> float:
    """The one-sided quantile of Student's t with `df` degrees of freedom (inf: the normal's, 1.645 at
    0.95; 0 at 0.5 whatever df): the Cornish-Fisher expansion of Abramowitz & Stegun 26.7.5, within
    0.2% of the exact value from 3 degrees of freedom (t(0.95, 3) = 2.353), 5% at 1."""
    z = NormalDist().inv_cdf(confidence)
    if not math.isfinite(df):
        return z
    v = max(df, 1.0)
    terms = ((z ** 3 + z) / 4, (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96,
             (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384,
             (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160)
    return z + sum(g / v ** (i + 1) for i, g in enumerate(terms))


def trend(points: Sequence[tuple[float, Estimate]]) -> Gain | None:
    """The least-squares slope of (x, estimate) points (x: the window index) and its standard error
    from the points' own (module docstring); None with fewer than two distinct x."""
    if len(points) < 2:
        return None
    xs = [x for x, _ in points]
    mean = sum(xs) / len(xs)
    sxx = sum((x - mean) ** 2 for x in xs)
    if sxx <= 0:
        return None
    weights = [(x - mean) / sxx for x in xs]
    value = sum(w * e.value for w, (_, e) in zip(weights, points))
    parts = [(w * e.se) ** 2 for w, (_, e) in zip(weights, points)]  # each point's share of Var(b)
    variance = sum(parts)
    # Welch-Satterthwaite: the degrees of freedom of a sum of variances estimated with df_i each
    spread = sum(v * v / e.df for v, (_, e) in zip(parts, points) if math.isfinite(e.df))
    df = variance * variance / spread if spread > 0 else math.inf
    return Gain(value, math.sqrt(variance), len(points) - 1, sum(e.n for _, e in points), df)
