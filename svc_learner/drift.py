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

# The last minibatch's mean |log ratio| of single batches, measured by bench/algorithms.py on task recheck
# (bench/README.md, "CISPO against DAPO"; 16 groups of 8 per batch, AdamW eps 1e-15). CALIBRATED_MAX: the
# largest batch of the runs that kept learning in the calibrated regime (lr 3e-4, 4 updates per batch;
# DAPO 5 seeds, CISPO seeds 0 and 3). FAILED_MAX: the largest batch of the runs that fell furthest: CISPO
# in the same regime (seed 1 at 0.25, held-out 0.49 -> 0.36; seed 4 at 0.46, pool 0.32 -> 0.13), DAPO at
# lr 1e-3 (0.82, pool 0.32 -> 0.06). Not separated by this measure: CISPO seed 2, whose pool accuracy fell
# 0.69 -> 0.60 at the end with no batch above 0.107.
CALIBRATED_MAX: dict[str, float] = {"dapo": 0.149, "cispo": 0.105}
FAILED_MAX: dict[str, float] = {"dapo": 0.82, "cispo": 0.25}
# Each limit lies between the two: no warning where the loss was measured to work, a warning on the
# batches that came with a fall. GRPO shares DAPO's trust region (the same mask, eps 0.2/0.2).
DEFAULT_LIMITS: dict[str, float] = {"cispo": 0.12, "dapo": 0.2, "grpo": 0.2}


def drift_limit(policy_loss: str, configured: float | None = None) -> float | None:
    """The configured limit, or the loss's default (None: a loss with no known limit is not checked)."""
    return configured if configured is not None else DEFAULT_LIMITS.get(policy_loss)


def drift_warning(stats: dict[str, float], policy_loss: str, limit: float | None) -> str | None:
    """A one-line warning when the batch's last-minibatch drift exceeds the limit, else None."""
    drift = stats.get("drift_abs_log_ratio_last")
    if limit is None or drift is None or drift <= limit:
        return None
    return (f"policy drift within the batch: the last minibatch's mean |log ratio| is {drift:.3f}, above "
            f"{limit:g} for {policy_loss} ({stats.get('updates', 0):.0f} updates, masked "
            f"{100 * stats.get('masked_frac', 0.0):.2f}% of tokens); lower train.lr or train.minibatches")
