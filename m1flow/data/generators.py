"""Generated task families as sources: record i is a pure function of (seed, i, level, config).

Why pure in i: the prompt source resumes, shuffles and replays by position, so regenerating record
i must not depend on having generated records 0..i-1. "arith" and "general" (open instructions for
the GenRM, m1flow.tasks.general) are m1flow's own; "logic:<family>"
and "rg:<task>" call m1flow.tasks.logic / m1flow.tasks.rg, imported only when such a source is used.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from m1flow.data.record import TaskRecord, Verifier
from m1flow.registry import Registry

# (suffix after ':', seed, index, level, config) -> record
Generator = Callable[[str, int, int, "int | None", dict[str, Any]], TaskRecord]
GENERATORS: Registry[Generator] = Registry("generator")


@GENERATORS.register("arith")
def arith(_: str, seed: int, index: int, level: int | None, config: dict[str, Any]) -> TaskRecord:
    """'47+38=' -> '85'. level L: operands below 10**(L+1) (level 1: two digits, the demo's)."""
    from m1flow.tasks.arith import make_problem

    max_operand = int(config.get("max_operand", 10 ** ((level or 1) + 1) - 1))
    text, answer = make_problem(random.Random(f"arith/{seed}/{index}"), max_operand, str(config.get("ops", "+-")))
    return TaskRecord(id=f"{seed}-{index}", source="arith", prompt=text,
                      verifier=Verifier(kind="arith", gold=answer), difficulty=level, license="MIT")


@GENERATORS.register("general")
def general(_: str, seed: int, index: int, level: int | None, config: dict[str, Any]) -> TaskRecord:
    """'Write a few sentences about rivers. Mention: water, bank, flow.', judged by the GenRM (no gold).
    level L: L + 2 words to mention (level 1: three)."""
    from m1flow.tasks.general import make_instruction

    text = make_instruction(random.Random(f"general/{seed}/{index}"), 1 if level is None else level)
    return TaskRecord(id=f"{seed}-{index}", source="general", domain="general", prompt=text,
                      verifier=Verifier(kind="genrm"), difficulty=level, license="MIT")


def logic_record(family: str, seed: int, index: int, level: int | None = None) -> TaskRecord:
    """Item `index` of logic family `family`'s stream `seed` (m1flow.tasks.logic.record_fields)."""
    from m1flow.tasks import logic

    return TaskRecord.model_validate(logic.record_fields(family, seed, index, level))


def rg_record(task: str, seed: int, index: int, config: dict[str, Any] | None = None,
              level: int | None = None) -> TaskRecord:
    """Item `index` of reasoning-gym task `task` (m1flow.tasks.rg.record_fields)."""
    from m1flow.tasks import rg

    return TaskRecord.model_validate(rg.record_fields(task, seed, index, config, level))


@GENERATORS.register("logic")
def logic(family: str, seed: int, index: int, level: int | None, config: dict[str, Any]) -> TaskRecord:
    return logic_record(family, seed, index, level)


@GENERATORS.register("rg")
def rg(task: str, seed: int, index: int, level: int | None, config: dict[str, Any]) -> TaskRecord:
    return rg_record(task, seed, index, config or None, level)


def generate(name: str, seed: int, index: int, level: int | None = None,
             config: dict[str, Any] | None = None) -> TaskRecord:
    """Record `index` of generator `name` ("arith", "logic:sudoku", "rg:leg_counting")."""
    family, _, suffix = name.partition(":")
    return GENERATORS.get(family)(suffix, seed, index, level, dict(config or {}))
