"""Small statistics that more than one service computes the same way.

The reward service fits a judge's length preference with `fit_logistic` when it recalibrates; the
monitor fits the same model to decide whether a recalibration is due, so the two numbers compare.
svc_eval reports held-out pass@k with `pass_at_k` and the interval of pass@1 with
`bootstrap_interval`; whoever reads its per-prompt counts back gets the same numbers from them.
"""
from __future__ import annotations

import math

import numpy as np


def fit_logistic(x: np.ndarray, p: np.ndarray, l2: float, max_iter: int) -> tuple[float, float]:
    """(b0, b1) minimising mean cross-entropy of soft targets p against sigmoid(b0 + b1 x), ridge l2.

    Newton's method on two parameters; the ridge keeps them finite when x separates p perfectly.
    """
    design = np.stack([np.ones_like(x), x], axis=1)
    beta = np.zeros(2)
    for _ in range(max_iter):
        q = 1.0 / (1.0 + np.exp(-(design @ beta)))
        grad = design.T @ (q - p) / len(p) + l2 * beta
        hess = (design.T * (q * (1 - q))) @ design / len(p) + l2 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(beta[0]), float(beta[1])


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 0, ties sharing their mean rank (what Spearman's correlation needs)."""
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    out = np.empty(len(values))
    start = 0
    while start < len(values):  # one run of equal values at a time
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        out[order[start:end + 1]] = (start + end) / 2
        start = end + 1
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Rank correlation of x and y; None when either is constant (no ordering to compare)."""
    rx, ry = ranks(x), ranks(y)
    if len(rx) < 2 or rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. (2021)'s unbiased pass@k of one prompt with n samples, c of them correct:
    1 - C(n-c, k) / C(n, k), the chance that k samples drawn without replacement from the n hold a
    correct one, in their numerically stable product form. Needs k <= n."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(judged: list[int], correct: list[int], k: int) -> float | None:
    """pass@k averaged over the prompts with at least k judged samples; None when none has."""
    values = [pass_at_k(n, c, k) for n, c in zip(judged, correct) if n >= k]
    return float(np.mean(values)) if values else None


def bootstrap_interval(rates: list[float], resamples: int = 2000, level: float = 0.95,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the mean of per-prompt rates, resampling prompts with replacement.

    Why prompts and not samples: the samples of one prompt share its difficulty, so they are not
    independent draws; a binomial (Wilson) interval over all samples would be too narrow by the
    design effect. A fixed seed makes the interval a function of the rates, as the rest of the
    result is. With every prompt at the same rate (all wrong, say) the interval is that point."""
    values = np.asarray(rates, dtype=float)
    if values.size == 0:
        raise ValueError("an interval needs at least one prompt")
    rng = np.random.Generator(np.random.PCG64(seed))
    means = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(axis=1)
    tail = (1.0 - level) / 2
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def two_proportion_test(correct_a: int, n_a: int, correct_b: int, n_b: int) -> tuple[float, float]:
    """The pooled two-proportion z-test of b's rate against a's: (z, two-sided p). It treats every
    sample as independent; samples of one prompt are not (they share its difficulty), so beside it
    use `paired_flip_test` over the prompts when both rates come from the same prompts."""
    if n_a < 1 or n_b < 1:
        raise ValueError(f"two_proportion_test needs samples on both sides, got n={n_a} and n={n_b}")
    pooled = (correct_a + correct_b) / (n_a + n_b)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    if se == 0:
        return 0.0, 1.0
    z = (correct_b / n_b - correct_a / n_a) / se
    return z, math.erfc(abs(z) / math.sqrt(2))


def paired_flip_test(differences: list[float], resamples: int = 20_000, seed: int = 0) -> float:
    """Two-sided p of a mean per-prompt difference (one version's rate minus another's on the same
    prompts) under the null of no change: each prompt's sign flipped at random (a randomisation test,
    exact in distribution for symmetric nulls, with no normal approximation for a few dozen prompts)."""
    d = np.asarray(differences, dtype=float)
    if d.size == 0:
        raise ValueError("paired_flip_test needs at least one prompt")
    observed = abs(d.mean())
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(resamples, d.size))
    extreme = int((np.abs((signs * d).mean(axis=1)) >= observed - 1e-12).sum())
    return (1 + extreme) / (1 + resamples)
