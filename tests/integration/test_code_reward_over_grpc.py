"""svc_reward's code verifier calling the real svc_sandbox process over gRPC."""
from __future__ import annotations

import json

import pytest

from m1flow.contracts import events
from m1flow.ops.launcher import launch
from svc_reward.scorers import ScorerRegistry

SPEC = events.VerifierSpec(kind="code", spec_json=json.dumps({"language": "python", "tests": [
    {"stdin": "2 3\n", "expected_stdout": "5\n"}, {"stdin": "10 -4\n", "expected_stdout": "6\n"}]}))


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    proc = launch("sandbox", tmp_path_factory.mktemp("sandbox"), bootstrap="unused:0")
    yield proc
    proc.stop()


def test_code_reward_runs_tests_in_the_sandbox_service(sandbox):
    registry = ScorerRegistry(sandbox.grpc_address)
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    bad = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
    assert registry.score(good, SPEC).correct is True
    wrong = registry.score(bad, SPEC)
    assert wrong.correct is False and wrong.usable


def test_sandbox_down_is_a_marked_failure_not_reward_zero(sandbox, tmp_path):
    registry = ScorerRegistry("127.0.0.1:1")
    result = registry.score("```python\nprint(5)\n```", SPEC)
    assert not result.usable
