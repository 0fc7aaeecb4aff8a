"""The algorithm benchmark's one contact with model building, tokenization and sampling.

Everything that depends on how a policy is stored, tokenized and sampled is here, so that a new
tokenizer or checkpoint layout changes this file only.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from m1flow.model import MiniMaxM1ForCausalLM, sample
from m1flow.model.generate import Completion
from m1flow.tokenizer import CharTokenizer
from m1flow.warmstart import TOKENIZER_FILE, WarmStartConfig, warm_started_policy


@dataclass(frozen=True)
class Policy:
    """A warm-started policy directory and its tokenizer."""

    path: Path
    tok: CharTokenizer

    @classmethod
    def warm_start(cls, cfg: WarmStartConfig) -> Policy:
        path = warm_started_policy(Path(tempfile.mkdtemp(prefix="m1flow-bench-")) / "policy", cfg)
        return cls(path, CharTokenizer.from_file(path / TOKENIZER_FILE))

    def load(self) -> MiniMaxM1ForCausalLM:
        model = MiniMaxM1ForCausalLM.from_pretrained(self.path)
        model.eval()  # no dropout; the learner's updates need no train mode
        return model

    @property
    def pad_id(self) -> int:
        return self.tok.pad_id

    def prompt_ids(self, text: str) -> list[int]:
        return [self.tok.bos_id, *self.tok.encode(text)]

    def text(self, tokens: list[int]) -> str:
        return self.tok.decode(tokens)

    def token_id(self, char: str) -> int:
        [tid] = self.tok.encode(char)
        return tid

    def complete(self, model: MiniMaxM1ForCausalLM, text: str, n: int, max_new_tokens: int,
                 generator: torch.Generator, temperature: float = 1.0) -> list[Completion]:
        """n completions at `temperature`, top-p 1: the recorded log-probs are the behaviour policy's."""
        return sample(model, self.prompt_ids(text), n=n, max_new_tokens=max_new_tokens, temperature=temperature,
                      top_p=1.0, eos_id=self.tok.eos_id, generator=generator)
