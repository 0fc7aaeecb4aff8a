"""SWE rewards: real git repositories, real patches, pytest run inside the local jail."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from svc_reward.result import Status
from svc_reward.verifiers.swe import SweTask, SweVerifier, extract_patch, grade
from svc_sandbox.client import MB, Limits, snapshot_tar
from svc_sandbox.swe import parse_pytest_log

CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = '''import pytest
from calc import add, mul, sub


def test_add():
    assert add(2, 3) == 5


def test_sub():
    assert sub(5, 3) == 2


def test_mul():
    assert mul(4, 3) == 12


@pytest.mark.xfail(reason="documented bug")
def test_known_bug():
    assert mul(0, 1) == 1
'''
F2P = ["test_calc.py::test_add"]
P2P = ["test_calc.py::test_sub", "test_calc.py::test_mul", "test_calc.py::test_known_bug"]
LIMITS = Limits(cpu_seconds=20, wall_seconds=40, memory_bytes=1024 * MB, max_processes=64,
                max_file_bytes=64 * MB, max_output_bytes=1 * MB, max_open_files=512, work_dir_bytes=128 * MB)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                          check=True, capture_output=True, text=True).stdout


def diff_after(repo: Path, edits: dict[str, str]) -> str:
    """The unified diff that turns the committed tree into one with `edits`; the tree is restored."""
    for name, text in edits.items():
        (repo / name).write_text(text)
    patch = git(repo, "diff")
    git(repo, "checkout", "--", ".")
    return patch


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("calc-repo")
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TESTS)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "calc with a bug in add")
    return root


@pytest.fixture(scope="module")
def task(repo) -> SweTask:
    return SweTask(repo_tar=snapshot_tar(repo), fail_to_pass=F2P, pass_to_pass=P2P, limits=LIMITS)


@pytest.fixture(scope="module")
def verifier(jail_sandbox) -> SweVerifier:
    return SweVerifier(jail_sandbox.run_tests)


def fixed(calc: str = CALC) -> str:
    return calc.replace("def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b")


def test_fixing_patch_is_resolved(repo, task, verifier):
    patch = diff_after(repo, {"calc.py": fixed()})
    result = verifier.verify(f"I fixed add.\n```diff\n{patch}```", task)
    assert (result.reward, result.correct, result.status) == (1.0, True, Status.OK), result.detail
    assert result.detail.startswith("FULL: FAIL_TO_PASS 1/1, PASS_TO_PASS 3/3")  # the xfail counts
    assert "applied by git apply" in result.detail


def test_snapshot_without_git_history_works_too(repo, verifier, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("calc.py", "test_calc.py"):
        (plain / name).write_text((repo / name).read_text())
    task = SweTask(repo_tar=snapshot_tar(plain), fail_to_pass=F2P, pass_to_pass=P2P, limits=LIMITS)
    result = verifier.score_patch(diff_after(repo, {"calc.py": fixed()}), task)
    assert result.reward == 1.0, result.detail


def test_patch_that_breaks_a_passing_test_scores_zero(repo, task, verifier):
    patch = diff_after(repo, {"calc.py": fixed().replace("def sub(a, b):\n    return a - b",
                                                         "def sub(a, b):\n    return b - a")})
    result = verifier.score_patch(patch, task)
    assert (result.reward, result.correct, result.status) == (0.0, False, Status.OK)
    assert result.detail.startswith("NO: FAIL_TO_PASS 1/1, PASS_TO_PASS 2/3")
    assert "test_calc.py::test_sub" in result.detail


def test_patch_that_does_not_apply_scores_zero_with_status_ok(repo, task, verifier):
    patch = diff_after(repo, {"calc.py": fixed()}).replace("-    return a - b", "-    return a % b")
    result = verifier.score_patch(patch, task)
    assert (result.reward, result.correct, result.status) == (0.0, False, Status.OK)
    assert "did not apply" in result.detail


def test_skipping_the_failing_test_is_not_a_fix(repo, task, verifier):
    patch = diff_after(repo, {"test_calc.py": TESTS.replace("def test_add", "@pytest.mark.skip\ndef test_add")})
    result = verifier.score_patch(patch, task)  # refused unrun: it edits a test file
    assert (result.reward, result.correct, result.status, result.reason) == (0.0, False, Status.OK, "edits_tests")
    assert grade({F2P[0]: "SKIPPED", **dict.fromkeys(P2P, "PASSED")}, F2P, P2P).resolution == "NO"  # and by the rule


def test_patch_with_stale_context_applies_through_the_fallback_chain(repo, task, verifier):
    """One context line differs from the tree: git apply (all modes) refuses, patch --fuzz applies."""
    patch = diff_after(repo, {"calc.py": fixed()})
    patch = patch.replace(" def sub(a, b):", " def sub(x, y):")
    patch = "\n".join(line for line in patch.splitlines() if not line.startswith("index ")) + "\n"
    result = verifier.score_patch(patch, task)
    assert result.reward == 1.0, result.detail
    assert "applied by patch --fuzz" in result.detail


def test_patch_that_hangs_the_tests_scores_zero_and_stays_usable(repo, verifier):
    """The runner stops the test command before the sandbox deadline; unfinished tests count as failed."""
    hanging = fixed().replace("def sub(a, b):\n    return a - b", "def sub(a, b):\n    while True:\n        pass")
    quick = LIMITS.model_copy(update={"wall_seconds": 4.0, "cpu_seconds": 10})
    task = SweTask(repo_tar=snapshot_tar(repo), fail_to_pass=F2P, pass_to_pass=P2P, limits=quick)
    result = verifier.score_patch(diff_after(repo, {"calc.py": hanging}), task)
    assert (result.reward, result.status, result.usable) == (0.0, Status.OK, True), result.detail
    assert "test command timed out" in result.detail and "test_calc.py::test_sub" in result.detail


def test_broken_snapshot_is_a_sandbox_error(repo, verifier):
    patch = diff_after(repo, {"calc.py": fixed()})
    broken = SweTask(repo_tar=b"not a tar archive", fail_to_pass=F2P, limits=LIMITS)
    result = verifier.score_patch(patch, broken)
    assert result.status is Status.SANDBOX_ERROR and not result.usable


def test_answer_without_a_diff_is_a_format_error(task, verifier):
    result = verifier.verify("I think the bug is in add.", task)
    assert result.status is Status.FORMAT_ERROR and result.reward == 0.0


def test_extract_patch():
    diff = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b"
    assert extract_patch(f"<think>```diff\nold\n```</think>```diff\n{diff}\n```") == diff + "\n"
    assert extract_patch(f"Patch follows:\n{diff}") == diff + "\n"
    assert extract_patch("no patch") is None


@pytest.mark.parametrize("statuses,resolution", [
    ({"a": "PASSED", "b": "PASSED", "p": "PASSED"}, "FULL"),
    ({"a": "XFAIL", "b": "PASSED", "p": "XFAIL"}, "FULL"),
    ({"a": "PASSED", "b": "FAILED", "p": "PASSED"}, "PARTIAL"),
    ({"a": "PASSED", "p": "PASSED"}, "PARTIAL"),            # b missing from the log: failed
    ({"a": "PASSED", "b": "SKIPPED", "p": "PASSED"}, "PARTIAL"),
    ({"a": "PASSED", "b": "PASSED", "p": "ERROR"}, "NO"),
    ({"a": "PASSED", "b": "PASSED", "p": "SKIPPED"}, "NO"),
    ({"a": "FAILED", "b": "SKIPPED", "p": "PASSED"}, "NO"),
    ({"a": "XPASS", "b": "PASSED", "p": "PASSED"}, "PARTIAL"),
])
def test_grade_follows_the_swe_bench_rule(statuses, resolution):
    verdict = grade(statuses, ["a", "b"], ["p"])
    assert verdict.resolution == resolution
    assert verdict.reward == (1.0 if resolution == "FULL" else 0.0)


def test_parse_pytest_log_reads_verbose_and_summary_lines():
    log = """
test_x.py::test_ok PASSED                                                 [ 20%]
test_x.py::test_param[a b-1] FAILED                                       [ 40%]
test_x.py::test_skip SKIPPED (no reason)                                  [ 60%]
test_x.py::test_xf XFAIL (bug)                                            [ 80%]
test_x.py::test_teardown PASSED                                           [100%]
test_x.py::test_teardown ERROR                                            [100%]
=========================== short test summary info ============================
PASSED test_x.py::test_ok
FAILED test_x.py::test_param[a b-1] - AssertionError: assert 1 == 2
SKIPPED [1] test_x.py:9: no reason
XFAIL test_x.py::test_xf - bug
ERROR test_x.py::test_teardown - RuntimeError: boom
PASSED tests/test_y.py::TestK::test_m
"""
    assert parse_pytest_log(log) == {
        "test_x.py::test_ok": "PASSED", "test_x.py::test_param[a b-1]": "FAILED",
        "test_x.py::test_skip": "SKIPPED", "test_x.py::test_xf": "XFAIL",
        "test_x.py::test_teardown": "ERROR", "tests/test_y.py::TestK::test_m": "PASSED"}


def test_a_failed_subtest_fails_its_test():
    """pytest 9 says PASSED for a unittest test whose subTests failed and reports those on SUBFAILED lines
    (more-itertools' PolynomialFromRootsTests): read as PASSED, an unfixed tree's empty patch scored 1."""
    log = """
tests/test_recipes.py::PolynomialFromRootsTests::test_basic PASSED       [ 50%]
SUBFAILED(roots=(2, 1, -1)) [ 50%]
tests/test_recipes.py::PolynomialFromRootsTests::test_basic SUBFAILED(roots=(2, 3)) [ 50%]
tests/test_recipes.py::T::test_ok SUBPASSED(i=1) [100%]
tests/test_recipes.py::T::test_ok PASSED                                 [100%]
=========================== short test summary info ============================
PASSED tests/test_recipes.py::PolynomialFromRootsTests::test_basic
SUBFAILED(roots=(2, 1, -1)) tests/test_recipes.py::PolynomialFromRootsTests::test_basic - NameError: x
SUBFAILED(a b) tests/test_k.py::test_p[a b-1]
PASSED tests/test_recipes.py::T::test_ok
"""
    assert parse_pytest_log(log) == {"tests/test_recipes.py::PolynomialFromRootsTests::test_basic": "FAILED",
                                     "tests/test_k.py::test_p[a b-1]": "FAILED",
                                     "tests/test_recipes.py::T::test_ok": "PASSED"}
