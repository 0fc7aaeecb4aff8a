"""The one record every scorer returns.

Why one shape: the group scorer, the learner and the monitor must treat a math check, a puzzle
check, a sandboxed test run and a GenRM verdict alike. An infrastructure failure (timeout,
sandbox_error, judge_error) is never a reward of 0: it is marked so the learner can drop it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from m1flow.verdicts import INFRA_FAILURE_STATUSES


class Status(str, Enum):
    OK = "ok"
    FORMAT_ERROR = "format_error"
    TIMEOUT = "timeout"
    SANDBOX_ERROR = "sandbox_error"
    JUDGE_ERROR = "judge_error"

    @property
    def is_infra_failure(self) -> bool:
        """True when the score says nothing about the sample, only about our infrastructure."""
        return self.value in INFRA_FAILURE_STATUSES


@dataclass(frozen=True)
class RewardParts:
    correctness: float = 0.0
    format: float = 0.0
    length_penalty: float = 0.0
    genrm: float = 0.0

    def total(self) -> float:
        return self.correctness + self.format + self.length_penalty + self.genrm


@dataclass(frozen=True)
class ScoreResult:
    reward: float
    correct: bool | None
    status: Status
    parts: RewardParts = field(default_factory=RewardParts)
    detail: str = ""

    @property
    def usable(self) -> bool:
        """Whether the learner may train on this sample."""
        return not self.status.is_infra_failure

    def with_parts(self, **changes: float) -> "ScoreResult":
        """Return a copy with some parts changed and the reward recomputed as their sum."""
        parts = replace(self.parts, **changes)
        return replace(self, parts=parts, reward=parts.total())

    @classmethod
    def scored(cls, correct: bool, detail: str = "", correct_reward: float = 1.0) -> "ScoreResult":
        """A verdict from a verifier that ran fine."""
        value = correct_reward if correct else 0.0
        return cls(reward=value, correct=correct, status=Status.OK,
                   parts=RewardParts(correctness=value), detail=detail)

    @classmethod
    def failed(cls, status: Status, detail: str) -> "ScoreResult":
        """A sample that could not be judged; format errors score 0, infra failures are dropped."""
        return cls(reward=0.0, correct=False if status is Status.FORMAT_ERROR else None,
                   status=status, detail=detail[:500])
