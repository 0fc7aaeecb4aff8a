"""`math`: a final answer compared with the gold by math-verify; where the answer is read depends on
the dataset's own convention, the spec's "style" (verl's math_reward, math_dapo and gsm8k), `auto`
accepting any of them. The styles are written here once: the schema, the gold writer, the fast path
and svc_reward's extraction all read them from `STYLES`."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from m1flow.kinds.base import Kind, KindSchema, OpenSpec, Style, Verifier, declare

_BOXED = "The answer is $\\boxed{{{answer}}}$."
STYLES = (
    Style("auto", reads="\\boxed{} or Answer: line", writes=_BOXED),
    Style("boxed", reads="\\boxed{}", writes=_BOXED),  # MATH
    Style("math_dapo", reads="Answer: line or \\boxed{}", writes="Answer: {answer}"),  # DAPO-Math
    Style("gsm8k", reads="'#### <number>' line", writes="#### {answer}"),  # GSM8K
)
STYLE_NAMES = tuple(s.name for s in STYLES)


class MathSpec(OpenSpec):
    style: Literal[STYLE_NAMES] = "auto"  # type: ignore[valid-type]


class MathSchema(KindSchema):
    gold: Annotated[str, Field(min_length=1)]
    spec: MathSpec = MathSpec()


def _gold(verifier: Verifier, style: Style) -> str:
    return style.write(verifier.gold)


def _fast(gold: str, spec: dict) -> bool:
    style = spec.get("style", "auto")
    return bool(gold) and type(style) is str and style in STYLE_NAMES


MATH = declare(Kind(name="math", schema=MathSchema, gold=_gold, styles=STYLES, fast=_fast))
