"""The prompt source: generated tasks published on `prompts`."""
from __future__ import annotations

import json
from collections.abc import Sequence

from m1flow.bus import Producer, codec
from m1flow.bus.topics import PROMPTS
from m1flow.contracts import events
from m1flow.tasks.arith import ArithProblem
from m1flow.task_store import TaskStore


def arith_prompt(problem: ArithProblem, group_size: int, run_id: str = "local") -> events.Prompt:
    return events.Prompt(header=codec.header("source", run_id=run_id), prompt_id=problem.prompt_id,
                         task_type="arith", text=problem.text, group_size=group_size,
                         verifier=events.VerifierSpec(kind="arith", gold=problem.answer))


def publish(producer: Producer, problems: list[ArithProblem], group_size: int, run_id: str = "local") -> list[str]:
    """Publish and wait for the broker's acknowledgement; return the prompt ids."""
    for problem in problems:
        producer.send(PROMPTS, problem.prompt_id, arith_prompt(problem, group_size, run_id))
    producer.flush()
    return [p.prompt_id for p in problems]


def swe_verifier_spec(store: TaskStore, repo_tar: bytes, fail_to_pass: Sequence[str],
                      pass_to_pass: Sequence[str] = (), **options: object) -> events.VerifierSpec:
    """An SWE task's spec: the repository snapshot goes to the task store once, the spec names it.

    options: test_command, limits (see svc_reward.verifiers.swe.SweTask).
    """
    spec = {"fail_to_pass": list(fail_to_pass), "pass_to_pass": list(pass_to_pass), **options}
    return events.VerifierSpec(kind="swe", spec_json=json.dumps(spec), payload_uri=store.put(repo_tar))
