"""SWE rewards by the SWE-bench rule, from per-test statuses and never from an exit code.

A FAIL_TO_PASS test counts only when it PASSED (or XFAIL): skipped, failed, errored or missing is
a failure, so a patch cannot win by skipping the test it should fix. PASS_TO_PASS tests must stay
passing under the same rule. Reward 1 only for FULL. A patch that does not apply is the model's
failure (reward 0, status ok); a sandbox failure is ours (SANDBOX_ERROR, dropped by the learner),
and so is a snapshot or spec the sandbox refuses (JUDGE_ERROR: the task is broken, not the patch).
A test run that hits the time or memory limit scores what the log shows (the missing tests fail).

Before the sandbox, the patch is screened: one whose path leaves the repository (absolute, `..`),
or that deletes or edits a test file (the spec's test_files, or a path that looks like a test), scores
0 at once; FAIL_TO_PASS is always the task's, never what the tree holds. Every verdict says why in
`ScoreResult.reason` (REASONS), which the monitor counts per source. Partial reward (the share of
FAIL_TO_PASS fixed, with no PASS_TO_PASS regressed) is a config choice, off by default.
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
# Why a patch scored what it did, most basic first (ScoreResult.reason)
REASONS = ("resolved", "no_diff", "escapes_repo", "deletes_tests", "edits_tests", "did_not_apply",
           "does_not_compile", "does_not_import", "runtime_error", "fail_to_pass_failing", "pass_to_pass_regression",
           "sandbox_error", "task_refused")
_PATCH_PATHS = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|--- (\S+)|\+\+\+ (\S+)|rename (?:from|to) (\S+))",
                          re.MULTILINE)
_TESTLIKE = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_tests?\.py$|(^|/)conftest\.py$")
_SYMLINK = re.compile(r"^(?:new file mode|new mode) 120000", re.MULTILINE)
_SUMMARY_ERROR = re.compile(r"^(?:FAILED|ERROR) (\S+) - (\w+(?:\.\w+)*):", re.MULTILINE)  # -rA: id - Exc: why
_DIFF_FENCE = re.compile(r"```[ \t]*(?:diff|patch)[^\n]*\n(.*?)```", re.DOTALL)
_RAW_DIFF = re.compile(r"^(?:diff --git |--- a/|--- )", re.MULTILINE)


class SweTask(BaseModel):
    repo_tar: bytes = Field(description="repository snapshot (svc_sandbox.client.snapshot_tar)")
    fail_to_pass: list[str]
    pass_to_pass: list[str] = Field(default_factory=list)
    test_command: str = DEFAULT_TEST_COMMAND
    limits: Limits | None = None
    test_files: list[str] = Field(default_factory=list, description="files a patch must not edit or delete")
    environment: str = Field("", description="the repository's environment the tests run in (m1flow.data.swe_env "
                                              "key, built on the sandbox's host); empty: the sandbox's interpreter")


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

    @property
    def partial(self) -> float:
        """The share of FAIL_TO_PASS fixed when nothing regressed (PARTIAL), else 0."""
        if self.resolution != "PARTIAL":
            return 0.0
        return len(self.f2p_passed) / (len(self.f2p_passed) + len(self.f2p_failed))

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


def patch_paths(patch: str) -> list[tuple[str, str]]:
    """(path, what the patch does to it: "deleted" or "changed") for every path a diff names; the
    a/ and b/ prefixes dropped, /dev/null left out."""
    found: dict[str, str] = {}
    current: list[str] = []  # the paths of the file diff being read
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            current = []
        elif line.startswith("deleted file mode"):
            found.update((path, "deleted") for path in current)
        match = _PATCH_PATHS.match(line)
        for path in filter(None, match.groups() if match else ()):
            if path != "/dev/null":
                path = path[2:] if path[:2] in ("a/", "b/") and not line.startswith("rename") else path
                found.setdefault(path, "changed")
                current.append(path)
    return list(found.items())


def screen_patch(patch: str, test_files: Sequence[str]) -> tuple[str, str] | None:
    """(reason, detail) when the patch must score 0 unrun: it leaves the repository (a path outside
    it, a symbolic link), or it deletes or edits a test file (`test_files`, or a path that looks like a test); None when it may run."""
    tests = set(test_files)
    if _SYMLINK.search(patch):
        return "escapes_repo", "the patch makes a symbolic link (which may point outside the repository)"
    for path, change in patch_paths(patch):
        parts = path.split("/")
        if path.startswith(("/", "~")) or ".." in parts or "\\" in path:
            return "escapes_repo", f"the patch names {path!r}, outside the repository"
        if path in tests or _TESTLIKE.search(path):
            verb = "deletes" if change == "deleted" else "edits"
            return f"{verb}_tests", f"the patch {verb} the test file {path} (the task's tests decide, not the patch's)"
    return None


def failure_reason(verdict: SweGrade, log: str) -> str:
    """Why a run that applied did not resolve: the code does not compile or import (a collection
    error), a test raised something other than an assertion, a PASS_TO_PASS test regressed, or a
    FAIL_TO_PASS test still fails."""
    if re.search(r"^E\s+(SyntaxError|IndentationError|TabError)\b", log, re.MULTILINE):
        return "does_not_compile"
    if re.search(r"ERROR collecting|^E\s+(ImportError|ModuleNotFoundError)\b", log, re.MULTILINE):
        return "does_not_import"
    if verdict.p2p_failed:
        return "pass_to_pass_regression"
    failing = set(verdict.f2p_failed)
    raised = [exc for test, exc in _SUMMARY_ERROR.findall(log) if test in failing and exc]
    if any(exc.rsplit(".", 1)[-1] not in ("AssertionError", "Failed") for exc in raised):
        return "runtime_error"
    return "fail_to_pass_failing"


class SweVerifier:
    """`runner` runs a RunTestsRequest: `SandboxClient.run_tests`, or a local `Sandbox.run_tests`.
    partial: reward a PARTIAL resolution with its share of FAIL_TO_PASS fixed (off: 0)."""

    def __init__(self, runner: TestsRunner, partial: bool = False):
        self.runner = runner
        self.partial = partial

    def verify(self, response: str, task: SweTask) -> ScoreResult:
        patch = extract_patch(response)
        if patch is None:
            return ScoreResult.failed(Status.FORMAT_ERROR, "no diff in the answer", reason="no_diff")
        return self.score_patch(patch, task)

    def score_patch(self, patch: str, task: SweTask) -> ScoreResult:
        refused = screen_patch(patch, task.test_files)
        if refused is not None:
            return ScoreResult.scored(False, detail=refused[1], reason=refused[0])
        try:
            result = self.runner(RunTestsRequest(repo_tar=task.repo_tar, patch=patch, fail_to_pass=task.fail_to_pass,
                                                 pass_to_pass=task.pass_to_pass, test_command=task.test_command,
                                                 limits=task.limits, environment=task.environment))
        except InvalidRequest as err:
            return ScoreResult.failed(Status.JUDGE_ERROR, f"the sandbox refused the task: {err}", reason="task_refused")
        if result.status.is_infra_failure:
            return ScoreResult.failed(Status.SANDBOX_ERROR, result.detail, reason="sandbox_error")
        if not result.patch_applied:
            return ScoreResult.scored(False, detail=result.detail or "patch did not apply", reason="did_not_apply")
        verdict = grade(result.tests, task.fail_to_pass, task.pass_to_pass)
        detail = f"{verdict.summary()}; applied by {result.apply_method}"
        detail += f"; {result.detail}" if result.detail else ""
        resolved = verdict.resolution == "FULL"
        reason = "resolved" if resolved else failure_reason(verdict, result.log)
        return ScoreResult.scored(resolved, detail=detail[:500], reason=reason,
                                  reward=verdict.partial if self.partial else 0.0)


class SweKind:
    """The `swe` kind: the answer's patch applied and tested by svc_sandbox's RunTests, graded here.

    The repository snapshot (m1flow.task_store.snapshot_tar) is the spec's payload_uri in the task
    store (m1flow.source.swe_verifier_spec writes it), or, in prompts written before the store,
    base64 in spec_json's "repo_tar". spec_json: {"fail_to_pass": [...], "pass_to_pass": [...],
    "test_command": "...", "limits": {...}, "environment": "<key>"}; all but fail_to_pass optional.
    """

    def __init__(self, runner: TestsRunner, store: TaskStore, partial: bool = False) -> None:
        self.verifier = SweVerifier(runner, partial)
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
    return SweKind(ctx.sandbox().run_tests, ctx.config.task_store.store(ctx.config.run_dir),
                   partial=ctx.config.swe.partial_reward)
