"""Native sampling engine: G completions of one prompt with the hybrid model's cache.

The prompt is prefilled once, its cache copied to the n rows, and the rows decode together; a
finished row leaves the batch. Each sampled token carries log pi(token), the model's full
distribution at temperature 1 (what the learner's importance ratio compares against), whatever
temperature and top-p were used to draw it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch

from m1flow.model.modeling import MiniMaxM1ForCausalLM

FinishReason = Literal["stop", "length", "repetition"]


@dataclass
class Completion:
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: FinishReason = "length"


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask (to -inf) the tail outside the smallest set of tokens whose probability reaches top_p."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    outside = probs.cumsum(dim=-1) - probs >= top_p  # the mass before a token already reaches top_p
    sorted_logits = sorted_logits.masked_fill(outside, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def draw(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of logits [N, V]; temperature 0 is greedy."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    probs = top_p_filter(logits / temperature, top_p).softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.inference_mode()
def sample(
    model: MiniMaxM1ForCausalLM,
    prompt_ids: list[int],
    n: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 0.95,
    eos_id: int | None = None,
    early_stop_run: int = 3000,
    early_stop_prob: float = 0.99,
    generator: torch.Generator | None = None,
) -> list[Completion]:
    """Sample n completions of one prompt. A completion ends on eos ("stop", eos kept), at
    max_new_tokens ("length"), or after early_stop_run consecutive tokens each with probability
    above early_stop_prob ("repetition": the report's guard against degenerate loops).
    `generator` must live on the model's device."""
    if not prompt_ids:
        raise ValueError("prompt_ids must not be empty")
    completions = [Completion() for _ in range(n)]
    if n == 0 or max_new_tokens <= 0:
        return completions
    device = model.lm_head.weight.device
    cache = model.new_cache(1)
    logits = model(torch.tensor([prompt_ids], device=device), cache)[:, -1]
    cache.repeat_interleave(n)
    logits = logits.expand(n, -1)
    live = list(range(n))  # completion index of each batch row
    confident_run = [0] * n  # consecutive tokens so far with probability > early_stop_prob
    min_logprob = math.log(early_stop_prob) if early_stop_prob > 0 else -math.inf
    for step in range(max_new_tokens):
        tokens = draw(logits, temperature, top_p, generator)
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
        keep = []
        for row, (token, logprob) in enumerate(zip(tokens.tolist(), logprobs.tolist())):
            i = live[row]
            c = completions[i]
            c.tokens.append(token)
            c.logprobs.append(logprob)
            confident_run[i] = confident_run[i] + 1 if logprob > min_logprob else 0
            if token == eos_id:
                c.finish_reason = "stop"
            elif confident_run[i] >= early_stop_run:
                c.finish_reason = "repetition"
            else:
                keep.append(row)
        if not keep or step == max_new_tokens - 1:
            break
        if len(keep) < len(live):
            cache.select(keep)
            live = [live[row] for row in keep]
            tokens = tokens[keep]
        logits = model(tokens[:, None], cache)[:, -1]
    return completions
