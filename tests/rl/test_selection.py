"""What the learner trains on: completeness, infrastructure failures, staleness, shaping, dynamic sampling."""
import pytest
from scored import group

from m1flow.contracts import events
from m1flow.rl.config import AlgorithmConfig
from m1flow.rl.selection import ALL_EQUAL, EQUAL_TOL, TOO_FEW_USABLE, Selected, Skipped, check_group, nothing_to_learn
from m1flow.rl.shaping import ShapingConfig, overlong_penalty
from m1flow.status import Status

NO_SHAPING = ShapingConfig(format_reward=0.0, overlong_penalty=False)


def test_overlong_penalty_is_soft_then_full():
    assert overlong_penalty(6, 8, 2) == 0.0
    assert overlong_penalty(7, 8, 2) == -0.5
    assert overlong_penalty(8, 8, 2) == -1.0
    assert overlong_penalty(9, 8, 0) == -1.0


def test_shaping_adds_format_reward_and_overlong_penalty_to_the_verifier_reward():
    # window 8, buffer 2: lengths 2 and 7 (half into the ramp); the last one cut by the window with no answer
    g = group("s", [1.0, 0.0, 1.0, 0.0], lengths=[2, 2, 7, 8],
              statuses=[Status.OK, Status.OK, Status.OK, Status.FORMAT_ERROR],
              finish=[events.FINISH_REASON_STOP] * 3 + [events.FINISH_REASON_LENGTH])
    selected = AlgorithmConfig().select(g, current_version=0)
    assert selected.rewards == pytest.approx((1.1, 0.1, 1.1 - 0.5, -1.0))
    plain = AlgorithmConfig(shaping=NO_SHAPING).select(g, current_version=0)
    assert plain.rewards == (1.0, 0.0, 1.0, 0.0)


def test_infrastructure_failures_by_the_enum_are_left_out_and_not_normalised_over():
    g = group("i", [1.0, 0.0, 0.0, 7.0],
              statuses=[Status.OK, Status.OK, Status.FORMAT_ERROR, Status.SANDBOX_ERROR])
    selected = AlgorithmConfig(shaping=NO_SHAPING).select(g, current_version=0)
    assert isinstance(selected, Selected)
    assert selected.samples == (0, 1, 2) and selected.counts == {"infra_failure": 1}
    assert sum(selected.advantages) == pytest.approx(0.0, abs=1e-6) and selected.advantages[0] > 0


def test_stale_samples_are_left_out_and_an_all_stale_group_is_skipped():
    cfg = AlgorithmConfig(max_staleness=2, shaping=NO_SHAPING)
    mixed = group("m", [1.0, 0.0, 1.0, 0.0], versions=[5, 2, 3, 4])
    selected = cfg.select(mixed, current_version=5)
    assert selected.samples == (0, 2, 3) and selected.counts == {"stale": 1}
    stale = group("st", [1.0, 0.0], version=1)
    skipped = cfg.select(stale, current_version=5)
    assert isinstance(skipped, Skipped) and skipped.reason == TOO_FEW_USABLE and skipped.counts == {"stale": 2}


def test_dynamic_sampling_skips_groups_with_equal_shaped_rewards():
    flat = group("f", [1.0, 1.0, 1.0])
    assert AlgorithmConfig().select(flat, 0).reason == ALL_EQUAL
    kept = AlgorithmConfig(dynamic_sampling=False).select(flat, 0)
    assert isinstance(kept, Selected) and kept.advantages == (0.0, 0.0, 0.0)
    # equal verifier rewards that shaping tells apart are not degenerate
    apart = group("a", [1.0, 1.0], lengths=[2, 8])
    assert isinstance(AlgorithmConfig().select(apart, 0), Selected)


def test_nothing_to_learn_is_under_two_rewards_or_all_equal_within_the_tolerance():
    assert nothing_to_learn([]) and nothing_to_learn([0.5])
    assert nothing_to_learn([1.1, 1.1 + EQUAL_TOL / 2, 1.1])  # float noise from shaping is not a signal
    assert not nothing_to_learn([1.0, 1.0 + 10 * EQUAL_TOL])
    assert not nothing_to_learn([0.0, 1.0])


def test_the_configured_estimator_is_used():
    g = group("e", [1.0, 0.0, 0.0, 1.0, 1.0])
    assert AlgorithmConfig(advantage="rloo", shaping=NO_SHAPING).select(g, 0).advantages == pytest.approx(
        (0.5, -0.75, -0.75, 0.5, 0.5))


@pytest.mark.parametrize("make,field", [
    (lambda: group("c", [1.0, 0.0, 1.0], group_size=4), "not marked incomplete"),
    (lambda: group("c", [1.0, 0.0], indices=[0, 0]), "duplicate sample index"),
    (lambda: group("c", [1.0, 0.0], indices=[0, 2]), "sample index 2 >= group_size 2"),
    (lambda: group("c", [], group_size=2, incomplete=True), "no samples"),
    (lambda: group("c", [1.0, 0.0], statuses=[Status.OK, Status.UNSPECIFIED]), "status is unspecified"),
])
def test_a_group_cut_short_or_malformed_is_rejected_naming_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        check_group(make())


def test_an_incomplete_group_marked_by_the_reward_service_is_trainable():
    g = group("inc", [1.0, 0.0, 1.0], group_size=4, incomplete=True)
    check_group(g)
    assert isinstance(AlgorithmConfig().select(g, 0), Selected)


def test_config_names_are_checked_against_the_registries():
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        AlgorithmConfig(advantage="gae")
    with pytest.raises(ValueError, match="unknown policy loss"):
        AlgorithmConfig(policy_loss="ppo")
    assert AlgorithmConfig(policy_loss="grpo", eps_high=0.3).loss().eps_high == 0.3
