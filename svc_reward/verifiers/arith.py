"""The verifier of the generated arithmetic task: exactly one integer, equal to the gold one."""
from __future__ import annotations

from m1flow.tasks.arith import parse_answer
from svc_reward.kinds import SCORERS, KindContext, ResponseScorer
from svc_reward.result import ScoreResult, Status


def verify_arith(response: str, gold: str) -> ScoreResult:
    value = parse_answer(response)
    if value is None:
        return ScoreResult.failed(Status.FORMAT_ERROR, f"not a single integer: {response[:40]!r}")
    return ScoreResult.scored(value == int(gold), detail=f"got {value}, want {gold}")


@SCORERS.register("arith")
def arith_kind(ctx: KindContext) -> ResponseScorer:
    return ResponseScorer(lambda response, spec: verify_arith(response, spec.gold))
