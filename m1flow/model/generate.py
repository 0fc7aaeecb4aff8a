"""Native sampling engine: G completions of each of several prompts with the hybrid model's cache.

Each prompt is prefilled once and its cache copied to its n rows; the caches of all prompts are then
merged (left-aligned, padding masked) and every row decodes in one batch; a finished row leaves the
batch. Each sampled token carries its log-probability under the distribution it was drawn from
(temperature, then top-p, renormalised: m1flow.sampling), which is what the learner's importance
ratio compares against. Each prompt draws from its own generator, so its completions do not depend
on which other prompts share the batch. With `record_routing`, each completion also carries the
experts every MoE layer chose for each token fed through the model (m1flow.model.routing: R3).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Literal

import torch

from m1flow.model.cache import HybridCache
from m1flow.model.modeling import MiniMaxM1ForCausalLM
from m1flow.model.routing import Recorder, recording
from m1flow.sampling import sampling_logits, top_p_filter

__all__ = ["Completion", "FinishReason", "draw", "sample", "sample_batch", "top_p_filter"]

FinishReason = Literal["stop", "length", "repetition"]


@dataclass
class Completion:
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: FinishReason = "length"
    # [len(prompt) + len(tokens) - 1, MoE layers, k]: the experts of every token fed through the
    # model, prompt first (None: not recorded)
    experts: torch.Tensor | None = None


def draw(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of logits [N, V]; temperature 0 is greedy."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    probs = sampling_logits(logits, temperature, top_p).softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@dataclass
class _Row:
    prompt: int  # index of the prompt this row samples
    completion: Completion
    budget: int  # max new tokens
    confident_run: int = 0  # consecutive tokens so far with probability > early_stop_prob
    # when recording: its prompt's experts [len(prompt), layers, k], and where each decode step's are
    # in the concatenation of the steps' records (one int a step, like its tokens: no tensor per step)
    prompt_experts: torch.Tensor | None = None
    slots: list[int] = field(default_factory=list)


@torch.inference_mode()
def sample_batch(
    model: MiniMaxM1ForCausalLM,
    prompts: list[list[int]],
    n: int,
    max_new_tokens: int | list[int],
    temperature: float = 1.0,
    top_p: float = 0.95,
    eos_id: int | None = None,
    early_stop_run: int = 3000,
    early_stop_prob: float = 0.99,
    generators: list[torch.Generator | None] | None = None,
    record_routing: bool = False,
) -> list[list[Completion]]:
    """n completions of each prompt, decoded together. A completion ends on eos ("stop", eos kept),
    at its max_new_tokens ("length"), or after early_stop_run consecutive tokens each drawn with
    probability above early_stop_prob ("repetition": the report's guard against degenerate loops).
    Generators (one per prompt) must live on the model's device. record_routing: fill each
    completion's `experts`."""
    if any(not p for p in prompts):
        raise ValueError("prompt ids must not be empty")
    budgets = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(prompts)
    gens = generators if generators is not None else [None] * len(prompts)
    results = [[Completion() for _ in range(n)] for _ in prompts]
    live_prompts = [i for i, b in enumerate(budgets) if b > 0 and n > 0]
    if not live_prompts:
        return results
    with recording(model) if record_routing else contextlib.nullcontext() as recorder:
        cache, logits, prompt_experts = _prefill(model, [prompts[i] for i in live_prompts], n, recorder)
        rows = [_Row(i, results[i][j], budgets[i]) for i in live_prompts for j in range(n)]
        if recorder is not None:
            by_prompt = dict(zip(live_prompts, prompt_experts))
            for row in rows:
                row.prompt_experts = by_prompt[row.prompt]
        everyone, steps, recorded = rows, [], 0
        min_logprob = math.log(early_stop_prob) if early_stop_prob > 0 else -math.inf
        while True:
            tokens = _draw_per_prompt(logits, rows, temperature, top_p, gens)
            logprobs = torch.log_softmax(sampling_logits(logits, temperature, top_p), dim=-1)
            logprobs = logprobs.gather(-1, tokens[:, None]).squeeze(-1)
            keep = _append(rows, tokens.tolist(), logprobs.tolist(), eos_id, early_stop_run, min_logprob)
            if not keep:
                break
            if len(keep) < len(rows):
                cache.select(keep)
                rows = [rows[i] for i in keep]
                tokens = tokens[keep]
            logits = model(tokens[:, None], cache)[:, -1]
            if recorder is not None:
                steps.append(recorder.take()[:, 0])
                for index, row in enumerate(rows):
                    row.slots.append(recorded + index)
                recorded += len(rows)
    if record_routing:
        _attach_experts(everyone, steps)
    return results


def _attach_experts(rows: list[_Row], steps: list[torch.Tensor]) -> None:
    """Each completion's experts: its prompt's, then its decode steps' (one copy off the device)."""
    decoded = torch.cat(steps).cpu() if steps else None
    for row in rows:
        prompt = row.prompt_experts.cpu()
        own = decoded[row.slots] if row.slots else prompt[:0]
        row.completion.experts = torch.cat([prompt, own])


def _prefill(model: MiniMaxM1ForCausalLM, prompts: list[list[int]], n: int, recorder: Recorder | None = None,
             ) -> tuple[HybridCache, torch.Tensor, list[torch.Tensor]]:
    """Each prompt read once, its cache repeated for its n rows: the batch's cache, first logits and,
    when recording, each prompt's experts [len(prompt), layers, k]."""
    device = model.lm_head.weight.device
    caches, first, experts = [], [], []
    for prompt in prompts:
        cache = model.new_cache(1)
        first.append(model(torch.tensor([prompt], device=device), cache)[:, -1].expand(n, -1))
        if recorder is not None:
            experts.append(recorder.take()[0])
        cache.repeat_interleave(n)
        caches.append(cache)
    return (caches[0] if len(caches) == 1 else HybridCache.merge(caches)), torch.cat(first), experts


def _append(rows: list[_Row], tokens: list[int], logprobs: list[float], eos_id: int | None, early_stop_run: int,
            min_logprob: float) -> list[int]:
    """Each row's new token; the rows that go on (not at eos, a repetition run or their budget)."""
    keep = []
    for index, (row, token, logprob) in enumerate(zip(rows, tokens, logprobs)):
        c = row.completion
        c.tokens.append(token)
        c.logprobs.append(logprob)
        row.confident_run = row.confident_run + 1 if logprob > min_logprob else 0
        if token == eos_id:
            c.finish_reason = "stop"
        elif row.confident_run >= early_stop_run:
            c.finish_reason = "repetition"
        elif len(c.tokens) < row.budget:
            keep.append(index)
    return keep


def _draw_per_prompt(logits: torch.Tensor, rows: list[_Row], temperature: float, top_p: float,
                     generators: list[torch.Generator | None]) -> torch.Tensor:
    """Draw every row's token, each prompt's rows from that prompt's generator."""
    if temperature == 0.0 or all(g is None for g in generators):
        return draw(logits, temperature, top_p, None)
    tokens = torch.empty(len(rows), dtype=torch.long, device=logits.device)
    start = 0
    while start < len(rows):  # rows of one prompt are contiguous
        end = start
        while end < len(rows) and rows[end].prompt == rows[start].prompt:
            end += 1
        tokens[start:end] = draw(logits[start:end], temperature, top_p, generators[rows[start].prompt])
        start = end
    return tokens


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
    record_routing: bool = False,
) -> list[Completion]:
    """Sample n completions of one prompt (sample_batch for a single prompt)."""
    if not prompt_ids:
        raise ValueError("prompt_ids must not be empty")
    return sample_batch(model, [prompt_ids], n, max_new_tokens, temperature, top_p, eos_id,
                        early_stop_run, early_stop_prob, [generator], record_routing)[0]
