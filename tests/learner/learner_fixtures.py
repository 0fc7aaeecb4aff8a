"""Small real models and batches for the learner tests: a tiny Qwen2 (transformers' architecture,
built from a config) and a tiny hybrid lightning-attention model, the two kinds of policy the
learner trains. No mocks; random weights, so each builds in well under a second."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from m1flow.model import MiniMaxM1Config, MiniMaxM1ForCausalLM
from ops.warmstart import TINY_HF
from svc_learner.batching import Batch
from svc_learner.update import SequenceLogprobs

ARCHS = ("qwen2", "hybrid")
VOCAB = 32


def tiny_model(arch: str, vocab: int = VOCAB, seed: int = 0) -> nn.Module:
    """A freshly initialised two-layer model of `arch` (fp32, train mode)."""
    torch.manual_seed(seed)
    if arch == "hybrid":
        model = MiniMaxM1ForCausalLM(MiniMaxM1Config.tiny(vocab_size=vocab, num_hidden_layers=2))
    else:
        fields = {**TINY_HF[arch], "num_hidden_layers": 2, "layer_types": ["full_attention"] * 2,
                  "vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128}
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(arch, **fields), dtype=torch.float32,
                                                 attn_implementation="sdpa")
    return model.train()


@pytest.fixture(params=ARCHS)
def arch(request: pytest.FixtureRequest) -> str:
    return request.param


def make_batch(model: nn.Module, n: int = 8, prompt: int = 3, response: int = 6, vocab: int = 32,
               seed: int = 0, advantages: torch.Tensor | None = None) -> Batch:
    """On-policy batch: random tokens, rollout log-probs = the model's own, ragged response lengths."""
    g = torch.Generator().manual_seed(seed)
    t = prompt + response
    input_ids = torch.randint(0, vocab, (n, t), generator=g)
    lengths = torch.randint(2, response + 1, (n,), generator=g)
    pos = torch.arange(t)[None, :]
    response_mask = ((pos >= prompt) & (pos < prompt + lengths[:, None])).float()
    with torch.no_grad():
        rollout_logp = SequenceLogprobs(model)(input_ids, response_mask)[0]
    if advantages is None:
        advantages = torch.randn(n, generator=g)
    return Batch(
        input_ids=input_ids,
        response_mask=response_mask,
        rollout_logp=rollout_logp,
        advantages=advantages,
        policy_version=torch.zeros(n, dtype=torch.long),
        group_ids=torch.arange(n) // 2,
    )
