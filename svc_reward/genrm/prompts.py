"""The judge prompt and the parsing of its verdict, kept in one place.

Why one module: the template tells the judge which verdict marks to write and the parser reads
exactly those marks, so the two must change together. A reply we cannot read is a judge failure
(`VerdictParseError`), never a tie and never a reward of 0.
"""
from __future__ import annotations

import re
from enum import IntEnum


class Verdict(IntEnum):
    """A judgement on the -1/0/+1 scale, from the point of view of the answer shown FIRST."""

    FIRST = 1
    TIE = 0
    SECOND = -1


class VerdictParseError(ValueError):
    """The judge replied, but with no verdict we can read."""


SYSTEM = (
    "You are an impartial judge. You compare two responses to the same user request and decide "
    "which one serves the user better: correctness first, then helpfulness, depth and clarity. "
    "The order in which the responses appear and their length must not influence you; a longer "
    "response is better only if the extra content is useful. Reason briefly, then finish with one "
    "line holding exactly one verdict: [[A]] if Response A is better, [[B]] if Response B is "
    "better, [[TIE]] if neither is better."
)

START_A, END_A = "[Response A]", "[End of Response A]"
START_B, END_B = "[Response B]", "[End of Response B]"

USER = (
    "[User Request]\n{prompt}\n\n"
    f"{START_A}\n{{first}}\n{END_A}\n\n"
    f"{START_B}\n{{second}}\n{END_B}\n\n"
    "Which response is better? End with [[A]], [[B]] or [[TIE]]."
)


def render(prompt: str, first: str, second: str) -> list[dict[str, str]]:
    """Chat messages asking the judge to compare `first` (shown as A) with `second` (shown as B)."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER.format(prompt=prompt, first=first, second=second)},
    ]


def render_plain(messages: list[dict[str, str]]) -> str:
    """The same messages as one plain-text prompt, for engines without a chat template."""
    turns = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(turns) + "\n\nAssistant:"


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_MARK = re.compile(r"\[\[\s*(A|B|C|TIE)\s*\]\]", re.IGNORECASE)
_SCORE_LINE = re.compile(
    r"^[\s*#>]*(?:final\s+)?(?:verdict|score|preference)\s*[:=]\s*\**\s*([+-]?\d+|A|B|TIE)\s*\**\s*$",
    re.IGNORECASE | re.MULTILINE,
)
_WORDS = {"A": Verdict.FIRST, "B": Verdict.SECOND, "C": Verdict.TIE, "TIE": Verdict.TIE}
_NUMBERS = {1: Verdict.FIRST, 0: Verdict.TIE, -1: Verdict.SECOND}


def parse_verdict(text: str) -> Verdict:
    """Read the judge's final verdict: the last [[A]]/[[B]]/[[TIE]] mark, else the last score line.

    Reasoning inside <think>...</think> is ignored, so a judge that weighs "[[A]]" while thinking
    is read by what it concludes. The last mark wins because judges often restate the format first.
    """
    answer = _THINK.sub("", text)
    if re.search(r"<think>", answer, re.IGNORECASE):
        raise VerdictParseError("the judge stopped inside its reasoning (unclosed <think>)")
    marks = _MARK.findall(answer)
    if marks:
        return _WORDS[marks[-1].upper()]
    lines = _SCORE_LINE.findall(answer)
    if lines:
        value = lines[-1].upper()
        if value in _WORDS:
            return _WORDS[value]
        if int(value) in _NUMBERS:
            return _NUMBERS[int(value)]
        raise VerdictParseError(f"score {value} is outside -1/0/+1")
    raise VerdictParseError(f"no verdict in judge reply: {answer[-200:]!r}")
