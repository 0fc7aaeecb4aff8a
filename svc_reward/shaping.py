"""From per-sample scores to what the learner trains on: DAPO's soft overlong penalty,
group-relative advantages and dynamic sampling."""
from __future__ import annotations

import math
from collections.abc import Sequence


def overlong_penalty(length: int, max_len: int, buffer: int) -> float:
    """DAPO's soft penalty: 0 up to max_len - buffer, then linear down to -1 at max_len (and beyond)."""
    if buffer <= 0 or length <= max_len - buffer:
        return 0.0 if length <= max_len else -1.0
    return max(-1.0, (max_len - buffer - length) / buffer)


def group_advantages(rewards: Sequence[float], usable: Sequence[bool] | None = None,
                     eps: float = 1e-6) -> list[float]:
    """A_i = (R_i - mean) / std over the group's usable samples; unusable samples get 0."""
    usable = list(usable) if usable is not None else [True] * len(rewards)
    values = [r for r, ok in zip(rewards, usable) if ok]
    if len(values) < 2:
        return [0.0] * len(rewards)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [((r - mean) / (std + eps)) if ok else 0.0 for r, ok in zip(rewards, usable)]


def is_degenerate(rewards: Sequence[float], usable: Sequence[bool] | None = None, tol: float = 1e-9) -> bool:
    """Dynamic sampling: a group whose usable rewards are all equal teaches nothing."""
    usable = list(usable) if usable is not None else [True] * len(rewards)
    values = [r for r, ok in zip(rewards, usable) if ok]
    return len(values) < 2 or max(values) - min(values) <= tol
