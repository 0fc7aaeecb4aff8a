"""A stream of open-ended answers for GenRM length-bias tests: 10-40 words whose distinct-word share (the
quality judge's hidden value) is drawn independently of their number, as in the monitor loop's broker test."""
from __future__ import annotations

import random

VOCAB = [f"w{i}" for i in range(300)]


def answer(rng: random.Random) -> str:
    n = rng.randint(10, 40)
    distinct = rng.sample(VOCAB, max(1, round(n * rng.uniform(0.3, 1.0))))
    return " ".join(distinct + [rng.choice(distinct) for _ in range(n - len(distinct))])
