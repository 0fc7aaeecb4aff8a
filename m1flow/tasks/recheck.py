"""Chained sums with a rare re-check: the MiniMax-M1 report's "reflective token", at toy scale.

The problems are m1flow.tasks.chain's. A response works a quick pass, then either states its
result after the separator or writes the re-check token "?" and redoes the scratchpad with care,
stating the redo's result:

    "4+7=1,1+2=3,3+9=2;2"                          quick pass, carries forgotten: wrong
    "4+7=1,1+2=3,3+9=2?4+7=11,11+2=13,13+9=22;22"  re-checked: right

The warm start's quick passes forget the carry (the tens that the ones digits make) at a carry
step with probability `carry_slip`; its redos never slip, and it re-checks rarely (a few percent),
whatever the quick pass did. So the warm-started policy writes "?" with low probability while a
response that takes it is much more often right: a low-probability, high-value token, the kind
PPO's clip cuts off once its ratio passes 1 + eps_high within a batch and CISPO keeps.

Why a systematic slip: with chain's random slips (off by 1-3 anywhere) the right digit is already
the most likely one, so RL sharpens the quick pass to the redo's accuracy within a few steps and the
re-check loses its value. A forgotten carry is the quick pass's most likely answer, which RL cannot
sharpen away. Only the final answer is rewarded, as in chain.
"""
from __future__ import annotations

import random

from m1flow.tasks.chain import SEPARATOR, ChainProblem, parse_answer, problems, reward, terms_of, write_solution

RECHECK = "?"

__all__ = ["RECHECK", "ChainProblem", "carries", "noisy_solution", "parse_answer", "problems", "reward",
           "took_recheck", "write_recheck"]


def carries(total: int, term: int) -> bool:
    """Whether adding term to total carries a ten from the ones digits."""
    return total % 10 + term % 10 >= 10


def write_recheck(terms: list[int], forgotten: frozenset[int] = frozenset(), recheck: bool = False) -> str:
    """The quick pass over `terms`, forgetting the carry at the steps numbered in `forgotten` (a step
    without a carry is unaffected), then its result, or with `recheck` the re-check token and
    chain's correct solution."""
    total, steps = terms[0], []
    for i, term in enumerate(terms[1:]):
        value = total + term - (10 if i in forgotten and carries(total, term) else 0)
        steps.append(f"{total}+{term}={value}")
        total = value
    quick = ",".join(steps)
    return quick + (RECHECK + write_solution(terms) if recheck else f"{SEPARATOR}{total}")


def noisy_solution(problem: ChainProblem, rng: random.Random, carry_slip: float, recheck_rate: float) -> str:
    """A warm-start label: the quick pass forgets each carry with probability carry_slip, and,
    independently, the label re-checks with probability recheck_rate."""
    terms = terms_of(problem)
    forgotten = frozenset(i for i in range(len(terms) - 1) if rng.random() < carry_slip)
    return write_recheck(terms, forgotten, recheck=rng.random() < recheck_rate)


def took_recheck(response: str) -> bool:
    """Whether a response wrote the re-check token before its stated answer."""
    return RECHECK in response.rsplit(SEPARATOR, 1)[0]
