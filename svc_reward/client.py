"""What other tools use of svc_reward: scoring in-process through exactly the path a rollout takes.

`LocalScorer` holds one replica's scorers (the verifier kinds of `svc_reward.kinds`, each made on
first use from the RewardConfig), so an operator tool that checks gold answers or a dataset's
verifier specs gets the verdict the reward service would write, without a broker and without
reaching into the service's modules.

    with LocalScorer(RewardConfig()) as scorer:
        [result] = scorer.score_group("", ["... \\\\boxed{42}"], VerifierSpec(kind="math", gold="42"))
        result.reward, result.correct, result.status
"""
from __future__ import annotations

from collections.abc import Sequence

from m1flow.contracts import events
from svc_reward.config import RewardConfig
from svc_reward.kinds import SCORERS
from svc_reward.result import RewardParts, ScoreResult, Status
from svc_reward.scorers import ScorerRegistry

__all__ = ["LocalScorer", "RewardConfig", "RewardParts", "ScoreResult", "Status", "known_kinds"]


def known_kinds() -> tuple[str, ...]:
    """The verifier kinds (the part of `VerifierSpec.kind` before ':') a reward replica can score."""
    return SCORERS.names()


class LocalScorer:
    """One reward replica's scoring, in this process; `close()` stops the workers it started."""

    def __init__(self, config: RewardConfig | None = None) -> None:
        self._registry = ScorerRegistry(config or RewardConfig())

    def prepare(self, kind: str) -> None:
        """Make the scorer of `kind` (a VerifierSpec kind, `logic:sudoku` or `logic`) now; a ValueError
        says why this process cannot score it (an unknown kind, naming the known ones; a kind that
        needs a sandbox address or a judge it was not given). A tool checks its inputs with it at
        start-up instead of scoring every sample JUDGE_ERROR later."""
        self._registry.scorer(kind.split(":", 1)[0])

    def score(self, response: str, spec: events.VerifierSpec) -> ScoreResult:
        return self._registry.score(response, spec)

    def score_group(self, prompt: str, responses: Sequence[str], spec: events.VerifierSpec) -> list[ScoreResult]:
        """One result per response, in order, as svc_reward scores a group of rollouts."""
        return self._registry.score_group(prompt, responses, spec)

    def close(self) -> None:
        self._registry.close()

    def __enter__(self) -> LocalScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
