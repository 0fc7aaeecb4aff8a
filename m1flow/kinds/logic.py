"""`logic:<family>`: a puzzle of m1flow's own generators (m1flow.tasks.logic), checked against its
constraints; the spec is the whole puzzle, the answer the last <answer> tag after the reasoning."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from m1flow.kinds.base import Kind, KindSchema, OpenSpec, SpecError, Style, Verifier, declare, unknown
from m1flow.tasks.logic import TASKS

NonEmpty = Annotated[str, Field(min_length=1)]
ANSWER_TAG = Style("answer_tag", reads="<answer>...</answer>", writes="<answer>{answer}</answer>")


class PuzzleSpec(OpenSpec):
    task: NonEmpty
    seed: int
    difficulty: int
    question: NonEmpty
    solution: NonEmpty
    metadata: dict[str, Any]


class LogicSchema(KindSchema):
    spec: PuzzleSpec

    @model_validator(mode="after")
    def _family(self) -> "LogicSchema":
        if self.spec.task != self.suffix:
            raise SpecError("verifier.spec.task", f"{self.spec.task!r} is not the kind's family {self.suffix!r}")
        if self.suffix not in TASKS:
            raise SpecError("verifier.kind", unknown("logic family", self.suffix, tuple(TASKS)))
        return self


def _gold(verifier: Verifier, style: Style) -> str:
    return style.write(verifier.gold or verifier.spec["solution"])


LOGIC = declare(Kind(name="logic", schema=LogicSchema, gold=_gold, styles=(ANSWER_TAG,),
                     needs_suffix="logic:<family>", gold_field="verifier.spec.solution"))
