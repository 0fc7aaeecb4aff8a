"""SWE tasks in the sandbox: apply a model's patch to a repository snapshot and run its tests.

Two halves in one file. The bottom half (`main`) is the runner: this very file is copied into the
sandbox as the program and run there, so it uses the standard library only. It unpacks the
snapshot, applies the patch through the SWE-bench fallback chain (resetting the tree between
tries), and runs the test command between printed markers. The top half (`run_tests`) builds that
sandbox run and reads its log back into per-test statuses. Grading lives with the rewards
(svc_reward/verifiers/swe.py): nothing here looks at an exit code to decide success.
Host-only imports stay inside functions because the runner half must start without them.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from svc_sandbox.api import Executor, RunTestsRequest, RunTestsResult

TESTS_START = ">>>>> M1FLOW TESTS START"
TESTS_END = ">>>>> M1FLOW TESTS END"
APPLIED = ">>>>> M1FLOW PATCH APPLIED BY: "
NOT_APPLIED = ">>>>> M1FLOW PATCH DID NOT APPLY"
TEST_TIMEOUT = ">>>>> M1FLOW TEST COMMAND TIMED OUT"
MISSING_TOOL = ">>>>> M1FLOW MISSING IN THE SANDBOX: "
APPLY_CHAIN: list[tuple[str, list[str]]] = [
    ("git apply", ["git", "apply", "--verbose"]),
    ("git apply --3way", ["git", "apply", "--verbose", "--3way"]),
    ("git apply --reject", ["git", "apply", "--verbose", "--reject"]),
    ("patch --fuzz", ["patch", "--batch", "--forward", "--fuzz=5", "-p1", "-i"]),
]
STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
_SEVERITY = {"PASSED": 0, "XFAIL": 0, "SKIPPED": 1, "XPASS": 2, "FAILED": 3, "ERROR": 3}
_SUMMARY_LINE = re.compile(rf"^({'|'.join(STATUSES)}) (.+?)(?: - .*)?$")
_VERBOSE_LINE = re.compile(rf"^(\S.*?::.*?) ({'|'.join(STATUSES)})(?:\s|$)")
# pytest 9 reports a unittest subTest (or `subtests` fixture) failure on lines of its own, the test's own
# line saying PASSED: "SUBFAILED(roots=(2, 3)) tests/t.py::T::test_a" and "tests/t.py::T::test_a
# SUBFAILED(roots=(2, 3)) [100%]". A failed subtest fails its test, as unittest itself counts it.
_SUBFAILED_SUMMARY = re.compile(r"^SUBFAILED(?:\(.*?\))? (\S.*?::.+?)(?: - .*)?$")
_SUBFAILED_VERBOSE = re.compile(r"^(\S.*?::.*?) SUBFAILED(?:\(|\s|$)")
_GIT_ID = ["-c", "user.name=m1flow", "-c", "user.email=m1flow@localhost", "-c", "core.autocrlf=false"]


# ---------------------------------------------------------------- host side

def parse_pytest_log(log: str) -> dict[str, str]:
    """Per-test status from `pytest -rA` summary lines and `-v` progress lines (a failed subtest fails its
    test); the worst one wins."""
    tests: dict[str, str] = {}
    for line in log.splitlines():
        line = line.rstrip()
        if sub := _SUBFAILED_VERBOSE.match(line) or _SUBFAILED_SUMMARY.match(line):
            if tests.get(sub.group(1)) != "ERROR":
                tests[sub.group(1)] = "FAILED"
            continue
        found = _VERBOSE_LINE.match(line)
        test_id, status = (found.group(1), found.group(2)) if found else (None, None)
        if not found and (found := _SUMMARY_LINE.match(line)):
            status, test_id = found.group(1), found.group(2)
            if test_id.startswith("["):  # "SKIPPED [1] file.py:3: reason" names no test id
                continue
        if test_id is not None and _SEVERITY[status] >= _SEVERITY.get(tests.get(test_id, "PASSED"), 0):
            tests[test_id] = status
    return tests


def _between(log: str, start: str, end: str) -> str:
    tail = log.partition(start)[2]
    return tail.partition(end)[0] if tail else ""


def read_run_log(log: str) -> RunTestsResult:
    """Turn the runner's output into a result (SANDBOX_ERROR when the runner could not do its part)."""
    from m1flow.status import Status
    from svc_sandbox.api import RunTestsResult
    if log.startswith(MISSING_TOOL):  # first, so no test output can claim it
        lacks = log[len(MISSING_TOOL):].partition("\n")[0]
        return RunTestsResult(status=Status.SANDBOX_ERROR, detail=f"the sandbox lacks {lacks}", log=log)
    if NOT_APPLIED in log:
        return RunTestsResult(status=Status.OK, detail="patch did not apply with any method", log=log)
    applied = re.search(re.escape(APPLIED) + r"(.+)", log)
    if not applied:
        return RunTestsResult(status=Status.SANDBOX_ERROR, detail="runner stopped before applying the patch", log=log)
    section = _between(log, TESTS_START, TESTS_END)
    detail = "test command timed out" if TEST_TIMEOUT in log else ""
    if TESTS_START not in log:
        detail = "runner stopped before the tests"
    elif TESTS_END not in log:
        detail = "test run cut short"
    return RunTestsResult(status=Status.OK, patch_applied=True, apply_method=applied.group(1).strip(),
                          tests=parse_pytest_log(section), detail=detail, log=log)


def run_tests(executor: Executor, request: RunTestsRequest) -> RunTestsResult:
    """Run the runner (this file) in the sandbox on the snapshot and patch; parse its log."""
    from m1flow.status import Status
    from svc_sandbox.api import ExecRequest, RunTestsResult, swe_limits
    limits = request.limits or swe_limits()
    test_ids = list(dict.fromkeys(request.fail_to_pass + request.pass_to_pass))
    spec = {"test_command": request.test_command, "test_ids": test_ids,
            "test_timeout": max(1.0, limits.wall_seconds * 0.8)}
    files = {"repo.tar": request.repo_tar, "model.patch": request.patch.encode(),
             "spec.json": json.dumps(spec).encode()}
    result = executor(ExecRequest(language="python", code=Path(__file__).read_text(), files=files,
                                  argv=["spec.json"], limits=limits))
    log = result.stdout_text
    if result.status is Status.SANDBOX_ERROR:
        return RunTestsResult(status=result.status, detail=result.detail, log=log)
    parsed = read_run_log(log)
    if parsed.status is Status.SANDBOX_ERROR:  # e.g. the snapshot did not unpack, git is missing
        parsed.detail += f" ({result.status.name}: {result.stderr_text[-300:]})"
    elif result.status in (Status.TIME_LIMIT, Status.MEMORY_LIMIT, Status.OUTPUT_LIMIT):
        parsed.status = result.status
        parsed.detail = f"{result.status.name}: {result.detail}; {parsed.detail}".strip("; ")
    return parsed


# ---------------------------------------------------------------- inside the sandbox (stdlib only)

def _run(argv: list[str], cwd: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=check)


def prepare_repo(repo: str) -> None:
    """Make the snapshot a git repository with one clean commit so every try can reset to it."""
    if not os.path.isdir(os.path.join(repo, ".git")):
        _run(["git", "init", "-q"], repo, check=True)
        _run(["git", *_GIT_ID, "add", "-A"], repo, check=True)
        _run(["git", *_GIT_ID, "commit", "-q", "--no-verify", "-m", "snapshot"], repo, check=True)


def reset_repo(repo: str) -> None:
    _run(["git", "reset", "--hard", "-q", "HEAD"], repo, check=True)
    _run(["git", "clean", "-fdq"], repo, check=True)


def apply_patch(repo: str, patch_file: str) -> str | None:
    """Try each method on a clean tree; the name of the first that applies fully, else None."""
    for name, argv in APPLY_CHAIN:
        reset_repo(repo)
        tried = _run(["git", *_GIT_ID, *argv[1:], patch_file] if argv[0] == "git" else argv + [patch_file], repo)
        print(f"--- {name}: exit {tried.returncode}\n{tried.stdout[-2000:]}{tried.stderr[-2000:]}", flush=True)
        if tried.returncode == 0:
            return name
    reset_repo(repo)
    return None


def run_test_command(repo: str, command: str, test_ids: list[str], timeout: float) -> None:
    argv = shlex.split(command)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    print(TESTS_START, flush=True)
    try:
        subprocess.run(argv + test_ids, cwd=repo, stdin=subprocess.DEVNULL, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        print(f"\n{TEST_TIMEOUT}", flush=True)
    print(f"\n{TESTS_END}", flush=True)


def missing_tools(command: str) -> list[str]:
    """What the runner and the test command need that this sandbox lacks (its image's fault)."""
    import importlib.util
    import shutil
    missing = [tool for tool in ("git", "patch") if shutil.which(tool) is None]
    argv = shlex.split(command)
    if argv and argv[0] not in ("python", "python3") and shutil.which(argv[0]) is None:
        missing.append(argv[0])
    if argv[:1] in (["python"], ["python3"]) and argv[1:2] == ["-m"] and len(argv) > 2:
        if importlib.util.find_spec(argv[2]) is None:
            missing.append(f"the Python module {argv[2]}")
    return missing


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    missing = missing_tools(spec["test_command"])
    if missing:
        print(f"{MISSING_TOOL}{', '.join(missing)}", flush=True)
        return
    work = os.path.dirname(os.path.abspath(spec_path))
    repo = os.path.join(work, "repo")
    os.makedirs(repo)
    with tarfile.open(os.path.join(work, "repo.tar")) as tar:
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.11.4
        tar.extractall(repo, **safe)
    os.remove(os.path.join(work, "repo.tar"))
    prepare_repo(repo)
    method = apply_patch(repo, os.path.join(work, "model.patch"))
    if method is None:
        print(NOT_APPLIED, flush=True)
        return
    print(f"{APPLIED}{method}", flush=True)
    run_test_command(repo, spec["test_command"], spec["test_ids"], spec["test_timeout"])


if __name__ == "__main__":
    main(sys.argv[1])
