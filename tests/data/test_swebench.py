"""SWE-bench instances in: a real-format instance file (JSONL and the Hub's Parquet, FAIL_TO_PASS as JSON
text) read into `swe` records and graded in the local jail: the gold scores 1, the empty patch 0, a
regression 0 with its reason; patches that leave the repository or touch the tests score 0 unrun."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from m1flow.data import DatasetConfig, open_source
from m1flow.data.record import RowError, TaskRecord
from m1flow.data.swebench import files_of_tests, instance_snapshot
from m1flow.kinds import gold_response
from m1flow.kinds.probe import probe_response, probes
from m1flow.task_store import TaskStore
from m1flow.contracts import events
from svc_reward.config import RewardConfig
from svc_reward.groups import verdict_fields
from svc_reward.verifiers.swe import SweKind, failure_reason, grade, screen_patch
from tests.reward.test_swe_verifier import diff_after, git

CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = "from calc import add, sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
NEW_TEST = "\n\ndef test_add():\n    assert add(2, 3) == 5\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("calc")
    (root / "tests").mkdir()
    (root / "calc.py").write_text(CALC)
    (root / "tests" / "test_calc.py").write_text(TESTS)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "calc: add subtracts")
    return root


def instance(repo: Path, store: TaskStore) -> dict:
    """One instance as SWE-bench publishes it (the Hub's copy: FAIL_TO_PASS and PASS_TO_PASS as JSON
    text), plus m1flow's snapshot reference."""
    base = git(repo, "rev-parse", "HEAD").strip()
    test_patch = diff_after(repo, {"tests/test_calc.py": TESTS + NEW_TEST})
    gold = diff_after(repo, {"calc.py": CALC.replace("return a - b", "return a + b", 1)})
    return {"repo": "example/calc", "instance_id": "example__calc-1", "base_commit": base, "patch": gold,
            "test_patch": test_patch, "problem_statement": "add(2, 3) returns -1, it should be 5.",
            "hints_text": "", "created_at": "2026-12-05T00:00:00Z", "version": "0.1",
            "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
            "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_sub"]), "environment_setup_commit": base,
            "payload_uri": store.put(instance_snapshot(repo, base, test_patch)), "license": "MIT"}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> TaskStore:
    return TaskStore(tmp_path_factory.mktemp("tasks"))


@pytest.fixture(scope="module")
def row(repo, store) -> dict:
    return instance(repo, store)


@pytest.fixture(scope="module")
def record(row, tmp_path_factory) -> TaskRecord:
    path = tmp_path_factory.mktemp("data") / "calc.jsonl"
    path.write_text(json.dumps(row) + "\n")
    [(_, record)] = list(open_source(DatasetConfig(path=str(path))).records())
    assert isinstance(record, TaskRecord), record
    return record


def test_an_instance_maps_onto_a_swe_record(record):
    spec = record.verifier.spec
    assert (record.id, record.verifier.kind, record.license) == ("example__calc-1", "swe", "MIT")
    assert spec["fail_to_pass"] == ["tests/test_calc.py::test_add"]
    assert spec["pass_to_pass"] == ["tests/test_calc.py::test_sub"]
    assert spec["test_files"] == ["tests/test_calc.py"] and spec["version"] == "0.1"
    assert "add(2, 3) returns -1" in record.text and record.verifier.payload_uri.startswith("file://")
    assert "return a + b" not in record.text  # the prompt never holds the fix


def test_the_hub_parquet_layout_reads_the_same(row, record, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "calc.parquet"
    pq.write_table(pa.Table.from_pylist([row]), path)
    [(_, again)] = list(open_source(DatasetConfig(path=str(path), name="calc")).records())
    assert again == record


@pytest.mark.parametrize("missing, field", [("payload_uri", "payload_uri"), ("patch", "patch")])
def test_a_bad_instance_names_its_field(row, tmp_path, missing, field):
    lacking = {k: v for k, v in row.items() if k != missing}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(lacking) + "\n" + json.dumps({**row, "FAIL_TO_PASS": "[1, 2"}) + "\n")
    (_, first), (_, second) = open_source(DatasetConfig(path=str(path))).records()
    assert isinstance(first, RowError) and (first.row, first.field) == (0, field)
    assert isinstance(second, RowError) and (second.row, second.field) == (1, "FAIL_TO_PASS")


@pytest.fixture(scope="module")
def scorer(jail_sandbox, store) -> SweKind:
    return SweKind(jail_sandbox.run_tests, store)


def score(scorer: SweKind, record: TaskRecord, response: str):
    return scorer.score(response, record.to_prompt(group_size=1).verifier)


def answer(patch: str) -> str:
    return f"The fix:\n```diff\n{patch}```"


def test_the_gold_scores_one_and_the_empty_patch_zero(scorer, record):
    gold = score(scorer, record, gold_response(record))
    assert (gold.reward, gold.reason) == (1.0, "resolved"), gold.detail
    [empty] = probes(record.verifier)
    result = score(scorer, record, probe_response(record.verifier, empty.answer))
    assert (result.reward, result.reason) == (0.0, "fail_to_pass_failing"), result.detail


def test_a_regression_scores_zero_with_its_reason(scorer, record, repo):
    patch = diff_after(repo, {"calc.py": CALC.replace("return a - b", "return a + b")})  # fixes add, breaks sub
    result = score(scorer, record, answer(patch))
    assert (result.reward, result.correct, result.reason) == (0.0, False, "pass_to_pass_regression"), result.detail
    assert "tests/test_calc.py::test_sub" in result.detail
    assert events.ScoredSample(**verdict_fields(result)).reason == "pass_to_pass_regression"  # what the monitor counts


@pytest.mark.parametrize("code, reason", [("def add(a, b)\n    return a + b\n", "does_not_compile"),
                                          ("import no_such_module\n" + CALC, "does_not_import"),
                                          (CALC.replace("return a - b", "return a + None", 1), "runtime_error")])
def test_why_a_patch_that_applies_fails(scorer, record, repo, code, reason):
    result = score(scorer, record, answer(diff_after(repo, {"calc.py": code})))
    assert (result.reward, result.reason) == (0.0, reason), result.detail


def test_a_patch_that_does_not_apply_says_so(scorer, record):
    patch = record.verifier.gold.replace("-    return a - b", "-    return a * b", 1)
    result = score(scorer, record, answer(patch))
    assert (result.reward, result.reason) == (0.0, "did_not_apply"), result.detail


def test_touching_the_tests_or_leaving_the_repository_scores_zero_unrun(scorer, record, repo):
    """FAIL_TO_PASS comes from the instance: a patch that deletes or rewrites the test is refused."""
    gold = record.verifier.gold
    deletes = "diff --git a/tests/test_calc.py b/tests/test_calc.py\ndeleted file mode 100644\n"
    edits = diff_after(repo, {"tests/test_calc.py": TESTS.replace("== 2", "== 2 or True")})
    escapes = gold.replace("a/calc.py", "a/../calc.py").replace("b/calc.py", "b/../calc.py")
    for patch, reason in ((gold + deletes, "deletes_tests"), (gold + edits, "edits_tests"),
                          (escapes, "escapes_repo")):
        result = score(scorer, record, answer(patch))
        assert (result.reward, result.reason) == (0.0, reason), (reason, result.detail)


def test_screening_and_reasons_without_a_sandbox():
    assert screen_patch("--- a/src/x.py\n+++ b/src/x.py\n", ["tests/t.py"]) is None
    assert screen_patch("--- a/conftest.py\n+++ b/conftest.py\n", [])[0] == "edits_tests"
    assert screen_patch("--- a/x.py\n+++ /etc/passwd\n", [])[0] == "escapes_repo"
    link = "diff --git a/lib b/lib\nnew file mode 120000\n--- /dev/null\n+++ b/lib\n@@ -0,0 +1 @@\n+/etc\n"
    assert screen_patch(link, [])[0] == "escapes_repo"
    assert files_of_tests("diff --git a/t/a.py b/t/a.py\n", ["t/b.py::test_x", "t/a.py::test_y"]) == ["t/a.py", "t/b.py"]
    verdict = grade({"t::a": "FAILED", "t::b": "PASSED"}, ["t::a"], ["t::b"])
    assert failure_reason(verdict, "FAILED t::a - KeyError: 'x'\n") == "runtime_error"
    assert failure_reason(verdict, "FAILED t::a - AssertionError: assert 1 == 2\n") == "fail_to_pass_failing"


def test_partial_reward_is_a_config_choice_off_by_default():
    half = grade({"t::a": "PASSED", "t::b": "FAILED", "t::c": "PASSED"}, ["t::a", "t::b"], ["t::c"])
    assert (half.resolution, half.reward, half.partial) == ("PARTIAL", 0.0, 0.5)
    assert grade({"t::a": "PASSED", "t::b": "FAILED"}, ["t::a"], ["t::b"]).partial == 0.0  # a regression: none
    assert RewardConfig().swe.partial_reward is False
