"""The report's repetition truncation inside vLLM: a V1 logits processor with per-request state.

Switched on per request through `SamplingParams(extra_args={EXTRA_KEY: {"run": N, "prob": p,
"eos": id}})`. The processor sees the raw logits before temperature and top-p, never the token
that gets sampled, so it works in two halves: `apply` notes, for each row, the one token that
would be drawn with probability above p under the sampling distribution (temperature, then top-p
renormalised; with p >= 0.5 at most the most likely token can be); `update_state`, called once the
token was sampled, extends or resets the row's streak. When a streak reaches N, the next `apply`
leaves the row only end-of-sequence: the completion ends one token after the streak, with a
forced EOS the rollout service recognises (the N tokens before it all drawn above p) and removes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

if TYPE_CHECKING:
    from vllm.config import VllmConfig

EXTRA_KEY = "m1flow_repetition"
PATH = f"{__name__}:RepetitionStop"  # how the engine is told to load it


@dataclass
class _Streak:
    run: int
    prob: float
    eos: int
    temperature: float
    top_p: float
    output: list[int]  # the request's live list of sampled tokens
    seen: int = 0
    candidate: int = -1  # the token that, if sampled now, would extend the streak
    streak: int = 0
    forced: bool = False

    def observe(self) -> None:
        """Account for the tokens sampled since the last call."""
        for token in self.output[self.seen :]:
            self.streak = self.streak + 1 if token == self.candidate else 0
            self.candidate = -1
        self.seen = len(self.output)
        self.forced = self.forced or self.streak >= self.run


def _new_streak(params: SamplingParams, _prompt: list[int] | None, output: list[int]) -> _Streak | None:
    spec = (params.extra_args or {}).get(EXTRA_KEY)
    if not spec:
        return None
    temperature = params.temperature if params.temperature > 0 else 1.0
    return _Streak(int(spec["run"]), float(spec["prob"]), int(spec["eos"]), temperature, params.top_p, output,
                   seen=len(output))


class RepetitionStop(LogitsProcessor):
    def __init__(self, vllm_config: "VllmConfig", device: torch.device, is_pin_memory: bool) -> None:
        self.rows: dict[int, _Streak] = {}

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        spec = (sampling_params.extra_args or {}).get(EXTRA_KEY)
        if spec and not (spec["run"] >= 1 and 0.5 <= spec["prob"] < 1):
            raise ValueError(f"{EXTRA_KEY}: need run >= 1 and 0.5 <= prob < 1, got {spec}")

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.rows, batch_update, _new_streak)
        for state in self.rows.values():
            state.observe()

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        watched = [row for row, s in self.rows.items() if not s.forced]
        for row, s in self.rows.items():
            if s.forced:
                logits[row].fill_(float("-inf"))
                logits[row, s.eos] = 0.0
        if watched:
            for row, token in zip(watched, self._confident_tokens(logits, watched)):
                self.rows[row].candidate = token
        return logits

    def _confident_tokens(self, logits: torch.Tensor, rows: list[int]) -> list[int]:
        """Per row, the most likely token if its probability under the sampling distribution exceeds p, else -1."""
        states = [self.rows[r] for r in rows]
        index = torch.tensor(rows, device=logits.device)
        temperature = torch.tensor([s.temperature for s in states], device=logits.device)
        top_p = torch.tensor([s.top_p for s in states], device=logits.device)
        prob = torch.tensor([s.prob for s in states], device=logits.device)
        probs = torch.softmax(logits.index_select(0, index).float() / temperature[:, None], dim=-1)
        p1, token = probs.max(dim=-1)
        # Renormalised by the nucleus: 1 when the top token alone reaches top_p; otherwise at most
        # p1 / top_p, so only rows with p1 > p * top_p need the nucleus mass (a sort).
        sampled = torch.where(p1 >= top_p, torch.ones_like(p1), p1 / top_p)
        band = ((p1 < top_p) & (p1 > prob * top_p)).nonzero().squeeze(-1)
        if band.numel():
            sorted_probs = probs.index_select(0, band).sort(dim=-1, descending=True).values
            inside = (sorted_probs.cumsum(-1) - sorted_probs) < top_p[band, None]
            sampled[band] = p1[band] / (sorted_probs * inside).sum(-1)
        return torch.where(sampled > prob, token, torch.full_like(token, -1)).tolist()
