"""Advantage estimators: a group's rewards in, one advantage per sample out.

Each estimator sees only the rewards of the samples the learner may train on (selection leaves out
infrastructure failures and stale samples), at least two of them.

* grpo: (R_i - mean) / (std + eps), the group normalisation of GRPO and of the report.
* dr_grpo: R_i - mean. Dr. GRPO drops the std: dividing by it up-weights groups whose rewards barely
  differ (nearly solved or nearly hopeless prompts), a difficulty bias.
* rloo: R_i - mean of the other samples (REINFORCE leave-one-out), an unbiased baseline; equals
  n / (n - 1) x dr_grpo.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from m1flow.registry import Registry

AdvantageEstimator = Callable[[Sequence[float]], list[float]]
ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")
register_adv_est = ADVANTAGE_ESTIMATORS.register

STD_EPS = 1e-6


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


@register_adv_est("grpo")
def grpo(rewards: Sequence[float]) -> list[float]:
    mean = _mean(rewards)
    std = math.sqrt(_mean([(r - mean) ** 2 for r in rewards]))
    return [(r - mean) / (std + STD_EPS) for r in rewards]


@register_adv_est("dr_grpo")
def dr_grpo(rewards: Sequence[float]) -> list[float]:
    mean = _mean(rewards)
    return [r - mean for r in rewards]


@register_adv_est("rloo")
def rloo(rewards: Sequence[float]) -> list[float]:
    total, n = sum(rewards), len(rewards)
    return [r - (total - r) / (n - 1) for r in rewards]


def advantages(name: str, rewards: Sequence[float]) -> list[float]:
    """The named estimator's advantages; a group of fewer than two has no baseline: zeros."""
    if len(rewards) < 2:
        return [0.0] * len(rewards)
    return ADVANTAGE_ESTIMATORS.get(name)(rewards)
