"""`hf`: transformers' `generate` for any causal LM directory (the fallback that needs no vLLM).

Each step runs one `generate` call over a batch of groups (prompts left-padded, n samples each).
A group's samples share one prompt, so the prompt is prefilled once per group and its KV cache
repeated n times (what vLLM's prefix cache does): `generate` with `num_return_sequences=n` would
prefill it n times. Log-probs come from the scores generate sampled from (after temperature and
top-p), so they are log-probs under the sampling distribution; the repetition truncation is a
stopping criterion that watches the same probabilities row by row.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
from transformers import Cache, StoppingCriteria, StoppingCriteriaList

from m1flow import checkpoint
from m1flow.contracts import events
from m1flow.device import resolve
from m1flow.engines.base import BatchEngine, GroupRequest, Sample


class RepetitionStop(StoppingCriteria):
    """Stop a row after `run` consecutive sampled tokens each drawn with probability above `prob`."""

    def __init__(self, rows: int, run: int, prob: float, device: torch.device) -> None:
        self.run, self.min_logprob = run, math.log(prob) if prob > 0 else -math.inf
        self.streak = torch.zeros(rows, dtype=torch.long, device=device)
        self.fired_at = torch.full((rows,), -1, dtype=torch.long, device=device)  # new-token count when it fired
        self.steps = 0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor | tuple, **kwargs: object) -> torch.BoolTensor:
        """scores: the processed logits of this step (generate passes every step's so far, as a tuple)."""
        self.steps += 1
        last = scores[-1] if isinstance(scores, tuple) else scores
        logp = torch.log_softmax(last.float(), dim=-1).gather(-1, input_ids[:, -1:]).squeeze(-1)
        self.streak = torch.where(logp > self.min_logprob, self.streak + 1, torch.zeros_like(self.streak))
        fired = (self.streak >= self.run) & (self.fired_at < 0)
        self.fired_at[fired] = self.steps
        return self.fired_at >= 0


class HFEngine(BatchEngine):
    name = "hf"

    def __init__(self, batch_groups: int = 8, group_size: int = 8, device: str = "auto") -> None:
        super().__init__(batch_groups, group_size)
        self.device = resolve(device)

    def _load_whole(self, directory: Path) -> None:
        if checkpoint.is_hybrid(directory):
            raise checkpoint.PolicyLoadError(f"{directory}: the hybrid model decodes with the native or the vllm engine")
        self.model = checkpoint.load_model(directory, self.device)
        self.tokenizer = checkpoint.load_tokenizer(directory)

    @torch.inference_mode()
    def generate(self, batch: list[GroupRequest]) -> list[list[Sample]]:
        first, n = batch[0], batch[0].n
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_id
        width = max(len(r.prompt_ids) for r in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, r in enumerate(batch):  # left padding: every prompt ends where generation starts
            ids[row, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
            mask[row, width - len(r.prompt_ids):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        cache = self._prefill(ids, mask, n)
        budget = max(r.max_new_tokens for r in batch)
        stop = RepetitionStop(len(batch) * n, first.early_stop_run, first.early_stop_prob, self.device)
        torch.manual_seed(first.seed)
        sampled = first.temperature > 0
        result = self.model.generate(
            input_ids=ids.repeat_interleave(n, 0), attention_mask=mask.repeat_interleave(n, 0), past_key_values=cache,
            do_sample=sampled, temperature=first.temperature if sampled else None,
            top_p=first.top_p if sampled else None, top_k=0, max_new_tokens=budget, eos_token_id=self.eos_id,
            pad_token_id=pad, output_scores=True, return_dict_in_generate=True,
            stopping_criteria=StoppingCriteriaList([stop]))
        new = result.sequences[:, width:]
        logps = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in result.scores], dim=1)
        logps = logps.gather(-1, new[:, : logps.shape[1], None]).squeeze(-1)
        groups = []
        for g, request in enumerate(batch):
            groups.append([self._sample(new[row], logps[row], int(stop.fired_at[row]), request.max_new_tokens)
                           for row in range(g * n, (g + 1) * n)])
        return groups

    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor, n: int) -> Cache | None:
        """The KV cache of every prompt but its last token, computed once and repeated for its n samples
        (generate feeds the last token itself, and takes the positions from the mask as it would here).
        None, and generate prefills each sample, for one sample, a one-token prompt, or a model whose
        cache cannot be repeated."""
        if ids.shape[1] < 2 or n < 2:
            return None
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = self.model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1],
                           use_cache=True).past_key_values
        if not isinstance(cache, Cache):
            return None
        cache.batch_repeat_interleave(n)
        return cache

    def _sample(self, tokens: torch.Tensor, logps: torch.Tensor, fired_at: int, budget: int) -> Sample:
        tokens, logps = tokens.tolist(), logps.tolist()
        end, reason = min(budget, len(logps)), events.FINISH_REASON_LENGTH
        if self.eos_id in tokens[:end]:
            end, reason = tokens.index(self.eos_id) + 1, events.FINISH_REASON_STOP
        if 0 < fired_at < end or (fired_at == end and reason != events.FINISH_REASON_STOP):
            end, reason = fired_at, events.FINISH_REASON_REPETITION
        return Sample(tokens[:end], logps[:end], reason)

