"""What a pairwise judge is, whatever runs it.

A judge sees one prompt and two answers in a fixed order and says which is better from the
point of view of the answer shown first. Backends that produce text (an HTTP endpoint, the native
engine) share `ChatJudge`, which renders the prompt and parses the reply with `prompts`.
Every failure a caller must not mistake for a verdict is raised as `JudgeError`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol, runtime_checkable

from .prompts import Verdict, VerdictParseError, parse_verdict, render


class JudgeError(RuntimeError):
    """The judge could not give a verdict (unreachable, timed out, unreadable reply)."""


@runtime_checkable
class Judge(Protocol):
    def judge(self, prompt: str, first: str, second: str) -> Verdict:
        """Compare `first` (shown first, as A) with `second`; raise JudgeError when no verdict."""
        ...


class ChatJudge(ABC):
    """A judge backed by a text generator: render the prompt, generate, parse the verdict."""

    @abstractmethod
    def complete(self, messages: list[dict[str, str]]) -> str:
        """The generator's reply to chat `messages`; raise JudgeError on any transport failure."""

    def judge(self, prompt: str, first: str, second: str) -> Verdict:
        reply = self.complete(render(prompt, first, second))
        try:
            return parse_verdict(reply)
        except VerdictParseError as err:
            raise JudgeError(str(err)) from err
