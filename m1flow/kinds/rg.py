"""`rg:<task>`: a reasoning-gym item by what regenerates it (task, config, seed, index), scored by
the dataset's own `score_answer` (m1flow.tasks.rg); the answer is the last <answer> tag."""
from __future__ import annotations

import functools
from typing import Annotated, Any

from pydantic import Field

from m1flow.kinds.base import Kind, NoGold, OpenSpec, SpecError, TaskSchema, Verifier, declare, unknown
from m1flow.kinds.logic import ANSWER_TAG
from m1flow.tasks import rg


class RgSpec(OpenSpec):
    task: Annotated[str, Field(min_length=1)]
    config: dict[str, Any] = {}
    seed: int
    index: Annotated[int, Field(ge=0)]


class RgSchema(TaskSchema):
    """A reasoning-gym item by what regenerates it (task, config, seed, index), not the item."""
    spec: RgSpec

    @classmethod
    def check_task(cls, task: str) -> None:
        check_rg_task(task)


@functools.cache
def rg_task_names() -> tuple[str, ...]:
    """reasoning-gym's task names (imports the library once: about 1.4 s)."""
    try:
        return tuple(rg.task_names())
    except ImportError:
        raise SpecError("verifier.kind", "rg:<task> needs reasoning-gym: pip install 'm1flow[rg]'") from None


def check_rg_task(task: str) -> None:
    names = rg_task_names()
    if task not in names:
        raise SpecError("verifier.spec.task", unknown("reasoning-gym task", task, names))


def _gold(verifier: Verifier, style: Any) -> str:
    gold = verifier.gold
    if not gold:
        spec = verifier.spec
        try:
            answer = rg.entry(spec["task"], spec.get("config") or {}, spec["seed"], spec["index"]).get("answer")
        except ImportError:
            raise NoGold("rg row without verifier.gold, and reasoning-gym is not installed") from None
        if answer is None:
            raise NoGold(f"reasoning-gym task {spec['task']!r} has no gold answer (answer=None)")
        gold = str(answer)
    return style.write(gold)


RG = declare(Kind(name="rg", schema=RgSchema, gold=_gold, styles=(ANSWER_TAG,), needs_suffix="rg:<task>",
                  gold_field="verifier.spec"))
