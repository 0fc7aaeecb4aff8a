"""Generated chained sums with a written scratchpad: a task whose responses are long.

A prompt is "4+7+2+9=" and the reference response works left to right, then states the result
after a separator: "4+7=11,11+2=13,13+9=22;22". Only the final answer is rewarded, so a response
is 15-40 tokens of which a few digits (the partial sums) decide it: the rare "fork" tokens whose
importance ratios drift during off-policy updates, which is where CISPO and PPO-style clipping
differ (the MiniMax-M1 report's setting, at toy scale).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from m1flow.chat import after_reasoning

SEPARATOR = ";"


@dataclass(frozen=True)
class ChainProblem:
    prompt_id: str
    text: str
    solution: str  # the reference response: scratchpad, separator, answer
    answer: str


def write_solution(terms: list[int], slip: tuple[int, int] | None = None) -> str:
    """The scratchpad and answer for summing `terms` left to right.

    `slip` = (position, offset) writes a wrong number: at position i < len(terms) - 1 the i-th
    partial sum is off by `offset` and later steps carry the error on; at the last position only
    the stated final answer is off (a near miss after a right scratchpad).
    """
    total, steps = terms[0], []
    for i, term in enumerate(terms[1:]):
        value = total + term + (slip[1] if slip and slip[0] == i else 0)
        steps.append(f"{total}+{term}={value}")
        total = value
    final = total + (slip[1] if slip and slip[0] == len(terms) - 1 else 0)
    return ",".join(steps) + f"{SEPARATOR}{final}"


def make_problem(rng: random.Random, max_operand: int = 9, min_terms: int = 3,
                 max_terms: int = 5) -> tuple[str, str, str]:
    terms = [rng.randint(0, max_operand) for _ in range(rng.randint(min_terms, max_terms))]
    return "+".join(map(str, terms)) + "=", write_solution(terms), str(sum(terms))


def problems(seed: int, n: int, max_operand: int = 9, min_terms: int = 3, max_terms: int = 5,
             prefix: str = "chain") -> list[ChainProblem]:
    """n seeded problems; distinct seeds give disjoint-enough sets for train and eval."""
    if not 2 <= min_terms <= max_terms:
        raise ValueError(f"need 2 <= min_terms <= max_terms, got {min_terms}, {max_terms}")
    rng = random.Random(seed)
    return [ChainProblem(f"{prefix}-{seed}-{i}", *make_problem(rng, max_operand, min_terms, max_terms))
            for i in range(n)]


def terms_of(problem: ChainProblem) -> list[int]:
    return [int(t) for t in problem.text.rstrip("=").split("+")]


def noisy_solution(problem: ChainProblem, rng: random.Random, noise: float) -> str:
    """With probability `noise`, the reference with one slip (off by 1 to 3) somewhere.

    The slip lands on a partial sum or on the final answer with equal odds, so the cold start
    learns real but not certain mass on each digit that decides the result, as arith's near-miss
    labels do for its one-number answers.
    """
    if rng.random() >= noise:
        return problem.solution
    terms = terms_of(problem)
    return write_solution(terms, (rng.randrange(len(terms)), rng.choice((-3, -2, -1, 1, 2, 3))))


_ANSWER = re.compile(rf"{SEPARATOR}\s*(-?\d+)\s*$")


def parse_answer(response: str) -> int | None:
    """The integer stated after the last separator (after the reasoning section, if any), or None
    when the response does not end in one."""
    match = _ANSWER.search(after_reasoning(response))
    return int(match.group(1)) if match else None


def reward(response: str, answer: str) -> float:
    """1 for a right final answer; the scratchpad is not checked (only outcomes are verifiable)."""
    return float(parse_answer(response) == int(answer))
