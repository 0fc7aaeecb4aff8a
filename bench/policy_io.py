"""The algorithm benchmark's one contact with model building, tokenization and sampling.

Everything that depends on how a policy is stored, tokenized and sampled is here, so that a new
tokenizer or checkpoint layout changes this file only. A policy is a Hugging Face model directory
(m1flow.checkpoint) with the project's BPE tokenizer and chat template; the benchmark samples with
the hybrid model's own batched decoding.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from m1flow import chat, checkpoint
from m1flow.model import MiniMaxM1ForCausalLM, sample
from m1flow.model.generate import Completion
from ops.warmstart import WarmStartConfig, warm_started_policy


@dataclass(frozen=True)
class Policy:
    """A warm-started policy directory and its tokenizer."""

    path: Path
    tok: Any  # transformers' PreTrainedTokenizerFast

    @classmethod
    def warm_start(cls, cfg: WarmStartConfig) -> Policy:
        path = warm_started_policy(Path(tempfile.mkdtemp(prefix="m1flow-bench-")) / "policy", cfg)
        return cls(path, checkpoint.load_tokenizer(path))

    def load(self) -> MiniMaxM1ForCausalLM:
        # trainable parameters, eval mode: no dropout, and the learner's updates need no train mode
        return checkpoint.load_model(self.path, trainable=True).eval()

    @property
    def pad_id(self) -> int:
        return self.tok.pad_token_id

    def prompt_ids(self, text: str) -> list[int]:
        return chat.prompt_ids(self.tok, text)

    def text(self, tokens: list[int]) -> str:
        return self.tok.decode(tokens, skip_special_tokens=True)

    def token_id(self, piece: str) -> int:
        [tid] = self.tok.encode(piece, add_special_tokens=False)
        return tid

    def complete(self, model: MiniMaxM1ForCausalLM, text: str, n: int, max_new_tokens: int,
                 generator: torch.Generator, temperature: float = 1.0) -> list[Completion]:
        """n completions at `temperature`, top-p 1: the recorded log-probs are the behaviour policy's."""
        return sample(model, self.prompt_ids(text), n=n, max_new_tokens=max_new_tokens, temperature=temperature,
                      top_p=1.0, eos_id=self.tok.eos_token_id, generator=generator)
