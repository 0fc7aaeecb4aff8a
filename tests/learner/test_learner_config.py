"""One YAML file reaches every knob: nested blocks of the learner and of the reward service."""
import pytest
import yaml
from pydantic import ValidationError

from svc_learner.config import LearnerServiceConfig
from svc_reward.config import RewardConfig


def test_nested_yaml_blocks_and_json_flags_that_change_only_what_they_name(tmp_path):
    path = tmp_path / "learner.yaml"
    path.write_text(yaml.safe_dump({
        "batch_groups": 8, "batch_timeout_s": 5,
        "algorithm": {"advantage": "rloo", "policy_loss": "dapo", "eps_high": 0.3,
                      "shaping": {"format_reward": 0.2, "overlong_buffer_frac": 0.5}},
        "train": {"lr": 1e-5, "minibatches": 16}}))
    cfg = LearnerServiceConfig.load(["--config", str(path), "--algorithm", '{"shaping": {"format_reward": 0.0}}'],
                                    env={"M1FLOW_TRAIN": '{"grad_clip": 0.5}'})
    assert (cfg.batch_groups, cfg.batch_timeout_s) == (8, 5)
    assert (cfg.algorithm.advantage, cfg.algorithm.policy_loss, cfg.algorithm.eps_high) == ("rloo", "dapo", 0.3)
    assert cfg.algorithm.shaping.format_reward == 0.0 and cfg.algorithm.shaping.overlong_buffer_frac == 0.5
    assert (cfg.train.lr, cfg.train.minibatches, cfg.train.grad_clip) == (1e-5, 16, 0.5)
    assert cfg.algorithm.loss().eps_low == 0.2  # dapo's default, with the configured eps_high


def test_a_misspelt_nested_knob_is_an_error(tmp_path):
    path = tmp_path / "learner.yaml"
    path.write_text(yaml.safe_dump({"algorithm": {"adv_estimator": "grpo"}}))
    with pytest.raises(ValidationError, match="adv_estimator"):
        LearnerServiceConfig.load(["--config", str(path)], env={})


def test_reward_components_nest_under_the_reward_config(tmp_path):
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump({
        "math": {"workers": 1, "timeout_s": 2.5}, "code": {"mode": "all", "parallel": 2},
        "genrm": {"repeats": 2, "judge": "length", "calibration": {"l2": 0.5}}}))
    cfg = RewardConfig.load(["--config", str(path)], env={})
    assert (cfg.math.workers, cfg.math.timeout_s, cfg.code.mode, cfg.code.parallel) == (1, 2.5, "all", 2)
    assert cfg.genrm.repeats == 2 and cfg.genrm.judge == "length" and cfg.genrm.calibration.l2 == 0.5


def test_mismatch_bounds_that_make_no_sense_are_refused_at_start_up_naming_the_field(tmp_path):
    path = tmp_path / "learner.yaml"
    path.write_text(yaml.safe_dump({"algorithm": {"correction": {"icepop": {"lo": 2.0, "hi": 0.5}}},
                                    "train": {"old_logp_source": "recompute"}}))
    with pytest.raises(ValidationError, match=r"algorithm\.correction\.icepop[\s\S]*lo \(2\) > hi \(0\.5\)"):
        LearnerServiceConfig.load(["--config", str(path)], env={})
    with pytest.raises(ValidationError, match=r"algorithm\.correction\.tis_cap"):
        LearnerServiceConfig.load(["--algorithm", '{"correction": {"tis_cap": 0}}'], env={})


def test_a_mismatch_correction_needs_the_recomputed_proximal_logprobs():
    with pytest.raises(ValidationError, match="train.old_logp_source: recompute"):
        LearnerServiceConfig(algorithm={"correction": {"tis_cap": 2.0}})
    cfg = LearnerServiceConfig(algorithm={"correction": {"tis_cap": 2.0}}, train={"old_logp_source": "recompute"})
    assert cfg.algorithm.loss().correction.tis_cap == 2.0 and LearnerServiceConfig().algorithm.loss().correction is None
