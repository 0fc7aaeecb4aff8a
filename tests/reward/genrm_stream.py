"""A stream of open-ended answers for GenRM length-bias tests: 10-40 words whose distinct-word share (the
quality judge's hidden value) is drawn independently of their number, as in the monitor loop's broker test;
a policy over answer lengths that learns from the rewards it is paid; and the GenRM broker loop's regime
(tests/integration/test_genrm_loop.py): general tasks answered in 2-12 words before a judge that buys length
outright."""
from __future__ import annotations

import math
import random

from m1flow.tasks.general import make_instruction, quality, sample_answer
from svc_reward.genrm import InstructionJudge

VOCAB = [f"w{i}" for i in range(300)]


def length_loving_judge() -> InstructionJudge:
    """The broker loop's judge once biased: 0.05 a character against a hidden quality in [0, 1]."""
    return InstructionJudge(quality, length_bonus=0.05, margin=0.05)


def general_group(rng: random.Random, size: int = 8) -> tuple[str, list[str]]:
    """A general task and `size` answers of 2-12 words, as the loop's warm-started policy writes them."""
    prompt = make_instruction(rng)
    return prompt, [sample_answer(rng, prompt, 2, 12) for _ in range(size)]


def answer(rng: random.Random) -> str:
    n = rng.randint(10, 40)
    distinct = rng.sample(VOCAB, max(1, round(n * rng.uniform(0.3, 1.0))))
    return " ".join(distinct + [rng.choice(distinct) for _ in range(n - len(distinct))])


class LengthPolicy:
    """A policy over answer lengths that learns from its rewards: a softmax over `extra` words beyond `shortest`
    (the answers themselves from m1flow.tasks.general.sample_answer, so their hidden quality does not
    depend on length), updated once per window by REINFORCE on group-normalised advantages, as the
    learner's GRPO-style advantage would move it. It starts at about 12 words (most answers 4-8) and buys length when
    the rewards pay for it."""

    def __init__(self, seed: int, extra: int = 30, lr: float = 3.0, shortest: int = 4) -> None:
        self.rng, self.lr, self.shortest = random.Random(seed), lr, shortest
        self.logits = [2.0 if k < 5 else 0.0 for k in range(extra)]
        self.grad = [0.0] * extra
        self.samples = 0

    def probs(self) -> list[float]:
        top = max(self.logits)
        weights = [math.exp(v - top) for v in self.logits]
        return [w / sum(weights) for w in weights]

    def group(self, prompt: str, size: int = 8) -> tuple[list[int], list[str]]:
        ks = self.rng.choices(range(len(self.logits)), weights=self.probs(), k=size)
        return ks, [sample_answer(self.rng, prompt, self.shortest + k, self.shortest + k) for k in ks]

    def observe(self, ks: list[int], rewards: list[float]) -> None:
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        self.samples += len(ks)
        if std == 0:
            return
        probs = self.probs()
        for k, r in zip(ks, rewards):
            for j, p in enumerate(probs):
                self.grad[j] += (r - mean) / std * ((j == k) - p)

    def update(self) -> None:
        self.logits = [v + self.lr * g / max(1, self.samples) for v, g in zip(self.logits, self.grad)]
        self.grad, self.samples = [0.0] * len(self.logits), 0
