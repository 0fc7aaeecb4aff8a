"""The verifier kinds: `VerifierSpec.kind` (the part before ":") -> the factory of its scorer.

Each kind registers itself in the module that implements it (`@KINDS.register("math")`); the
table at the bottom says which module that is, so a reward replica imports a verifier (and pays
for SymPy, a sandbox channel or a judge model) only when a task of its kind first arrives. A
factory runs once per replica, with the replica's `KindContext`, and returns the kind's scorer.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from m1flow.contracts import events
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
KINDS: Registry[KindFactory] = Registry("verifier kind")


class ResponseScorer:
    """A kind that scores each response alone with a plain function (arith, logic)."""

    def __init__(self, fn: Callable[[str, events.VerifierSpec], ScoreResult]) -> None:
        self.fn = fn

    def score(self, response: str, spec: events.VerifierSpec) -> ScoreResult:
        return self.fn(response, spec)


def kind_of(spec: events.VerifierSpec) -> str:
    """The registry name of a spec's kind: `logic:sudoku` -> `logic`, `rg:<task>` -> `rg`."""
    return spec.kind.split(":", 1)[0]


# Where each kind is implemented: one line per kind (docs/architecture.md, "Adding a verifier").
for _kind, _module in {
    "arith": "svc_reward.verifiers.arith",
    "math": "svc_reward.verifiers.math",
    "logic": "svc_reward.verifiers.logic",
    "rg": "svc_reward.verifiers.rg",
    "code": "svc_reward.verifiers.code",
    "swe": "svc_reward.verifiers.swe",
    "genrm": "svc_reward.genrm.kind",
}.items():
    KINDS.lazy(_kind, _module)
