"""Generated arithmetic prompts: the demo's task, small enough for a tiny model on 2 CPU cores.

A prompt is "47+38=" and the expected answer, after the (here empty) reasoning section of the chat
format, is the result's digits: "</think>\n85".
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from m1flow.chat import after_reasoning

_ANSWER = re.compile(r"^\s*(-?\d+)\s*$")


@dataclass(frozen=True)
class ArithProblem:
    prompt_id: str
    text: str
    answer: str


def make_problem(rng: random.Random, max_operand: int = 99, ops: str = "+-") -> tuple[str, str]:
    a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
    op = rng.choice(ops)
    if op == "-" and b > a:
        a, b = b, a
    value = a + b if op == "+" else a - b if op == "-" else a * b
    return f"{a}{op}{b}=", str(value)


def problems(seed: int, n: int, max_operand: int = 99, ops: str = "+-",
             prefix: str = "arith") -> list[ArithProblem]:
    """n seeded problems; distinct seeds give disjoint-enough sets for train and eval."""
    rng = random.Random(seed)
    return [ArithProblem(f"{prefix}-{seed}-{i}", *make_problem(rng, max_operand, ops)) for i in range(n)]


def parse_answer(response: str) -> int | None:
    """The integer the response states after its reasoning, or None when that is not exactly one integer."""
    match = _ANSWER.match(after_reasoning(response))
    return int(match.group(1)) if match else None
