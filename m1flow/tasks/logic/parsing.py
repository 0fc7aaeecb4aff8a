"""A token cursor for the small recursive-descent parsers of model answers.

Why: answers such as '(8 - 3) * (9 - 6) + 9' or 'not (True and False)' must be read, never
eval'ed; each parser states its grammar and walks these tokens.
"""
from __future__ import annotations

import re

from m1flow.tasks.logic.base import FormatError


class TokenStream:
    def __init__(self, text: str, token_re: re.Pattern[str], normalise=str.lower) -> None:
        self.tokens: list[str] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            if text[pos].isspace():
                pos += 1
                continue
            match = token_re.match(text, pos)
            if not match:
                raise FormatError(f"unexpected character {text[pos]!r} at {pos}")
            self.tokens.append(normalise(match.group(0)))
            pos = match.end()
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise FormatError("expression ends too early")
        self.pos += 1
        return token

    def expect(self, token: str) -> None:
        if self.take() != token:
            raise FormatError(f"expected {token!r}")

    def finish(self) -> None:
        if self.peek() is not None:
            raise FormatError(f"unexpected {self.peek()!r} after the expression")
