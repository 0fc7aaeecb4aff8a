"""`arith`: m1flow's generated arithmetic (m1flow.tasks.arith); the gold is the integer result."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from m1flow.kinds.base import Kind, KindSchema, Style, Verifier, declare


class ArithSchema(KindSchema):
    gold: Annotated[str, Field(pattern=r"^-?\d+$", description="the integer result")]
    spec: dict[str, Any] = {}


def _integer(text: str) -> bool:
    """The schema's `^-?\\d+$`, for ASCII digits (anything else defers to the schema)."""
    digits = text[1:] if text[:1] == "-" else text
    return digits.isascii() and digits.isdigit()


def _gold(verifier: Verifier, style: Style) -> str:
    return style.write(verifier.gold)


ARITH = declare(Kind(
    name="arith", schema=ArithSchema, gold=_gold,
    styles=(Style("integer", reads="a single integer"),),
    fast=lambda gold, spec: _integer(gold), probed=True))
