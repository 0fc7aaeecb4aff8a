"""The `text` kind: the answer, read in the spec's style, equals one accepted answer as normalised text
(m1flow.kinds.answers.normalise_text). Nothing is parsed as mathematics, so reordered words or
letters, or swapped numbers, are different answers."""
from __future__ import annotations

import json

from m1flow.contracts import events
from m1flow.kinds.answers import normalise_text
from m1flow.kinds.base import accepted
from m1flow.kinds.text import TEXT
from svc_reward.kinds import SCORERS, KindContext, ResponseScorer
from svc_reward.result import ScoreResult, Status
from svc_reward.verifiers.extract import FINAL_EXTRACTORS


def read_answer(response: str, spec: dict, kind_name: str, styles: tuple[str, ...]) -> str | ScoreResult:
    """The answer a response gives in the spec's style (text and choice kinds), or the failed result
    that says why there is none (an unknown style is our judge error, no answer a format error)."""
    style = spec.get("style", "auto")
    if style not in styles:
        return ScoreResult.failed(Status.JUDGE_ERROR, f"unknown {kind_name} answer style {style!r}; "
                                                      f"known: {', '.join(styles)}")
    answer = FINAL_EXTRACTORS[style](response)
    if answer is None:
        reads = next(s.reads for s in TEXT.styles if s.name == style)
        return ScoreResult.failed(Status.FORMAT_ERROR, f"no {reads} after the reasoning")
    return answer


def text_matches(answer: str, golds: list[str], case_sensitive: bool = False) -> ScoreResult:
    """Correct when the answer equals one of the golds as normalised text."""
    got = normalise_text(answer, case_sensitive)
    for gold in golds:
        if got == normalise_text(gold, case_sensitive):
            return ScoreResult.scored(True, detail=f"{got!r} == {normalise_text(gold, case_sensitive)!r}")
    return ScoreResult.scored(False, detail=f"{got[:200]!r} is none of {len(golds)} accepted answer(s)")


def score_text(response: str, spec: events.VerifierSpec) -> ScoreResult:
    data = json.loads(spec.spec_json) if spec.spec_json else {}
    answer = read_answer(response, data, "text", TEXT.style_names)
    if isinstance(answer, ScoreResult):
        return answer
    return text_matches(answer, accepted(spec.gold, data), bool(data.get("case_sensitive")))


@SCORERS.register("text")
def text_kind(ctx: KindContext) -> ResponseScorer:
    return ResponseScorer(score_text)
