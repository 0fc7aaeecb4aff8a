"""Reward, accuracy and length totals of scored groups: the learner's metrics and the monitor's rows.

Samples whose score is an infrastructure failure (sandbox down, verifier timeout) are left out:
their reward says nothing about the policy. Rewards are as scored (the verifier's; schema-1
records: as the reward service shaped them), before the learner's shaping. Whether a group has
anything to learn is the learner's decision, on shaped rewards (`m1flow.rl.selection`), not a total.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from m1flow.contracts import events
from m1flow.status import status_of


@dataclass(frozen=True)
class GroupTotals:
    """Sums over the samples of some groups; sums add across batches and policy versions."""

    samples: int
    reward_sum: float
    correct: int
    judged: int  # samples with a correct/incorrect verdict (GenRM-only samples have none)
    length_sum: int

    @classmethod
    def of(cls, groups: Iterable[events.ScoredGroup]) -> GroupTotals:
        samples = [s for g in groups for s in g.samples if not status_of(s).is_infra_failure]
        judged = [s for s in samples if s.HasField("correct")]
        return cls(samples=len(samples), reward_sum=sum(s.reward for s in samples),
                   correct=sum(s.correct for s in judged), judged=len(judged),
                   length_sum=sum(len(s.token_ids) for s in samples))

    def means(self) -> dict[str, float]:
        """Mean reward, accuracy and length (empty when no sample counted)."""
        if not self.samples:
            return {}
        return {
            "reward_mean": self.reward_sum / self.samples,
            "accuracy": self.correct / max(1, self.judged),
            "length_mean": self.length_sum / self.samples,
        }
