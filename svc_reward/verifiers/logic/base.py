"""The puzzle record and the contract every logic task follows.

Why this shape: a puzzle travels inside a Kafka message's verifier spec, so it is plain JSON
(to_dict / from_dict); a task checks an answer against the puzzle's constraints, never against the
one stored solution, so every valid answer scores; a malformed answer is a format error, and a bug
of ours is a judge error (dropped), never a crash of the reward service.
"""
from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any

from svc_reward.result import ScoreResult, Status
from svc_reward.verifiers.extract import last_tag

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Puzzle":
        return cls(**{k: data[k] for k in ("task", "seed", "difficulty", "question", "solution", "metadata")})


class LogicTask(ABC):
    """A seeded generator with a difficulty knob and a constraint-checking verifier."""

    name: str = ""
    max_level: int = 3

    def generate(self, seed: int, difficulty: int = 1) -> Puzzle:
        """The same (seed, difficulty) always gives the same puzzle; levels above max_level clamp."""
        rng = random.Random(f"{self.name}:{seed}:{difficulty}")
        level = max(1, min(int(difficulty), self.max_level))
        question, solution, metadata = self.build(rng, level)
        return Puzzle(self.name, seed, difficulty, f"{question}\n\n{ANSWER_NOTE}", solution, metadata)

    def verify(self, puzzle: Puzzle, response: str) -> ScoreResult:
        """Score the last <answer> of a response; reasoning inside <think> is ignored."""
        if puzzle.task != self.name:
            raise ValueError(f"puzzle of task {puzzle.task!r} given to {self.name!r}")
        answer = last_tag(response)
        if answer is None:
            return ScoreResult.failed(Status.FORMAT_ERROR, "no <answer>...</answer> after the reasoning")
        if len(answer) > MAX_ANSWER_CHARS:
            return ScoreResult.failed(Status.FORMAT_ERROR, f"answer longer than {MAX_ANSWER_CHARS} characters")
        try:
            problem = self.check(puzzle.metadata, answer)
        except FormatError as err:
            return ScoreResult.failed(Status.FORMAT_ERROR, str(err))
        except RecursionError:
            return ScoreResult.failed(Status.FORMAT_ERROR, "answer nested too deeply")
        except Exception as err:  # noqa: BLE001  (our bug: drop the sample, keep the service up)
            return ScoreResult.failed(Status.JUDGE_ERROR, f"{self.name} verifier raised {err!r}")
        return ScoreResult.scored(problem is None, detail=problem or "all constraints hold")

    @abstractmethod
    def build(self, rng: random.Random, level: int) -> tuple[str, str, dict[str, Any]]:
        """(question, one solution, metadata) for a level in 1..max_level."""

    @abstractmethod
    def check(self, meta: dict[str, Any], answer: str) -> str | None:
        """None when the answer satisfies every constraint, else the first violation.

        Raises FormatError when the answer cannot be read at all.
        """
