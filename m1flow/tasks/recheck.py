"""Chained sums with a rare re-check: the MiniMax-M1 report's "reflective token", at toy scale.

The problems are m1flow.tasks.chain's. A response may, after its scratchpad, write the re-check
token "?" and redo the whole scratchpad before stating the answer:

    "4+7=11,11+2=14,14+9=23;23"                             slipped, no re-check: wrong
    "4+7=11,11+2=14,14+9=23?4+7=11,11+2=13,13+9=22;22"      slipped, re-checked: right

The warm start's labels slip as often as chain's (half of them) but take the re-check only on a
few percent, independently of the slip, and the redo after "?" never slips. So the warm-started
policy writes "?" rarely (a low-probability token) while a response that takes it is much more
often right (a high-value token): the token PPO's clip cuts off once its ratio passes 1 + eps_high
within a batch, and CISPO keeps. Only the final answer is rewarded, as in chain.
"""
from __future__ import annotations

import random

from m1flow.tasks.chain import (SEPARATOR, ChainProblem, parse_answer, problems, reward, terms_of,
                                write_solution)

RECHECK = "?"

__all__ = ["RECHECK", "ChainProblem", "noisy_solution", "parse_answer", "problems", "reward", "took_recheck",
           "write_recheck"]


def write_recheck(terms: list[int], slip: tuple[int, int] | None = None, recheck: bool = False) -> str:
    """chain's response for `terms` with an optional slip; with `recheck`, the scratchpad is followed by
    the re-check token and a redo without slip, whose answer is the one stated."""
    first = write_solution(terms, slip)
    if not recheck:
        return first
    scratchpad = first.rsplit(SEPARATOR, 1)[0]
    return scratchpad + RECHECK + write_solution(terms)


def noisy_solution(problem: ChainProblem, rng: random.Random, noise: float, recheck_rate: float) -> str:
    """A warm-start label: one slip (off by 1 to 3) with probability `noise`, as in chain, and,
    independently, the re-check with probability `recheck_rate`."""
    terms = terms_of(problem)
    slip = None
    if rng.random() < noise:
        slip = (rng.randrange(len(terms)), rng.choice((-3, -2, -1, 1, 2, 3)))
    return write_recheck(terms, slip, recheck=rng.random() < recheck_rate)


def took_recheck(response: str) -> bool:
    """Whether a response wrote the re-check token before its stated answer."""
    return RECHECK in response.rsplit(SEPARATOR, 1)[0]

