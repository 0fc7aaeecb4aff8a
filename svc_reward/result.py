"""The one record every scorer returns.

Why one shape: the group scorer, the learner and the monitor must treat a math check, a puzzle
check, a sandboxed test run and a GenRM verdict alike. The status is the contract's `Status` enum
(m1flow.status): an infrastructure failure (verifier timeout, sandbox or judge error) is never a
reward of 0, it is marked so the learner leaves the sample out.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from m1flow.status import Status

__all__ = ["RewardParts", "ScoreResult", "Status"]


@dataclass(frozen=True)
class RewardParts:
    correctness: float = 0.0
    genrm: float = 0.0

    def total(self) -> float:
        return self.correctness + self.genrm


@dataclass(frozen=True)
class ScoreResult:
    reward: float
    correct: bool | None
    status: Status
    parts: RewardParts = field(default_factory=RewardParts)
    detail: str = ""
    reason: str = ""  # why, in one word a monitor counts (the swe kind's REASONS); "" where a kind says none

    @property
    def usable(self) -> bool:
        """Whether the sample's score says something about the policy (not our infrastructure failing)."""
        return not self.status.is_infra_failure

    @classmethod
    def scored(cls, correct: bool, detail: str = "", correct_reward: float = 1.0, reason: str = "",
               reward: float | None = None) -> "ScoreResult":
        """A verdict from a verifier that ran fine; `reward`: a partial one for a wrong answer."""
        value = correct_reward if correct else (reward or 0.0)
        return cls(reward=value, correct=correct, status=Status.OK,
                   parts=RewardParts(correctness=value), detail=detail, reason=reason)

    @classmethod
    def failed(cls, status: Status, detail: str, reason: str = "") -> "ScoreResult":
        """A sample that could not be judged; format errors score 0, infra failures are left out."""
        return cls(reward=0.0, correct=False if status is Status.FORMAT_ERROR else None,
                   status=status, detail=detail[:500], reason=reason)
