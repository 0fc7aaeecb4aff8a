"""The puzzle record and the contract every logic task follows.

Why this shape: a puzzle travels inside a Kafka message's verifier spec, so it is plain JSON
(to_dict / from_dict); a task checks an answer against the puzzle's constraints, never against the
one stored solution, so every valid answer scores. Checks say what is wrong (a string) or raise
FormatError for an answer that cannot be read; turning that into a reward is the reward service's
job (svc_reward.verifiers.logic), so the prompt source can generate puzzles without it.
"""
from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any

ANSWER_NOTE = "Think it through, then give only the final answer inside <answer></answer>."
MAX_ANSWER_CHARS = 20_000  # far above any real answer; bounds the work a verifier does


class FormatError(ValueError):
    """The answer cannot be read as an answer to this puzzle."""


@dataclass
class Puzzle:
    task: str
    seed: int
    difficulty: int
    question: str
    solution: str  # one valid answer, as it would appear inside <answer></answer>
    metadata: dict[str, Any] = field(default_factory=dict)  # what the verifier checks against
    index: int | None = None  # the item of a seeded stream (m1flow.tasks.logic.record_fields); None: one per seed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Puzzle":
        return cls(**{k: data[k] for k in ("task", "seed", "difficulty", "question", "solution", "metadata")},
                   index=data.get("index"))


class LogicTask(ABC):
    """A seeded generator with a difficulty knob and a constraint-checking verifier."""

    name: str = ""
    max_level: int = 3

    def generate(self, seed: int, difficulty: int = 1, index: int | None = None) -> Puzzle:
        """The same (seed, difficulty, index) always gives the same puzzle; levels clamp to 1..max_level."""
        stream = f"{self.name}:{seed}:{difficulty}" + ("" if index is None else f":{index}")
        rng = random.Random(stream)
        level = max(1, min(int(difficulty), self.max_level))
        question, solution, metadata = self.build(rng, level)
        return Puzzle(self.name, seed, difficulty, f"{question}\n\n{ANSWER_NOTE}", solution, metadata, index)

    @abstractmethod
    def build(self, rng: random.Random, level: int) -> tuple[str, str, dict[str, Any]]:
        """(question, one solution, metadata) for a level in 1..max_level."""

    @abstractmethod
    def check(self, meta: dict[str, Any], answer: str) -> str | None:
        """None when the answer satisfies every constraint, else the first violation.

        Raises FormatError when the answer cannot be read at all.
        """
