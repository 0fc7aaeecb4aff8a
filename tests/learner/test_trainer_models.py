"""The learner's Trainer on both kinds of policy directory (a transformers Qwen2 and the hybrid
model): it loads the directory through m1flow.checkpoint, trains a batch of selected groups, and
writes a checkpoint that opens again with transformers' Auto classes (weights, tokenizer) and
resumes with its version and offsets."""
from __future__ import annotations

import math

import pytest
import torch
from learner_fixtures import ARCHS
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from m1flow import checkpoint
from m1flow.contracts import events
from m1flow.rl.config import AlgorithmConfig
from m1flow.status import Status
from m1flow.tokenizer import build_tokenizer
from ops.warmstart import WarmStartConfig, build_model
from svc_learner.config import LearnerServiceConfig
from svc_learner.trainer import Trainer

WARM = {"qwen2": "qwen2", "hybrid": "minimax_m1"}


def scored_group(gid: str, vocab: int, temperature: float) -> events.ScoredGroup:
    g = torch.Generator().manual_seed(len(gid))
    group = events.ScoredGroup(group_id=gid, group_size=4)
    for i in range(4):
        tokens = torch.randint(3, vocab, (5 + i,), generator=g).tolist()
        group.samples.add(index=i, prompt_token_ids=[1, 5, 6], token_ids=tokens, logprobs=[-2.0] * len(tokens),
                          reward=float(i % 2), status=Status.OK, temperature=temperature, top_p=1.0)
    return group


@pytest.mark.parametrize("arch", ARCHS)
def test_trainer_trains_any_policy_directory_and_writes_the_same_form(tmp_path, arch):
    tok = build_tokenizer()
    policy = checkpoint.save_policy(tmp_path / "p0", build_model(tok, WarmStartConfig(arch=WARM[arch])), tok)
    cfg = LearnerServiceConfig(run_dir=tmp_path / "run", init_checkpoint=policy, batch_groups=2,
                               train={"lr": 1e-3, "minibatches": 2})
    trainer = Trainer(cfg)
    vocab = trainer.model.config.vocab_size
    selected = [AlgorithmConfig().select(scored_group(f"g{i}", vocab, t), current_version=0)
                for i, t in enumerate((1.0, 0.7))]
    stats = trainer.step(selected, {"scored/0": 2})
    assert stats["updates"] == 2 and trainer.state.version == 1

    written = checkpoint.latest(cfg.checkpoint_root())
    reopened = AutoModelForCausalLM.from_pretrained(written)  # any tool of the ecosystem opens it
    assert type(reopened) is type(trainer.model)
    start = checkpoint.load_model(policy).state_dict()
    moved = 0
    for name, value in reopened.state_dict().items():
        assert torch.equal(value, trainer.model.state_dict()[name]), name
        moved += not torch.equal(value, start[name])
    assert moved > len(start) // 2
    assert AutoTokenizer.from_pretrained(written).chat_template == tok.chat_template
    state = checkpoint.load_state(written)
    assert state.applied_groups == [["g0", "g1"]] and state.offsets == {"scored/0": 2}

    resumed = Trainer(cfg)  # a restarted learner: its own checkpoint, version and offsets
    assert resumed.state.version == 1 and resumed.start_offsets(replay=False) == {"scored/0": 2}
    assert checkpoint.weights_sha256(resumed.current_dir) == checkpoint.weights_sha256(written)


@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_weights_train_with_the_lm_head_kept_in_fp32(tmp_path, arch):
    """The CUDA default (train.dtype auto -> bf16), run on the CPU: bf16 body, fp32 head, a real step."""
    from m1flow import lm

    tok = build_tokenizer()
    policy = checkpoint.save_policy(tmp_path / "p0", build_model(tok, WarmStartConfig(arch=WARM[arch])), tok)
    cfg = LearnerServiceConfig(run_dir=tmp_path / "run", init_checkpoint=policy, device="cpu",
                               train={"lr": 1e-3, "minibatches": 1, "dtype": "bf16"})
    trainer = Trainer(cfg)
    head = lm.head_weight(trainer.model)
    assert head.dtype == torch.float32
    assert {p.dtype for p in trainer.model.parameters() if p is not head} == {torch.bfloat16}
    vocab = trainer.model.config.vocab_size
    before = head.detach().clone()
    stats = trainer.step([AlgorithmConfig().select(scored_group("g0", vocab, 1.0), current_version=0)], {})
    assert stats["updates"] == 1 and not torch.equal(before, head) and math.isfinite(stats["loss"])
    saved = load_file(checkpoint.latest(cfg.checkpoint_root()) / checkpoint.WEIGHTS_FILE)  # as written
    assert saved["lm_head.weight"].dtype == torch.float32
    assert {v.dtype for k, v in saved.items() if k != "lm_head.weight"} == {torch.bfloat16}
