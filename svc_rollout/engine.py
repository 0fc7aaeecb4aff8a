"""The native engine: the project's hybrid model sampled with m1flow.model.generate on CPU.

(vLLM is the production engine on GPU nodes; this one runs everywhere and is what tests and the
demo use.) It holds one policy at a time and swaps it atomically when a new version is announced.
"""
from __future__ import annotations

import logging
import threading

from m1flow.contracts import events
from m1flow.model import Completion, sample
from m1flow.policy import generator, load_policy

log = logging.getLogger(__name__)

FINISH = {"stop": events.FINISH_REASON_STOP, "length": events.FINISH_REASON_LENGTH,
          "repetition": events.FINISH_REASON_REPETITION}


class NativeEngine:
    name = "native"

    def __init__(self) -> None:
        self.version = -1
        self.model = None
        self.tokenizer = None
        self._lock = threading.Lock()

    def load(self, policy: events.PolicyVersion) -> None:
        model, tokenizer = load_policy(policy.checkpoint_uri, policy.sha256)
        with self._lock:
            self.model, self.tokenizer, self.version = model, tokenizer, policy.version
        log.info("loaded policy version %s from %s", policy.version, policy.checkpoint_uri)

    def prompt_ids(self, text: str) -> list[int]:
        return [self.tokenizer.bos_id, *self.tokenizer.encode(text)]

    def generate(self, text: str, n: int, max_new_tokens: int, temperature: float, top_p: float,
                 seed: int, early_stop_run: int = 3000, early_stop_prob: float = 0.99
                 ) -> tuple[int, list[int], list[Completion]]:
        """(policy version, prompt ids, completions) for one prompt, under one consistent policy."""
        with self._lock:
            if self.model is None:
                raise RuntimeError("no policy loaded yet")
            ids = self.prompt_ids(text)
            completions = sample(self.model, ids, n=n, max_new_tokens=max_new_tokens,
                                 temperature=temperature, top_p=top_p, eos_id=self.tokenizer.eos_id,
                                 early_stop_run=early_stop_run, early_stop_prob=early_stop_prob,
                                 generator=generator(seed))
            return self.version, ids, completions

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens)
