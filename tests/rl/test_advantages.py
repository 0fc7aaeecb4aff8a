"""Each registered advantage estimator on rewards worked out by hand."""
import math

import pytest

from m1flow.rl.advantages import ADVANTAGE_ESTIMATORS, advantages, register_adv_est

REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0]  # mean 0.6, population std sqrt(0.24)


def test_grpo_normalises_by_the_group_std():
    std = math.sqrt(0.24)
    assert advantages("grpo", REWARDS) == pytest.approx([(r - 0.6) / (std + 1e-6) for r in REWARDS])
    assert advantages("grpo", [2.0, 0.0]) == pytest.approx([1.0, -1.0], abs=1e-5)  # scale-free


def test_dr_grpo_only_centres():
    assert advantages("dr_grpo", REWARDS) == pytest.approx([0.4, -0.6, -0.6, 0.4, 0.4])
    assert advantages("dr_grpo", [2.0, 0.0]) == pytest.approx([1.0, -1.0])


def test_rloo_uses_the_mean_of_the_others():
    # sample 0: 1 - mean(0, 0, 1, 1) = 0.5; sample 1: 0 - mean(1, 0, 1, 1) = -0.75
    assert advantages("rloo", REWARDS) == pytest.approx([0.5, -0.75, -0.75, 0.5, 0.5])
    n = len(REWARDS)
    assert advantages("rloo", REWARDS) == pytest.approx([a * n / (n - 1) for a in advantages("dr_grpo", REWARDS)])


def test_equal_rewards_and_lone_samples_get_zero():
    for name in ADVANTAGE_ESTIMATORS.names():
        assert advantages(name, [0.3, 0.3, 0.3]) == pytest.approx([0.0] * 3)
        assert advantages(name, [1.0]) == [0.0]


def test_registry_names_and_errors():
    assert ADVANTAGE_ESTIMATORS.names() == ("dr_grpo", "grpo", "rloo")
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'; known: dr_grpo, grpo, rloo"):
        advantages("ppo", REWARDS)
    with pytest.raises(ValueError, match="registered twice"):
        register_adv_est("grpo")(lambda rewards: list(rewards))
