"""The `logic:<family>` kind: a puzzle's constraint check (m1flow.tasks.logic) as a reward.

Why the split: the generators and checks are library code the prompt source needs too; what is a
format error, what is our bug (a judge error, dropped), and the reward itself are decided here.
"""
from __future__ import annotations

import json
from typing import Any

from m1flow.contracts import events
from m1flow.tasks.logic import MAX_ANSWER_CHARS, TASKS, FormatError, Puzzle
from svc_reward.kinds import SCORERS, KindContext, ResponseScorer
from svc_reward.result import ScoreResult, Status
from svc_reward.verifiers.extract import last_tag


def verify_puzzle(puzzle: Puzzle | dict[str, Any], response: str) -> ScoreResult:
    """Score the last <answer> of a response for a puzzle (or its to_dict form, as carried in a spec)."""
    if isinstance(puzzle, dict):
        puzzle = Puzzle.from_dict(puzzle)
    task = TASKS.get(puzzle.task)
    if task is None:
        return ScoreResult.failed(Status.JUDGE_ERROR, f"unknown logic family {puzzle.task!r}")
    answer = last_tag(response)
    if answer is None:
        return ScoreResult.failed(Status.FORMAT_ERROR, "no <answer>...</answer> after the reasoning")
    if len(answer) > MAX_ANSWER_CHARS:
        return ScoreResult.failed(Status.FORMAT_ERROR, f"answer longer than {MAX_ANSWER_CHARS} characters")
    try:
        problem = task.check(puzzle.metadata, answer)
    except FormatError as err:
        return ScoreResult.failed(Status.FORMAT_ERROR, str(err))
    except RecursionError:
        return ScoreResult.failed(Status.FORMAT_ERROR, "answer nested too deeply")
    except Exception as err:  # noqa: BLE001  (our bug: drop the sample, keep the service up)
        return ScoreResult.failed(Status.JUDGE_ERROR, f"{task.name} verifier raised {err!r}")
    return ScoreResult.scored(problem is None, detail=problem or "all constraints hold")


def score_logic(response: str, spec: events.VerifierSpec) -> ScoreResult:
    """The kind's scorer: the spec's spec_json is the puzzle."""
    return verify_puzzle(json.loads(spec.spec_json), response)


@SCORERS.register("logic")
def logic_kind(ctx: KindContext) -> ResponseScorer:
    return ResponseScorer(score_logic)
