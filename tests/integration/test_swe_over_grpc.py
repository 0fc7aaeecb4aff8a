"""SWE rewards through the real svc_sandbox process: RunTests over gRPC, graded by svc_reward."""
from __future__ import annotations

import base64
import json

import pytest

from m1flow.contracts import events, rpc
from ops.launcher import launch
from m1flow.source import swe_verifier_spec
from m1flow.task_store import TaskStore
from svc_reward.result import Status
from svc_reward.config import RewardConfig
from svc_reward.scorers import ScorerRegistry
from svc_sandbox.backends.jail import JailBackend
from svc_sandbox.client import Limits, RunTestsRequest, SandboxClient, snapshot_tar, swe_limits
from svc_sandbox.client import Status as RunStatus
from svc_sandbox.validate import RequestCaps, limits_from_proto
from svc_sandbox.wire import limits_to_proto
from tests.reward.test_swe_verifier import F2P, LIMITS, P2P, diff_after, fixed, repo  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    if JailBackend.missing():
        pytest.skip(f"local jail unavailable here: missing {JailBackend.missing()}")
    proc = launch("sandbox", tmp_path_factory.mktemp("sandbox"), bootstrap="unused:0", args=["--backend", "jail"])
    yield proc
    proc.stop()


def inline_spec(repo_dir) -> events.VerifierSpec:
    """As prompts were written before the task store: the snapshot base64 in spec_json."""
    return events.VerifierSpec(kind="swe", spec_json=json.dumps({
        "repo_tar": base64.b64encode(snapshot_tar(repo_dir)).decode(), "fail_to_pass": F2P,
        "pass_to_pass": P2P, "limits": LIMITS.model_dump()}))


@pytest.mark.parametrize("stored", [True, False], ids=["task-store", "inline"])
def test_fixing_patch_earns_one_and_a_non_applying_patch_zero(sandbox, repo, tmp_path, stored):  # noqa: F811
    registry = ScorerRegistry(RewardConfig(sandbox_address=sandbox.grpc_address, run_dir=tmp_path))  # its task store
    if stored:  # the snapshot crosses Kafka as a URI; the scorer reads and verifies the bytes
        spec = swe_verifier_spec(TaskStore.in_run_dir(tmp_path), snapshot_tar(repo), F2P, P2P, limits=LIMITS.model_dump())
        assert spec.payload_uri.startswith("file://") and "repo_tar" not in spec.spec_json
    else:
        spec = inline_spec(repo)
    patch = diff_after(repo, {"calc.py": fixed()})
    good = registry.score(f"Fixed add.\n```diff\n{patch}```", spec)
    assert (good.reward, good.correct, good.status) == (1.0, True, Status.OK), good.detail
    assert good.detail.startswith("FULL: FAIL_TO_PASS 1/1, PASS_TO_PASS 3/3")
    stale = patch.replace("-    return a - b", "-    return a % b")
    bad = registry.score(f"```diff\n{stale}```", spec)
    assert (bad.reward, bad.correct, bad.status) == (0.0, False, Status.OK), bad.detail
    assert "did not apply" in bad.detail


def test_run_tests_returns_per_test_statuses_for_the_caller_to_grade(sandbox, repo):  # noqa: F811
    """The service reports what each test did; grading (the xfail counting as passing) is the caller's."""
    patch = diff_after(repo, {"calc.py": fixed().replace("a * b", "b * a")})  # fixes add, rewrites mul
    client = SandboxClient(sandbox.grpc_address)
    try:
        result = client.run_tests(RunTestsRequest(repo_tar=snapshot_tar(repo), patch=patch,
                                                  fail_to_pass=F2P, pass_to_pass=P2P, limits=LIMITS))
    finally:
        client.close()
    assert result.status is RunStatus.OK and result.patch_applied and result.apply_method == "git apply"
    assert result.tests == {F2P[0]: "PASSED", P2P[0]: "PASSED", P2P[1]: "PASSED", P2P[2]: "XFAIL"}
    assert "M1FLOW TESTS START" in result.log


def test_limits_cross_the_wire_whole_and_unset_ones_keep_the_swe_defaults():
    assert limits_from_proto(limits_to_proto(LIMITS), Limits(), RequestCaps()) == LIMITS
    partial = limits_from_proto(rpc.Limits(wall_seconds=7.0), swe_limits(), RequestCaps())
    assert partial == swe_limits().model_copy(update={"wall_seconds": 7.0})


def test_sandbox_down_is_a_sandbox_error_not_reward_zero(repo):  # noqa: F811
    registry = ScorerRegistry(RewardConfig(sandbox_address="127.0.0.1:1"))
    result = registry.score("```diff\n--- a/x\n+++ b/x\n```", inline_spec(repo))
    assert result.status is Status.SANDBOX_ERROR and not result.usable
