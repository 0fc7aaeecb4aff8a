"""SynLogic-style logic tasks: seeded generators with a difficulty knob and constraint verifiers.

    from svc_reward.verifiers.logic import TASKS, Puzzle
    puzzle = TASKS["sudoku"].generate(seed=7, difficulty=2)
    result = TASKS["sudoku"].verify(puzzle, response)      # -> ScoreResult
"""
from __future__ import annotations

from svc_reward.result import ScoreResult
from svc_reward.verifiers.logic.base import FormatError, LogicTask, Puzzle
from svc_reward.verifiers.logic.boolean_expr import BooleanExpressions
from svc_reward.verifiers.logic.cryptarithm import Cryptarithm
from svc_reward.verifiers.logic.dyck import Dyck
from svc_reward.verifiers.logic.futoshiki import Futoshiki
from svc_reward.verifiers.logic.game24 import Game24
from svc_reward.verifiers.logic.kakurasu import Kakurasu
from svc_reward.verifiers.logic.skyscraper import Skyscraper
from svc_reward.verifiers.logic.star_battle import StarBattle
from svc_reward.verifiers.logic.sudoku import Sudoku
from svc_reward.verifiers.logic.web_of_lies import WebOfLies
from svc_reward.verifiers.logic.word_sorting import WordSorting
from svc_reward.verifiers.logic.zebra import Zebra

TASKS: dict[str, LogicTask] = {task.name: task for task in (
    Sudoku(), Game24(), Cryptarithm(), Dyck(), Zebra(), Futoshiki(), Skyscraper(), StarBattle(),
    Kakurasu(), WordSorting(), BooleanExpressions(), WebOfLies())}


def verify_puzzle(puzzle: Puzzle | dict, response: str) -> ScoreResult:
    """Score a response for a puzzle (or its to_dict form, as carried in a verifier spec)."""
    if isinstance(puzzle, dict):
        puzzle = Puzzle.from_dict(puzzle)
    return TASKS[puzzle.task].verify(puzzle, response)


__all__ = ["TASKS", "FormatError", "LogicTask", "Puzzle", "verify_puzzle"]
