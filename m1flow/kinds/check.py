"""A verifier checked against its kind's schema, and its gold written as a policy would answer.

Why the gold: `m1flow data validate` (and the prompt source's own checks) send the gold through the
same path a rollout takes; the verifier then sees an answer in the form the prompt asked for (the
kind's answer style: a \\boxed{} math answer or the source's own style, a puzzle's <answer> tag, a
fenced program, a diff), after the chat format's reasoning section (m1flow.chat.response_text). A
kind whose gold cannot be checked offline raises NoGold with the reason (GenRM judges need a model;
a code row without a reference solution has nothing to run; a kind that declares no gold writer).
"""
from __future__ import annotations

from typing import Protocol

from pydantic import ValidationError

from m1flow.chat import response_text
from m1flow.kinds.base import KINDS, Kind, NoGold, SpecError, Verifier, kind_of, where


class HasVerifier(Protocol):
    verifier: Verifier


def kind(verifier: Verifier) -> Kind:
    """The declaration of a verifier's kind; SpecError naming the field for one not declared."""
    name = kind_of(verifier.kind)
    if name not in KINDS:
        raise SpecError("verifier.kind", f"unknown verifier kind {verifier.kind!r}; known: {', '.join(KINDS.names())}")
    return KINDS.get(name)


def check_verifier(verifier: Verifier) -> None:
    """Raise SpecError naming the field when the verifier does not fit its kind's schema."""
    declared = kind(verifier)
    if declared.needs_suffix and not verifier.kind.partition(":")[2]:
        raise SpecError("verifier.kind", f"{verifier.kind!r} names no task: write {declared.needs_suffix}")
    if declared.schema is None:
        raise SpecError("verifier.kind", f"verifier kind {declared.name!r} declares no schema")
    try:
        # the fields as they are, not model_dump(): a dump deep-copies the spec only to be validated again
        declared.schema.model_validate({"kind": verifier.kind, "gold": verifier.gold, "spec": verifier.spec,
                                        "payload_uri": verifier.payload_uri})
    except ValidationError as exc:
        raise SpecError(*where(exc, "verifier")) from None


def fill_from_prompt(verifier: Verifier, prompt: str) -> None:
    """Complete the spec with what the prompt states, for a kind that reads some (the options of a
    multiple-choice question), before the schema checks it."""
    name = kind_of(verifier.kind)
    declared = KINDS.get(name) if name in KINDS else None
    if declared is not None and declared.from_prompt is not None:
        verifier.spec = declared.from_prompt(prompt, verifier.spec)


def gold_answer(verifier: Verifier) -> str:
    """The gold in the answer style the spec names (the kind's default when it names none or one the
    kind does not have); NoGold when it cannot be written."""
    if kind_of(verifier.kind) not in KINDS:
        raise NoGold(f"unknown verifier kind {verifier.kind!r}")
    declared = KINDS.get(kind_of(verifier.kind))
    if declared.gold is None or not declared.styles:
        raise NoGold(f"verifier kind {declared.name!r} declares no gold writer")
    try:
        style = declared.style(verifier.spec.get("style"))
    except ValueError:
        style = declared.styles[0]
    return declared.gold(verifier, style)


def gold_response(record: HasVerifier) -> str:
    """The whole response text (after the generation prompt) that states the record's gold."""
    return response_text(gold_answer(record.verifier))
