"""Small real models and batches for the learner tests (no mocks: a GRU language model)."""

from __future__ import annotations

import torch
from torch import nn

from svc_learner.batching import Batch
from svc_learner.update import SequenceLogprobs


class TinyLM(nn.Module):
    """A causal GRU language model exposing the two things the learner needs."""

    def __init__(self, vocab: int = 32, width: int = 24, head_scale: float = 1.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.rnn = nn.GRU(width, width, batch_first=True)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        with torch.no_grad():
            self.lm_head.weight.mul_(head_scale)

    def hidden_states(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.rnn(self.embed(input_ids))[0]


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
