"""`choice`: a multiple-choice question; the answer is an option's letter or its text, the gold a letter
(or an option's text, or a sentence naming the letter: `the correct answer is (B)`, `c) Atrophy`).

The options are `spec.options` ({"A": text, ...}, or a list of texts lettered from A), or, when the
row gives none, read from the prompt when the record is built: the last run of lines lettered from A
(`A. text`, `(A) text`, `A) text`, `a) text`, `A: text`), at least two. Why a kind: math-verify read
`c) Atrophy` as algebra and a bare letter prompt had no style; here `B`, `(B)`, `B) 90`, `90` and
`the correct answer is (B)` are the same answer, and `A B C D` (every letter) is none."""
from __future__ import annotations

import re
import string
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from m1flow.kinds.answers import normalise_text
from m1flow.kinds.base import Kind, KindSchema, OpenSpec, SpecError, Style, Verifier, declare
from m1flow.kinds.text import FINAL_STYLES, STYLE_NAMES

NonEmpty = Annotated[str, Field(min_length=1)]
LETTERS = string.ascii_uppercase[:10]  # A-J (MMLU-Pro has ten options)
_OPTION_LINE = re.compile(r"^[ \t]*(?:\(([A-Ja-j])\)|([A-Ja-j])[.)：:])[ \t]*(\S.*?)[ \t]*$", re.MULTILINE)
_INLINE_OPTION = re.compile(r"\(([A-J])\)\s*")
_NAMING = re.compile(r"^(?:(?:so|thus|therefore|hence)[\s,]+)?(?:the\s+)?(?:correct\s+|final\s+|best\s+)?"
                     r"(?:answer|option|choice)(?:\s+is)?\s*[:：]?\s*", re.IGNORECASE)
_LETTER = re.compile(r"^\(?([A-Ja-j])\)?(?:\s*[.):：]\s*(.*?))?\s*\.?$", re.DOTALL)
_MARKUP = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{|[{}$*]|\\[()\[\]]")


def options_in(prompt: str) -> dict[str, str]:
    """The options a prompt lists, by upper-case letter: the last run of lines lettered A, B, C, ...
    (at least two); else `(A) .. (B) ..` written on one line; {} when it lists none."""
    runs: list[dict[str, str]] = []
    for match in _OPTION_LINE.finditer(prompt):
        letter = (match.group(1) or match.group(2)).upper()
        run = runs[-1] if runs else None
        if run is not None and LETTERS.index(letter) == len(run):
            run[letter] = match.group(3)
        elif letter == "A":
            runs.append({"A": match.group(3)})
    runs = [run for run in runs if len(run) >= 2]
    if runs:
        return runs[-1]
    parts = _INLINE_OPTION.split(prompt)
    inline = {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}
    return inline if len(inline) >= 2 and list(inline) == list(LETTERS[:len(inline)]) else {}


def choice_of(answer: str, options: dict[str, str]) -> str | None:
    """The option an answer (or a gold) names: its letter, `(B)`, `B) text`, `the answer is (B)` or the
    option's whole text; None when it names none or contradicts itself (`B) <option C's text>`)."""
    text = _MARKUP.sub(" ", answer).strip()
    text = _NAMING.sub("", text, count=1).strip()
    by_text = [letter for letter, option in options.items() if normalise_text(option) == normalise_text(text)]
    if len(by_text) == 1:
        return by_text[0]
    match = _LETTER.match(text)
    if match is None or match.group(1).upper() not in options:
        return None
    letter, rest = match.group(1).upper(), match.group(2)
    if rest and normalise_text(rest) != normalise_text(options[letter]):
        return None
    return letter


def lettered(value: Any) -> Any:
    """spec.options as a mapping by upper-case letter (a list is lettered from A)."""
    if isinstance(value, list):
        return {LETTERS[i]: v for i, v in enumerate(value[:len(LETTERS)])} if len(value) <= len(LETTERS) else value
    if isinstance(value, dict):
        return {str(k).strip().upper(): v for k, v in value.items()}
    return value


class ChoiceSpec(OpenSpec):
    style: Literal[STYLE_NAMES] = "auto"  # type: ignore[valid-type]
    options: dict[Literal[tuple(LETTERS)], NonEmpty]  # type: ignore[valid-type]
    answers: Annotated[list[NonEmpty], Field(min_length=1)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _lettered(cls, data: Any) -> Any:
        if isinstance(data, dict) and "options" in data:
            return {**data, "options": lettered(data["options"])}
        return data


class ChoiceSchema(KindSchema):
    gold: Annotated[str, Field(min_length=1)]
    spec: ChoiceSpec

    @model_validator(mode="before")
    @classmethod
    def _has_options(cls, data: Any) -> Any:
        spec = data.get("spec") if isinstance(data, dict) else None
        if isinstance(spec, dict) and not spec.get("options"):
            raise SpecError("verifier.spec.options", "no options: give spec.options, or list them in the prompt "
                                                     "as lines 'A. ...', '(B) ...'")
        return data

    @model_validator(mode="after")
    def _gold_is_an_option(self) -> "ChoiceSchema":
        letters = list(self.spec.options)
        if len(letters) < 2 or letters != list(LETTERS[:len(letters)]):
            raise SpecError("verifier.spec.options", f"options {', '.join(letters)}: need two or more, lettered from A")
        for gold in [self.gold, *(self.spec.answers or [])]:
            if choice_of(gold, self.spec.options) is None:
                raise SpecError("verifier.gold", f"{gold!r} names none of the options {', '.join(letters)} "
                                                 "(a letter, or an option's text)")
        return self


def _from_prompt(prompt: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The row's own options (lettered), else those the prompt lists."""
    if spec.get("options"):
        return {**spec, "options": lettered(spec["options"])}
    found = options_in(prompt)
    return {**spec, "options": found} if found else spec


def _gold(verifier: Verifier, style: Style) -> str:
    return style.write(choice_of(verifier.gold, lettered(verifier.spec.get("options") or {})) or verifier.gold)


CHOICE = declare(Kind(name="choice", schema=ChoiceSchema, gold=_gold, styles=FINAL_STYLES, answers=True,
                      probed=True, from_prompt=_from_prompt))
