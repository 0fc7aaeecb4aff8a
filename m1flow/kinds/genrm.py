"""`genrm`: a general task judged by a generative reward model against the group's reference; the
gold, if any, is a reference answer. Nothing to check offline: a judge model scores it."""
from __future__ import annotations

from m1flow.kinds.base import Kind, KindSchema, NoGold, OpenSpec, Style, Verifier, declare


class GenrmSpec(OpenSpec):
    candidates: list[str] | None = None


class GenrmSchema(KindSchema):
    """gold: a reference answer (optional)."""
    spec: GenrmSpec = GenrmSpec()


def _gold(verifier: Verifier, style: Style) -> str:
    why = "with a reference answer" if verifier.gold else "without a reference answer"
    raise NoGold(f"genrm {why}: a judge model scores it, not checkable offline")


def _fast(gold: str, spec: dict) -> bool:
    candidates = spec.get("candidates")
    return candidates is None or (type(candidates) is list and all(type(c) is str for c in candidates))


GENRM = declare(Kind(name="genrm", schema=GenrmSchema, gold=_gold,
                     styles=(Style("judged", reads="the answer after the reasoning, judged pairwise"),),
                     fast=_fast))
