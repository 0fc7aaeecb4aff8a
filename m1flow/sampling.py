"""The sampling distribution every engine draws from, and the log-probs measured under it.

An RL importance ratio compares the probability the learner computes for a sampled token with the
probability the token was *drawn* with. Engines draw from softmax(logits / T) restricted to the
top-p nucleus and renormalised, so that is the distribution their log-probs are reported under
("processed" log-probs, vLLM's `processed_logprobs`), and the learner recomputes its own under the
same temperature and top-p. One definition here, used by the native and HF engines, the learner
and the tests that hold vLLM to it.

The repetition truncation of the report also reads this probability: a completion stops after N
consecutive sampled tokens whose probability under the sampling distribution exceeded p.
"""
from __future__ import annotations

import hashlib

import torch


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask (to -inf) the tail outside the smallest set of tokens whose probability reaches top_p."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    outside = probs.cumsum(dim=-1) - probs >= top_p  # the mass before a token already reaches top_p
    sorted_logits = sorted_logits.masked_fill(outside, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def sampling_logits(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """fp32 logits of the distribution actually sampled: scaled by 1/T, tail outside top-p at -inf.

    Temperature 0 (greedy) is reported like temperature 1: a greedy token has no sampling
    probability, and the model's own distribution is the useful number then."""
    scaled = logits.float() / (temperature if temperature > 0 else 1.0)
    return top_p_filter(scaled, top_p)


def processed_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """log p(token) under the sampling distribution, for logits [..., V] and tokens [...]."""
    logp = torch.log_softmax(sampling_logits(logits, temperature, top_p), dim=-1)
    return logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def seed_for(*parts: object) -> int:
    """A stable 63-bit seed from strings/ints, so a redelivered prompt resamples the same completions."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen
