"""SynLogic-style logic tasks: seeded generators with a difficulty knob and constraint checks.

    from m1flow.tasks.logic import TASKS
    puzzle = TASKS["sudoku"].generate(seed=7, difficulty=2)
    problem = TASKS["sudoku"].check(puzzle.metadata, answer)   # None, a violation, or FormatError
    fields = record_fields("sudoku", seed=0, index=41, level=2)  # kind logic:sudoku, spec = the puzzle

The library half of the `logic` verifier kind: the prompt source generates puzzles from here and
svc_reward (svc_reward.verifiers.logic) turns a check's verdict into a reward.
"""
from __future__ import annotations

from typing import Any

from m1flow.tasks.logic.base import ANSWER_NOTE, MAX_ANSWER_CHARS, FormatError, LogicTask, Puzzle
from m1flow.tasks.logic.boolean_expr import BooleanExpressions
from m1flow.tasks.logic.cryptarithm import Cryptarithm
from m1flow.tasks.logic.dyck import Dyck
from m1flow.tasks.logic.futoshiki import Futoshiki
from m1flow.tasks.logic.game24 import Game24
from m1flow.tasks.logic.kakurasu import Kakurasu
from m1flow.tasks.logic.skyscraper import Skyscraper
from m1flow.tasks.logic.star_battle import StarBattle
from m1flow.tasks.logic.sudoku import Sudoku
from m1flow.tasks.logic.web_of_lies import WebOfLies
from m1flow.tasks.logic.word_sorting import WordSorting
from m1flow.tasks.logic.zebra import Zebra
from m1flow.tasks.names import unknown

TASKS: dict[str, LogicTask] = {task.name: task for task in (
    Sudoku(), Game24(), Cryptarithm(), Dyck(), Zebra(), Futoshiki(), Skyscraper(), StarBattle(),
    Kakurasu(), WordSorting(), BooleanExpressions(), WebOfLies())}
LICENSE = "m1flow's own generators"


def task(family: str) -> LogicTask:
    """The family's generator and checker; ValueError naming close matches for an unknown one."""
    try:
        return TASKS[family]
    except KeyError:
        raise unknown("logic family", family, TASKS) from None


def task_names() -> list[str]:
    return sorted(TASKS)


def record_fields(family: str, seed: int, index: int, level: int | None = None) -> dict[str, Any]:
    """Item `index` of the family's stream `seed` at `level` (1 when None; clamped to 1..max_level), as
    a task record's fields (m1flow.data.generators.logic_record builds the record).

    The spec is the whole puzzle (Puzzle.to_dict): the reward service checks against it without
    regenerating anything.
    """
    chosen = task(family)
    level = 1 if level is None else level
    puzzle = chosen.generate(seed, level, index)
    clamped = max(1, min(int(level), chosen.max_level))
    return {"id": f"{seed}-{index}-L{clamped}", "source": f"logic:{family}", "prompt": puzzle.question,
            "verifier": {"kind": f"logic:{family}", "gold": puzzle.solution, "spec": puzzle.to_dict()},
            "difficulty": float(clamped), "license": LICENSE}


__all__ = ["ANSWER_NOTE", "LICENSE", "MAX_ANSWER_CHARS", "TASKS", "FormatError", "LogicTask", "Puzzle",
           "record_fields", "task", "task_names"]
