"""One reward replica's scorers: the verifier kinds of `svc_reward.kinds`, made on first use.

Most kinds score one response at a time; GenRM ranks a whole group (a Swiss tournament picks the
reference, then every rollout is judged against it), so its scorer has `score_group`;
`ScorerRegistry.score_group` routes a group either way and the caller shapes and normalises the
results the same for every kind. A kind's factory runs on the first task of that kind: a replica
that only sees arithmetic never starts a math worker pool, and one without a sandbox address
still scores everything that needs none.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from m1flow.contracts import events
from svc_reward.config import RewardConfig
from m1flow.kinds import kind_of
from svc_reward.kinds import SCORERS, KindContext, KindScorer, ResponseScorer
from svc_reward.result import ScoreResult, Status

log = logging.getLogger(__name__)


class ScorerRegistry:
    """The scorer of every kind this replica has seen, each made once by its registered factory."""

    def __init__(self, config: RewardConfig | None = None) -> None:
        self.config = config or RewardConfig()
        self.context = KindContext(self.config)
        self._scorers: dict[str, KindScorer] = {}
        self._failed: dict[str, str] = {}  # kind -> why its factory failed (the config will not change)
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: RewardConfig) -> ScorerRegistry:
        return cls(cfg)

    def register(self, kind: str, scorer: KindScorer | Callable[[str, events.VerifierSpec], ScoreResult]) -> None:
        """Use this scorer for `kind` in this replica instead of the registered factory's (tests)."""
        with self._lock:
            self._scorers[kind] = scorer if isinstance(scorer, KindScorer) else ResponseScorer(scorer)

    def loaded(self, kind: str) -> KindScorer | None:
        """The kind's scorer if this replica has made it, else None (nothing is started)."""
        return self._scorers.get(kind)

    def scorer(self, kind: str) -> KindScorer:
        """The kind's scorer, made on first use; ValueError names the known kinds or why it failed."""
        with self._lock:
            if kind in self._scorers:
                return self._scorers[kind]
            if kind in self._failed:
                raise ValueError(self._failed[kind])
            factory = SCORERS.get(kind)  # ValueError: unknown verifier kind 'x'; known: ...
            try:
                scorer = self._scorers[kind] = factory(self.context)
            except Exception as exc:  # noqa: BLE001 - a kind this replica cannot score, said per sample
                self._failed[kind] = f"verifier kind {kind!r} is not available here: {exc}"
                log.warning("%s", self._failed[kind])
                raise ValueError(self._failed[kind]) from exc
            return scorer

    def close(self) -> None:
        """Stop the worker processes and channels the kinds started."""
        for scorer in list(self._scorers.values()):
            close = getattr(scorer, "close", None)
            if close is not None:
                close()
        self.context.close()

    def score(self, response: str, spec: events.VerifierSpec) -> ScoreResult:
        """Score one response; an unknown kind or a crashing verifier is a marked failure, not a 0."""
        kind = kind_of(spec.kind)
        try:
            scorer = self.scorer(kind)
        except ValueError as exc:
            return ScoreResult.failed(Status.JUDGE_ERROR, f"kind {spec.kind!r}: {exc}")
        try:
            return scorer.score(response, spec)
        except Exception as exc:  # noqa: BLE001 - infrastructure trouble must not become reward 0
            return ScoreResult.failed(Status.JUDGE_ERROR, f"verifier {kind} failed: {exc!r}")

    def score_group(self, prompt: str, responses: Sequence[str], spec: events.VerifierSpec) -> list[ScoreResult]:
        """One result per response, in order: by the kind's group scorer, else one by one."""
        try:
            scorer = self.scorer(kind_of(spec.kind))
        except ValueError as exc:
            return [ScoreResult.failed(Status.JUDGE_ERROR, f"kind {spec.kind!r}: {exc}") for _ in responses]
        group = getattr(scorer, "score_group", None)
        if group is None:
            return [self.score(r, spec) for r in responses]
        try:
            return group(prompt, responses, spec)
        except Exception as exc:  # noqa: BLE001 - same rule as `score`
            log.warning("group scorer %s failed: %r", spec.kind, exc)
            return [ScoreResult.failed(Status.JUDGE_ERROR, f"verifier {spec.kind} failed: {exc!r}")
                    for _ in responses]
