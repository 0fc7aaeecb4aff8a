"""SWE rewards by the SWE-bench rule, from per-test statuses and never from an exit code.

A FAIL_TO_PASS test counts only when it PASSED (or XFAIL): skipped, failed, errored or missing is
a failure, so a patch cannot win by skipping the test it should fix. PASS_TO_PASS tests must stay
passing under the same rule. Reward 1 only for FULL. A patch that does not apply is the model's
failure (reward 0, status ok); a sandbox failure is ours (SANDBOX_ERROR, dropped by the learner),
and so is a snapshot or spec the sandbox refuses (JUDGE_ERROR: the task is broken, not the patch).
A test run that hits the time or memory limit scores what the log shows (the missing tests fail).
"""
from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from m1flow.chat import after_reasoning
from m1flow.contracts import events
from m1flow.task_store import TaskStore, TaskStoreError
from svc_reward.kinds import SCORERS, KindContext
from svc_reward.result import ScoreResult, Status
from svc_sandbox.client import DEFAULT_TEST_COMMAND, InvalidRequest, Limits, RunTestsRequest, TestsRunner

PASSING = frozenset({"PASSED", "XFAIL"})
_DIFF_FENCE = re.compile(r"```[ \t]*(?:diff|patch)[^\n]*\n(.*?)```", re.DOTALL)
_RAW_DIFF = re.compile(r"^(?:diff --git |--- a/|--- )", re.MULTILINE)


class SweTask(BaseModel):
    repo_tar: bytes = Field(description="repository snapshot (svc_sandbox.client.snapshot_tar)")
    fail_to_pass: list[str]
    pass_to_pass: list[str] = Field(default_factory=list)
    test_command: str = DEFAULT_TEST_COMMAND
    limits: Limits | None = None


@dataclass(frozen=True)
class SweGrade:
    resolution: str  # FULL, PARTIAL or NO
    f2p_passed: tuple[str, ...]
    f2p_failed: tuple[str, ...]
    p2p_passed: tuple[str, ...]
    p2p_failed: tuple[str, ...]

    @property
    def reward(self) -> float:
        return 1.0 if self.resolution == "FULL" else 0.0

    def summary(self) -> str:
        text = (f"{self.resolution}: FAIL_TO_PASS {len(self.f2p_passed)}/{len(self.f2p_passed) + len(self.f2p_failed)}, "
                f"PASS_TO_PASS {len(self.p2p_passed)}/{len(self.p2p_passed) + len(self.p2p_failed)}")
        broken = list(self.f2p_failed[:3]) + list(self.p2p_failed[:3])
        return text + (f"; failing: {', '.join(broken)}" if broken else "")


def grade(tests: Mapping[str, str], fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]) -> SweGrade:
    """SWE-bench resolution from per-test statuses; a test missing from the log has failed."""
    def split(ids: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return (tuple(t for t in ids if tests.get(t) in PASSING),
                tuple(t for t in ids if tests.get(t) not in PASSING))
    f2p_ok, f2p_bad = split(fail_to_pass)
    p2p_ok, p2p_bad = split(pass_to_pass)
    if not f2p_bad and not p2p_bad:
        resolution = "FULL"
    elif f2p_ok and not p2p_bad:
        resolution = "PARTIAL"
    else:
        resolution = "NO"
    return SweGrade(resolution, f2p_ok, f2p_bad, p2p_ok, p2p_bad)


def extract_patch(response: str) -> str | None:
    """The last ```diff block after the reasoning, else a bare unified diff; always ends in a newline."""
    text = after_reasoning(response)
    blocks = _DIFF_FENCE.findall(text)
    patch = blocks[-1] if blocks else None
    if patch is None and (found := _RAW_DIFF.search(text)):
        patch = text[found.start():]
    if not patch or not patch.strip():
        return None
    return patch if patch.endswith("\n") else patch + "\n"


class SweVerifier:
    """`runner` runs a RunTestsRequest: `SandboxClient.run_tests`, or a local `Sandbox.run_tests`."""

    def __init__(self, runner: TestsRunner):
        self.runner = runner

    def verify(self, response: str, task: SweTask) -> ScoreResult:
        patch = extract_patch(response)
        if patch is None:
            return ScoreResult.failed(Status.FORMAT_ERROR, "no diff in the answer")
        return self.score_patch(patch, task)

    def score_patch(self, patch: str, task: SweTask) -> ScoreResult:
        try:
            result = self.runner(RunTestsRequest(repo_tar=task.repo_tar, patch=patch, fail_to_pass=task.fail_to_pass,
                                                 pass_to_pass=task.pass_to_pass, test_command=task.test_command,
                                                 limits=task.limits))
        except InvalidRequest as err:
            return ScoreResult.failed(Status.JUDGE_ERROR, f"the sandbox refused the task: {err}")
        if result.status.is_infra_failure:
            return ScoreResult.failed(Status.SANDBOX_ERROR, result.detail)
        if not result.patch_applied:
            return ScoreResult.scored(False, detail=result.detail or "patch did not apply")
        verdict = grade(result.tests, task.fail_to_pass, task.pass_to_pass)
        detail = f"{verdict.summary()}; applied by {result.apply_method}"
        detail += f"; {result.detail}" if result.detail else ""
        return ScoreResult.scored(verdict.resolution == "FULL", detail=detail[:500])


class SweKind:
    """The `swe` kind: the answer's patch applied and tested by svc_sandbox's RunTests, graded here.

    The repository snapshot (svc_sandbox.swe.snapshot_tar) is the spec's payload_uri in the task
    store (m1flow.source.swe_verifier_spec writes it), or, in prompts written before the store,
    base64 in spec_json's "repo_tar". spec_json: {"fail_to_pass": [...], "pass_to_pass": [...],
    "test_command": "...", "limits": {...}}; all but fail_to_pass optional.
    """

    def __init__(self, runner: TestsRunner, store: TaskStore) -> None:
        self.verifier = SweVerifier(runner)
        self.store = store

    def score(self, response: str, spec: events.VerifierSpec) -> ScoreResult:
        data = json.loads(spec.spec_json)
        try:  # only a regular file of the task store, capped, its SHA-256 checked as it is read
            repo_tar = self.store.read(spec.payload_uri) if spec.payload_uri else base64.b64decode(data["repo_tar"])
        except TaskStoreError as refused:  # the task is broken (or hostile), not the patch
            return ScoreResult.failed(Status.JUDGE_ERROR, f"refused: {refused}")
        return self.verifier.verify(response, SweTask.model_validate({**data, "repo_tar": repo_tar}))


@SCORERS.register("swe")
def swe_kind(ctx: KindContext) -> SweKind:
    return SweKind(ctx.sandbox().run_tests, ctx.config.task_store.store(ctx.config.run_dir))
