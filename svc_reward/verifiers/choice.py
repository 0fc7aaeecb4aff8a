"""The `choice` kind: the option the answer names (its letter or its text, m1flow.kinds.choice.choice_of)
is the option an accepted gold names. An answer naming no option, or several (`A B C D`), is wrong."""
from __future__ import annotations

import json

from m1flow.contracts import events
from m1flow.kinds.base import accepted
from m1flow.kinds.choice import CHOICE, choice_of, lettered
from svc_reward.kinds import SCORERS, KindContext, ResponseScorer
from svc_reward.result import ScoreResult, Status
from svc_reward.verifiers.text import read_answer


def score_choice(response: str, spec: events.VerifierSpec) -> ScoreResult:
    data = json.loads(spec.spec_json) if spec.spec_json else {}
    options = lettered(data.get("options") or {})
    if not isinstance(options, dict) or len(options) < 2:
        return ScoreResult.failed(Status.JUDGE_ERROR, "choice spec without options")
    golds = {choice_of(gold, options) for gold in accepted(spec.gold, data)} - {None}
    if not golds:
        return ScoreResult.failed(Status.JUDGE_ERROR, f"gold {spec.gold!r} names none of the options")
    answer = read_answer(response, data, "choice", CHOICE.style_names)
    if isinstance(answer, ScoreResult):
        return answer
    chosen = choice_of(answer, options)
    if chosen is None:
        return ScoreResult.scored(False, detail=f"{answer[:100]!r} names none of the options {', '.join(options)}")
    return ScoreResult.scored(chosen in golds, detail=f"chose {chosen}, gold {'/'.join(sorted(golds))}")


@SCORERS.register("choice")
def choice_kind(ctx: KindContext) -> ResponseScorer:
    return ResponseScorer(score_choice)
