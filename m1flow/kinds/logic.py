"""`logic:<family>`: a puzzle of m1flow's own generators (m1flow.tasks.logic), checked against its
constraints; the spec is the whole puzzle, the answer the last <answer> tag after the reasoning."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from m1flow.kinds.base import Kind, OpenSpec, SpecError, Style, TaskSchema, Verifier, declare, unknown
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


class LogicSchema(TaskSchema):
    spec: PuzzleSpec
    task_word = "family"

    @classmethod
    def check_task(cls, task: str) -> None:
        if task not in TASKS:
            raise SpecError("verifier.kind", unknown("logic family", task, tuple(TASKS)))


def _gold(verifier: Verifier, style: Style) -> str:
    return style.write(verifier.gold or verifier.spec["solution"])


LOGIC = declare(Kind(name="logic", schema=LogicSchema, gold=_gold, styles=(ANSWER_TAG,),
                     needs_suffix="logic:<family>", gold_field="verifier.spec.solution"))
