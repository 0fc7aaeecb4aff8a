"""A judge run on the project's own engine (`m1flow.model.generate.sample`).

Useful where no vLLM judge is served (CPU tests, demos) and for judging with the policy's own
architecture. The chat is rendered as plain text and starts with the tokenizer's bos id when it has one
(a transformers tokenizer, m1flow.checkpoint.load_policy).
"""
from __future__ import annotations

from typing import Any

from .config import NativeJudgeConfig
from .judge import ChatJudge, JudgeError
from .prompts import render_plain


class NativeJudge(ChatJudge):
    def __init__(self, model: Any, tokenizer: Any, eos_id: int | None = None,
                 config: NativeJudgeConfig | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.eos_id = eos_id if eos_id is not None else getattr(tokenizer, "eos_token_id", None)
        self.bos_id = getattr(tokenizer, "bos_token_id", None)
        self.config = config or NativeJudgeConfig()

    def complete(self, messages: list[dict[str, str]]) -> str:
        from m1flow.model.generate import sample  # imported late: the engine is optional here

        cfg = self.config
        prompt_ids = _ids(self.tokenizer.encode(render_plain(messages), add_special_tokens=False))
        if self.bos_id is not None:
            prompt_ids = [self.bos_id, *prompt_ids]
        try:
            completions = sample(self.model, prompt_ids, n=1, max_new_tokens=cfg.max_new_tokens,
                                 temperature=cfg.temperature, top_p=cfg.top_p, eos_id=self.eos_id)
        except (RuntimeError, ValueError) as err:  # e.g. out of memory, prompt past the context
            raise JudgeError(f"native judge failed: {err}") from err
        tokens = [t for t in _ids(completions[0].tokens) if t != self.eos_id]
        return self.tokenizer.decode(tokens)


def _ids(encoded: Any) -> list[int]:
    """Token ids from a list, a tensor, or a `tokenizers.Encoding`."""
    encoded = getattr(encoded, "ids", encoded)
    if hasattr(encoded, "tolist"):
        encoded = encoded.tolist()
    return [int(t) for t in encoded]
