"""The `logic:<puzzle>` kind: the puzzle, as spec_json carries it, checked by its own verifier."""
from __future__ import annotations

import json

from m1flow.contracts import events
from svc_reward.kinds import KINDS, KindContext, ResponseScorer
from svc_reward.result import ScoreResult


def score_puzzle(response: str, spec: events.VerifierSpec) -> ScoreResult:
    from svc_reward.verifiers.logic import verify_puzzle

    return verify_puzzle(json.loads(spec.spec_json), response)


@KINDS.register("logic")
def logic_kind(ctx: KindContext) -> ResponseScorer:
    return ResponseScorer(score_puzzle)
