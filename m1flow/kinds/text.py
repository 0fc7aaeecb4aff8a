"""`text`: the answer compared with the gold as normalised text (case, whitespace and punctuation
aside: m1flow.kinds.answers.normalise_text), never read as algebra.

Why a kind: golds that are words, ciphers, factorisations or sorted lists (reasoning-gym's
exports, `x is congruent to 25 modulo 154`) are not mathematics; math-verify read them as products
of one-letter symbols, so reordered words or letters scored. The gold may be a list of accepted
answers (`spec.answers`); `case_sensitive: true` keeps case."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from m1flow.kinds.base import Kind, KindSchema, OpenSpec, SpecError, Style, Verifier, declare
from m1flow.kinds.answers import normalise_text
from m1flow.kinds.math import BARE

NonEmpty = Annotated[str, Field(min_length=1)]
# The final-answer styles of the kinds that compare with a gold (text, choice); math has its own.
FINAL_STYLES = (
    Style("auto", reads="\\boxed{}, <answer> tag, Answer: line or 'the answer is ...'",
          writes="The answer is $\\boxed{{{answer}}}$."),
    BARE,
    Style("boxed", reads="\\boxed{}", writes="The answer is $\\boxed{{{answer}}}$."),
    Style("answer_line", reads="Answer: line", writes="Answer: {answer}"),
)
STYLE_NAMES = tuple(s.name for s in FINAL_STYLES)


class TextSpec(OpenSpec):
    style: Literal[STYLE_NAMES] = "auto"  # type: ignore[valid-type]
    answers: Annotated[list[NonEmpty], Field(min_length=1)] | None = None
    case_sensitive: bool = False


class TextSchema(KindSchema):
    gold: Annotated[str, Field(min_length=1)]
    spec: TextSpec = TextSpec()

    def model_post_init(self, context: object) -> None:
        if not normalise_text(self.gold):
            raise SpecError("verifier.gold", f"{self.gold!r} is only punctuation: nothing to compare")


def _gold(verifier: Verifier, style: Style) -> str:
    return style.write(verifier.gold)


TEXT = declare(Kind(name="text", schema=TextSchema, gold=_gold, styles=FINAL_STYLES, answers=True, probed=True))
