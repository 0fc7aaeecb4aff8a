"""The drift warning: the policy moved further within one batch than its objective tolerates.

Each batch is reused for several minibatch updates, so by the last one the policy is no longer the
one that sampled the batch. The drift is measured as the last minibatch's mean |log ratio| against
the behaviour policy (`drift_abs_log_ratio_last` of run_updates). PPO-style losses (DAPO, GRPO) drop
the tokens that left their trust region, so a run that drifts loses some gradient but stays put;
CISPO keeps every token and only caps its weight, so it has no trust region: with large drift it
keeps pushing the tokens that already moved, and collapses (bench/algorithms.py --regime stress,
bench/README.md).
"""
from __future__ import annotations

from collections.abc import Mapping

# The last minibatch's mean |log ratio| of single batches on task recheck, as bench/algorithms.py
# measured it: CALIBRATED_MAX the largest batch of the runs that kept learning, FAILED_MAX of those
# that fell furthest; each limit lies between the two. The runs behind each figure: bench/README.md,
# "Drift limits of the learner".
CALIBRATED_MAX: dict[str, float] = {"dapo": 0.149, "cispo": 0.105}
FAILED_MAX: dict[str, float] = {"dapo": 0.82, "cispo": 0.25}
# GRPO shares DAPO's trust region (the same mask, eps 0.2/0.2).
DEFAULT_LIMITS: dict[str, float] = {"cispo": 0.12, "dapo": 0.2, "grpo": 0.2}


def drift_limit(policy_loss: str, configured: float | None = None) -> float | None:
    """The configured limit, or the loss's default (None: a loss with no known limit is not checked)."""
    return configured if configured is not None else DEFAULT_LIMITS.get(policy_loss)


def drift_warning(stats: Mapping[str, float], policy_loss: str, limit: float | None) -> str | None:
    """A one-line warning when the batch's last-minibatch drift exceeds the limit, else None."""
    drift = stats.get("drift_abs_log_ratio_last")
    if limit is None or drift is None or drift <= limit:
        return None
    return (f"policy drift within the batch: the last minibatch's mean |log ratio| is {drift:.3f}, above "
            f"{limit:g} for {policy_loss} ({stats.get('updates', 0):.0f} updates, masked "
            f"{100 * stats.get('masked_frac', 0.0):.2f}% of tokens); lower train.lr or train.minibatches")
