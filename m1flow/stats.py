"""Small statistics that more than one service computes the same way.

The reward service fits a judge's length preference with `fit_logistic` when it recalibrates; the
monitor fits the same model to decide whether a recalibration is due, so the two numbers compare.
"""
from __future__ import annotations

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
