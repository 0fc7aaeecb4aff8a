"""The learner's checkpoints written on the writer's thread (svc_learner.writer) while the next batch
trains: byte for byte what the step itself would have written, announced in version order with the
version's own statistics, and a failed write stops the learner instead of passing in silence."""
from __future__ import annotations

import pytest
import torch
from learner_fixtures import ARCHS
from test_trainer_models import WARM, scored_group

from m1flow import checkpoint
from m1flow.rl.config import AlgorithmConfig
from m1flow.tokenizer import build_tokenizer
from ops.warmstart import WarmStartConfig, build_model
from svc_learner.config import LearnerServiceConfig
from svc_learner.trainer import Trainer


def trainer_at(tmp_path, name: str, policy, async_checkpoint: bool) -> Trainer:
    cfg = LearnerServiceConfig(run_dir=tmp_path / name, init_checkpoint=policy, batch_groups=2,
                               async_checkpoint=async_checkpoint, keep_checkpoints=10,
                               train={"lr": 1e-3, "minibatches": 2})
    return Trainer(cfg)


def batch(trainer: Trainer, step: int):
    vocab = trainer.model.config.vocab_size
    return [AlgorithmConfig().select(scored_group(f"s{step}g{i}", vocab, 1.0), current_version=step)
            for i in range(2)]


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    tok, root = build_tokenizer(), tmp_path_factory.mktemp("policies")
    return {arch: checkpoint.save_policy(root / arch, build_model(tok, WarmStartConfig(arch=WARM[arch])), tok)
            for arch in ARCHS}


@pytest.mark.parametrize("arch", ARCHS)
def test_written_beside_the_next_step_equals_written_in_the_step(tmp_path, policies, arch):
    """Three steps back to back, each starting while the last one's write may still run: every
    version's weights, optimizer state and learner state equal those of a learner that writes inside
    its step (the live model moved on, the copy did not)."""
    beside = trainer_at(tmp_path, "async", policies[arch], True)
    inside = trainer_at(tmp_path, "sync", policies[arch], False)
    announced = []
    beside.on_written = lambda: announced.append(beside.announcement("run").version)
    for step in range(3):
        beside.step(batch(beside, step), {"scored/0": 2 * (step + 1)})
        inside.step(batch(inside, step), {"scored/0": 2 * (step + 1)})
    beside.wait_written()
    assert announced == [1, 2, 3]
    for version in (1, 2, 3):
        a = checkpoint.version_dir(beside.cfg.checkpoint_root(), version)
        b = checkpoint.version_dir(inside.cfg.checkpoint_root(), version)
        assert checkpoint.weights_sha256(a) == checkpoint.weights_sha256(b), version
        assert checkpoint.load_state(a) == checkpoint.load_state(b)
        opt_a, opt_b = (torch.load(d / checkpoint.OPTIMIZER_FILE, weights_only=True) for d in (a, b))
        assert opt_a["param_groups"] == opt_b["param_groups"]
        for key, state in opt_a["state"].items():
            for name, value in state.items():
                assert torch.equal(value, opt_b["state"][key][name]), (version, key, name)
    policy = beside.announcement("run")
    assert (policy.version, policy.sha256) == (3, inside.sha)
    assert policy.stats["save_s"] > 0 and policy.stats["update_s"] > 0 and policy.stats["groups"] == 2


def test_a_failed_write_stops_the_learner_at_its_next_step(tmp_path, policies, monkeypatch):
    trainer = trainer_at(tmp_path, "failing", policies["qwen2"], True)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trainer.store, "save", disk_full)
    trainer.step(batch(trainer, 0), {"scored/0": 2})  # handed to the writer: the failure comes later
    with pytest.raises(RuntimeError, match="writing the learner's checkpoint failed: .*No space left"):
        trainer.step(batch(trainer, 1), {"scored/0": 4})
    assert trainer.announcement("run").version == 0  # nothing unwritten was ever announced
