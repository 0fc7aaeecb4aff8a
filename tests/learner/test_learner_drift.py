"""The drift the learner reports (the last minibatch's mean |log ratio|) and the warning it raises when a
batch drifts further than the policy loss tolerates (CISPO has no trust region)."""
from __future__ import annotations

import copy
import logging

import pytest
import torch
from learner_fixtures import arch, make_batch, tiny_model  # noqa: F401 - arch is a fixture

from m1flow.contracts import events
from m1flow.rl.config import AlgorithmConfig
from m1flow.rl.shaping import ShapingConfig
from m1flow.status import Status
from ops.warmstart import WarmStartConfig, warm_started_policy
from svc_learner.config import LearnerServiceConfig
from svc_learner.drift import CALIBRATED_MAX, DEFAULT_LIMITS, FAILED_MAX, drift_limit, drift_warning
from svc_learner.optim import make_optimizer
from svc_learner.trainer import Trainer
from svc_learner.update import (Ranks, SequenceLogprobs, TrainConfig, minibatch_indices, train_on_batch,
                                 trainable_mask)


def _mean_abs_log_ratio(model, batch) -> float:
    with torch.no_grad():
        logp = SequenceLogprobs(model)(batch.input_ids, batch.response_mask)[0]
    mask = trainable_mask(batch)
    return float(((logp - batch.rollout_logp).abs() * mask).sum() / mask.sum())


def test_drift_is_the_last_minibatch_against_the_behaviour_policy_after_the_other_updates(arch):
    torch.manual_seed(0)
    model = tiny_model(arch)
    batch = make_batch(model, n=8)
    twin = copy.deepcopy(model)
    cfg = TrainConfig(lr=3e-2, minibatches=2)
    stats = train_on_batch(model, make_optimizer(model.parameters(), cfg.lr), batch, cfg)
    # the same first update by hand, then measure the second minibatch
    first, second = minibatch_indices(len(batch), 2, Ranks())
    one = TrainConfig(lr=3e-2, minibatches=1)
    train_on_batch(twin, make_optimizer(twin.parameters(), one.lr), batch.select(first), one)
    expected = _mean_abs_log_ratio(twin, batch.select(second))
    assert expected > 0.01  # the first update moved the policy
    assert stats["drift_abs_log_ratio_last"] == pytest.approx(expected, rel=1e-4)
    assert 0 < stats["abs_log_ratio"] < stats["drift_abs_log_ratio_last"]  # minibatch 0 is on-policy
    assert 0.0 <= stats["pos_clip_high_share"] <= 1.0


def test_a_stale_behaviour_policy_is_drift_from_the_first_minibatch(arch):
    torch.manual_seed(0)
    model = tiny_model(arch)
    batch = make_batch(model, n=4)
    batch.rollout_logp = batch.rollout_logp - 0.3 * batch.response_mask
    cfg = TrainConfig(lr=1e-9, minibatches=1)
    stats = train_on_batch(model, make_optimizer(model.parameters(), cfg.lr), batch, cfg)
    assert stats["drift_abs_log_ratio_last"] == pytest.approx(0.3, rel=1e-4)


def test_limits_by_loss_and_the_warning_text():
    assert drift_limit("cispo") == DEFAULT_LIMITS["cispo"] < drift_limit("dapo") == DEFAULT_LIMITS["dapo"]
    assert drift_limit("cispo", 0.5) == 0.5 and drift_limit("unknown") is None
    quiet = {"drift_abs_log_ratio_last": DEFAULT_LIMITS["cispo"] / 2, "updates": 4.0}
    between = (DEFAULT_LIMITS["cispo"] + DEFAULT_LIMITS["dapo"]) / 2  # past CISPO's limit, within DAPO's
    loud = {"drift_abs_log_ratio_last": between, "updates": 4.0, "masked_frac": 0.0}
    assert drift_warning(quiet, "cispo", drift_limit("cispo")) is None
    assert "above" in drift_warning(loud, "cispo", drift_limit("cispo"))
    assert drift_warning(loud, "dapo", drift_limit("dapo")) is None
    assert drift_warning({}, "cispo", 0.01) is None and drift_warning(loud, "cispo", None) is None


@pytest.mark.parametrize("loss", ["dapo", "cispo"])
def test_limits_sit_between_the_calibrated_runs_and_the_failed_ones(loss):
    # bench/algorithms.py: the largest batch of a calibrated run that kept learning must not warn; the
    # largest batch of a run that fell must
    assert CALIBRATED_MAX[loss] < DEFAULT_LIMITS[loss] < FAILED_MAX[loss]
    assert drift_warning({"drift_abs_log_ratio_last": CALIBRATED_MAX[loss]}, loss, drift_limit(loss)) is None
    assert drift_warning({"drift_abs_log_ratio_last": FAILED_MAX[loss]}, loss, drift_limit(loss)) is not None
    assert DEFAULT_LIMITS["grpo"] == DEFAULT_LIMITS["dapo"]  # the same trust region


def _groups(trainer: Trainer, shift: float, n_groups: int = 2, group_size: int = 4) -> list[events.ScoredGroup]:
    """Groups whose recorded log-probs are the trainer's own policy's, minus `shift` (a stale sampler)."""
    gen = torch.Generator().manual_seed(0)
    vocab = trainer.model.config.vocab_size
    out = []
    for g in range(n_groups):
        ids = torch.randint(4, vocab, (group_size, 9), generator=gen)
        mask = torch.zeros(group_size, 9)
        mask[:, 3:] = 1
        with torch.no_grad():
            logp = SequenceLogprobs(trainer.model)(ids, mask)[0]
        group = events.ScoredGroup(group_id=f"g{g}", group_size=group_size)
        for i in range(group_size):
            group.samples.add(index=i, prompt_token_ids=ids[i, :3].tolist(), token_ids=ids[i, 3:].tolist(),
                              logprobs=(logp[i, 3:] - shift).tolist(), reward=float(i % 2), status=Status.OK,
                              policy_version=0, max_new_tokens=8)
        out.append(group)
    return out


@pytest.mark.parametrize("loss, shift, warns", [("cispo", 0.0, False), ("cispo", 0.16, True), ("dapo", 0.16, False),
                                                ("dapo", 0.5, True)])  # 0.16: past CISPO's limit, within DAPO's
def test_the_learner_warns_on_metrics_when_a_batch_drifts_past_its_loss_limit(tmp_path, caplog, loss, shift, warns):
    policy = warm_started_policy(tmp_path / "p0", WarmStartConfig(steps=1, batch_size=2))
    algorithm = AlgorithmConfig(policy_loss=loss, shaping=ShapingConfig(format_reward=0.0, overlong_penalty=False))
    cfg = LearnerServiceConfig(init_checkpoint=policy, checkpoint_dir=tmp_path / "ckpt", run_dir=tmp_path,
                               algorithm=algorithm, train=TrainConfig(lr=1e-7, minibatches=2))
    trainer = Trainer(cfg)
    selected = [algorithm.select(g, current_version=0) for g in _groups(trainer, shift)]
    with caplog.at_level(logging.WARNING, logger="svc_learner.trainer"):
        stats = trainer.step(selected, offsets={})
    assert stats["drift_abs_log_ratio_last"] == pytest.approx(shift, abs=1e-3)
    assert stats["drift_warning"] == float(warns)
    assert any("policy drift within the batch" in r.getMessage() for r in caplog.records) is warns
