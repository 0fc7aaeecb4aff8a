"""The `rg:<task>` kind: a reasoning-gym item regenerated from the spec, scored by the library.

spec_json: {"task", "config", "seed", "index", "fingerprint"} (m1flow.tasks.rg.record_fields writes
it; the fingerprint is optional), plus "entry" for the few tasks whose items do not regenerate
identically in another process (m1flow.tasks.rg.CARRY_ENTRY). The reward
is the dataset's own `score_answer`, partial credit kept (0.05 for a well-formed wrong answer in
some tasks, len(gold)/len(answer) by default); `correct` is whether it reached 1.0. A response
without an <answer> tag is a format error; a spec this replica cannot regenerate (an unknown task,
a bad config, reasoning-gym not installed) is a judge error, dropped, never a 0.
"""
from __future__ import annotations

import json

from m1flow.contracts import events
from m1flow.tasks import rg
from svc_reward.kinds import SCORERS, KindContext, ResponseScorer
from svc_reward.result import RewardParts, ScoreResult, Status

MAX_ANSWER_CHARS = 20_000  # far above any real answer; bounds the work a library scorer does


def score_rg(response: str, spec: events.VerifierSpec) -> ScoreResult:
    try:
        data = json.loads(spec.spec_json)
        task = data["task"]
        if spec.kind != f"rg:{task}":
            raise ValueError(f"kind {spec.kind!r} does not match the spec's task {task!r}")
        config, seed = data.get("config", {}), int(data["seed"])
        item = data["entry"] if "entry" in data else rg.entry(task, config, seed, int(data["index"]))
    except (ValueError, KeyError, TypeError, ImportError) as exc:
        return ScoreResult.failed(Status.JUDGE_ERROR, f"cannot regenerate the rg item: {exc}")
    if data.get("fingerprint") not in (None, rg.fingerprint(item)):
        return ScoreResult.failed(Status.JUDGE_ERROR, f"rg:{task} item {data['index']} regenerated differently "
                                  "from the prompt's (hidden randomness or another reasoning-gym version)")
    answer = rg.extract(response)
    if answer is None:
        return ScoreResult.failed(Status.FORMAT_ERROR, "no <answer>...</answer> after the reasoning")
    if len(answer) > MAX_ANSWER_CHARS:
        return ScoreResult.failed(Status.FORMAT_ERROR, f"answer longer than {MAX_ANSWER_CHARS} characters")
    reward = rg.score_answer(task, config, seed, item, answer)
    if not 0.0 <= reward <= 1.0:
        return ScoreResult.failed(Status.JUDGE_ERROR, f"rg:{task} scored {reward}, outside [0, 1]")
    return ScoreResult(reward=reward, correct=reward == 1.0, status=Status.OK,
                       parts=RewardParts(correctness=reward), detail=f"rg:{task} score {reward:g}")


@SCORERS.register("rg")
def rg_kind(ctx: KindContext) -> ResponseScorer:
    return ResponseScorer(score_rg)
