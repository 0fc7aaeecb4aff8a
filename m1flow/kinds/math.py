"""`math`: a final answer compared with the gold by math-verify; where the answer is read depends on
the dataset's own convention, the spec's "style" (verl's math_reward, math_dapo and gsm8k), `auto`
accepting any of them, `bare` the text after the reasoning. The styles are written here once: the
schema, the gold writer, the fast path and svc_reward's extraction all read them from `STYLES`.

How the gold is read depends on how it is written (m1flow.kinds.answers.notation): LaTeX and plain
numbers by math-verify, programming notation (`4*x^3*sin(x)`, `x^-1`) by SymPy's parser, words as
normalised text. The gold may be a list of accepted answers (`spec.answers`)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from m1flow.kinds.base import Kind, KindSchema, OpenSpec, Style, Verifier, declare

NonEmpty = Annotated[str, Field(min_length=1)]
_BOXED = "The answer is $\\boxed{{{answer}}}$."
BARE = Style("bare", reads="the text after the reasoning (its last line when there is no </think>)")
STYLES = (
    Style("auto", reads="\\boxed{} or Answer: line", writes=_BOXED),
    Style("boxed", reads="\\boxed{}", writes=_BOXED),  # MATH
    Style("math_dapo", reads="Answer: line or \\boxed{}", writes="Answer: {answer}"),  # DAPO-Math
    Style("gsm8k", reads="'#### <number>' line", writes="#### {answer}"),  # GSM8K
    BARE,  # sets whose prompt asks for the bare answer ("Reply only with the number")
)
STYLE_NAMES = tuple(s.name for s in STYLES)


class MathSpec(OpenSpec):
    style: Literal[STYLE_NAMES] = "auto"  # type: ignore[valid-type]
    answers: Annotated[list[NonEmpty], Field(min_length=1)] | None = None  # more accepted answers


class MathSchema(KindSchema):
    gold: Annotated[str, Field(min_length=1)]
    spec: MathSpec = MathSpec()


def _gold(verifier: Verifier, style: Style) -> str:
    return style.write(verifier.gold)


def _fast(gold: str, spec: dict) -> bool:
    style = spec.get("style", "auto")
    return bool(gold) and type(style) is str and style in STYLE_NAMES and spec.keys() <= {"style"}


MATH = declare(Kind(name="math", schema=MathSchema, gold=_gold, styles=STYLES, fast=_fast,
                    answers=True, probed=True))
