"""Which verifier scores a sample, chosen by the prompt's verifier kind.

Verifiers are imported lazily: a reward replica that only sees arithmetic never starts a math
worker pool, and one without a sandbox address still scores everything that needs none.
"""
from __future__ import annotations

import json
from collections.abc import Callable

from m1flow.contracts import events
from svc_reward.result import ScoreResult, Status

Scorer = Callable[[str, events.VerifierSpec], ScoreResult]


def _arith(response: str, spec: events.VerifierSpec) -> ScoreResult:
    from svc_reward.verifiers.arith import verify_arith

    return verify_arith(response, spec.gold)


def _math(response: str, spec: events.VerifierSpec) -> ScoreResult:
    from svc_reward.verifiers.math import verify_math

    return verify_math(response, spec.gold)


def _logic(response: str, spec: events.VerifierSpec) -> ScoreResult:
    from svc_reward.verifiers.logic import verify_puzzle

    return verify_puzzle(json.loads(spec.spec_json), response)


def code_scorer(sandbox_address: str) -> Scorer:
    """stdin/stdout tests run in svc_sandbox over gRPC; spec_json: {"tests": [...], "language": ...}."""
    from svc_reward.verifiers.code import CodeVerifier, TestCase
    from svc_sandbox.client import SandboxClient

    verifier = CodeVerifier(SandboxClient(sandbox_address))

    def score(response: str, spec: events.VerifierSpec) -> ScoreResult:
        data = json.loads(spec.spec_json)
        tests = [TestCase.model_validate(t) for t in data["tests"]]
        return verifier.verify(response, tests, data.get("language", "python"))

    return score


class ScorerRegistry:
    def __init__(self, sandbox_address: str = "") -> None:
        self.sandbox_address = sandbox_address
        self._scorers: dict[str, Scorer] = {"arith": _arith, "math": _math, "logic": _logic}
        if sandbox_address:
            self._scorers["code"] = code_scorer(sandbox_address)

    def register(self, kind: str, scorer: Scorer) -> None:
        self._scorers[kind] = scorer

    def score(self, response: str, spec: events.VerifierSpec) -> ScoreResult:
        """Score one response; an unknown kind or a crashing verifier is a marked failure, not a 0."""
        kind = spec.kind.split(":", 1)[0]
        scorer = self._scorers.get(kind)
        if scorer is None:
            return ScoreResult.failed(Status.JUDGE_ERROR, f"no verifier for kind {spec.kind!r}")
        try:
            return scorer(response, spec)
        except Exception as exc:  # noqa: BLE001 - infrastructure trouble must not become reward 0
            return ScoreResult.failed(Status.JUDGE_ERROR, f"verifier {kind} failed: {exc!r}")
