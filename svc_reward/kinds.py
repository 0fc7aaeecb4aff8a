"""The scorers of the verifier kinds: a kind's name (`m1flow.kinds.kind_of`) -> the factory of its scorer.

The library declares each kind once (m1flow/kinds/); its scorer registers itself under the same
name in `svc_reward/verifiers/<kind>.py` (`@SCORERS.register("math")`). That module is imported
only when a task of its kind first arrives, so a reward replica pays for SymPy, a sandbox channel
or a judge model only when it needs them. A factory runs once per replica, with the replica's
`KindContext`, and returns the kind's scorer.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from m1flow.contracts import events
from m1flow.kinds import KINDS
from m1flow.registry import Registry
from svc_reward.result import ScoreResult

if TYPE_CHECKING:
    from svc_reward.config import RewardConfig
    from svc_sandbox.client import SandboxClient


@runtime_checkable
class KindScorer(Protocol):
    """What a factory returns. It may also define `score_group(prompt, responses, spec)` (a kind
    that judges a group as a whole, GenRM) and `close()` (workers or channels to stop)."""

    def score(self, response: str, spec: events.VerifierSpec) -> ScoreResult: ...


class KindContext:
    """What a kind's factory may use: the replica's settings and the clients it shares with others."""

    def __init__(self, config: RewardConfig) -> None:
        self.config = config
        self._sandbox: SandboxClient | None = None
        self._lock = threading.Lock()

    def sandbox(self) -> SandboxClient:
        """The replica's one svc_sandbox client, connected on first use."""
        with self._lock:
            if self._sandbox is None:
                if not self.config.sandbox_address:
                    raise ValueError("this kind runs in svc_sandbox and sandbox_address is not set")
                from svc_sandbox.client import SandboxClient

                self._sandbox = SandboxClient(self.config.sandbox_address)
            return self._sandbox

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()


KindFactory = Callable[[KindContext], KindScorer]
SCORERS: Registry[KindFactory] = Registry("verifier kind")


class ResponseScorer:
    """A kind that scores each response alone with a plain function (arith, logic)."""

    def __init__(self, fn: Callable[[str, events.VerifierSpec], ScoreResult]) -> None:
        self.fn = fn

    def score(self, response: str, spec: events.VerifierSpec) -> ScoreResult:
        return self.fn(response, spec)


def scorer_module(kind: str) -> str:
    """Where a kind's scorer is written: docs/architecture.md, "Adding a verifier"."""
    return f"svc_reward.verifiers.{kind}"


for _kind in KINDS.names():
    SCORERS.lazy(_kind, scorer_module(_kind))
