"""`m1flow data validate`: good and bad files of every format (JSONL, CSV, Parquet, Arrow, Hugging Face
save_to_disk and data-files directories: tests/data/rows.py writes them), the fixture files, and the
CLI once as a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from m1flow.data import DatasetConfig, open_source
from ops.data_cli import cmd_validate
from ops.data_validate import GoldChecker, check_rows
from m1flow.task_store import TaskStore
from tests.data.rows import BAD_FIELD, FORMATS, MALFORMED_FIELD, bad_rows, good_rows, row, swe_row, unreadable, write

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "data"


def validate(capsys, *files: Path | str, **flags) -> tuple[int, list[str], str]:
    import argparse

    args = argparse.Namespace(files=[Path(f) for f in files], format=flags.get("format"), importer="auto",
                              kinds=flags.get("kinds", "{}"), sandbox=flags.get("sandbox", ""), limit=None, jobs=2)
    code = cmd_validate(args)
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> str:
    """One local sandbox for the code and SWE rows of the per-format files (the jail where it runs,
    else what svc_sandbox picks), instead of one started by each validate."""
    from ops.launcher import launch
    from svc_sandbox.backends.jail import JailBackend

    args = [] if JailBackend.missing() else ["--backend", "jail"]
    proc = launch("sandbox", tmp_path_factory.mktemp("sandbox"), bootstrap="unused:0", args=args)
    yield proc.grpc_address
    proc.stop()


GOOD_SUMMARY = ("validate: 9 rows in 1 file(s): 8 good, 0 bad, 1 schema-checked only (genrm without a reference "
                "answer: a judge model scores it, not checkable offline: 1)")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_good_file_of_each_format_with_a_row_of_every_kind_is_good(capsys, tmp_path, sandbox, fmt):
    """arith, math (boxed; DAPO as a chat conversation), logic, code (stdin/stdout and HumanEval),
    swe (a snapshot by task-store reference, its patch run in the sandbox), rg, genrm."""
    path = write(tmp_path, fmt, good_rows(tmp_path, TaskStore(tmp_path / "tasks")))
    code, out, _ = validate(capsys, path, sandbox=sandbox)
    assert (code, out) == (0, [GOOD_SUMMARY])


@pytest.mark.parametrize("case", sorted(bad_rows()))
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_bad_row_in_a_file_of_each_format_is_named_and_exits_1(capsys, tmp_path, fmt, case):
    """A malformed row (the format's own kind: a line that is not JSON, a CSV line short of fields, a
    spec that is not JSON text, a row without its prompt), a missing gold, an unknown kind, a
    reasoning-gym task that does not exist: named by file, row and field; the good rows around it pass."""
    good = row("mix", "ok", "1+1=", "arith", "2")
    path = write(tmp_path, fmt, [good, bad_rows()[case], good])
    code, out, _ = validate(capsys, path)
    field = MALFORMED_FIELD[fmt] if case == "malformed" else BAD_FIELD[case]
    assert code == 1 and len(out) == 2, out
    assert out[0].startswith(f"{path}:1: {field}: "), out[0]
    assert out[1] == "validate: 3 rows in 1 file(s): 2 good, 1 bad, 0 schema-checked only"


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_unreadable_file_of_each_format_exits_2_in_one_line_naming_it(capsys, tmp_path, fmt):
    """Not gzip behind a .gz name, an empty CSV, a Parquet or Arrow file (or a directory's data file) cut short."""
    path = unreadable(tmp_path, fmt, [row("mix", "ok", "1+1=", "arith", "2")] * 40)
    code, out, err = validate(capsys, path)
    assert code == 2 and out == [] and len(err.splitlines()) == 1, err
    assert err.startswith(f"m1flow: error: {path}"), err


def test_an_swe_row_whose_patch_does_not_fix_the_bug_is_bad(capsys, tmp_path, sandbox):
    """The reference patch runs against the snapshot in the sandbox: one that leaves FAIL_TO_PASS failing scores 0."""
    good = swe_row(tmp_path, TaskStore(tmp_path / "tasks"))
    wrong = {**good, "id": "no-fix", "verifier": {**good["verifier"], "gold": good["verifier"]["gold"].replace(
        "+    return a + b", "+    return a * b")}}
    code, out, _ = validate(capsys, write(tmp_path, "jsonl", [good, wrong]), sandbox=sandbox)
    assert code == 1 and len(out) == 2, out
    assert ":1: verifier.gold: the gold scores 0, not 1 (OK: NO: FAIL_TO_PASS 0/1" in out[0], out[0]
    assert out[1].startswith("validate: 2 rows in 1 file(s): 1 good, 1 bad")


def test_cli_on_good_files_of_every_format_starts_and_stops_a_sandbox(tmp_path):
    """The fixtures through the CLI: JSONL (mixed kinds, code included: a sandbox starts), verl
    parquet, CSV, a HF directory."""
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    datasets.Dataset.from_parquet(str(FIXTURES / "gsm8k_verl.parquet")).save_to_disk(str(tmp_path / "hf"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "ops", "data", "validate", str(FIXTURES / "mixed.jsonl"),
                             str(FIXTURES / "gsm8k_verl.parquet"), str(FIXTURES / "tasks.csv"), str(tmp_path / "hf")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stdout + stderr
    assert stdout.splitlines() == [
        "validate: 58 rows in 4 file(s): 57 good, 0 bad, 1 schema-checked only (genrm without a reference "
        "answer: a judge model scores it, not checkable offline: 1)"]
    assert "starting a local sandbox" in stderr
    leftover = subprocess.run(["pgrep", "-f", f"ops.tethered {proc.pid} "], capture_output=True, text=True)
    assert leftover.stdout == "", "the sandbox outlived validate"


@pytest.mark.parametrize("name,lines", [
    ("bad_json.jsonl", ["bad_json.jsonl:1: json: line 2: not JSON (Expecting ',' delimiter at column 1)"]),
    ("missing_gold.jsonl", ["missing_gold.jsonl:1: verifier.gold: missing: this kind needs a gold answer"]),
    ("unknown_kind.jsonl", ["unknown_kind.jsonl:0: verifier.kind: unknown verifier kind 'spelling'; known: arith, "
                            "choice, code, genrm, logic, math, rg, swe, text"]),
    ("bad_rg_task.jsonl", ["bad_rg_task.jsonl:0: verifier.spec.task: unknown reasoning-gym task 'leg_countin'; "
                           "did you mean leg_counting, letter_counting, rectangle_count?"]),
])
def test_bad_rows_are_named_and_exit_1(capsys, name, lines):
    code, out, _ = validate(capsys, FIXTURES / name)
    assert code == 1
    assert [line.replace(str(FIXTURES) + "/", "") for line in out[:-1]] == lines
    assert out[-1].startswith("validate: ") and " 1 bad" in out[-1]


def test_golds_that_do_not_score_full_reward_are_bad(capsys):
    """The math gold cut to a lone brace reads back as no answer; the code row's reference program
    fails its tests (run in the sandbox); the sudoku's solution changes a given cell."""
    code, out, _ = validate(capsys, FIXTURES / "wrong_gold.jsonl")
    assert code == 1
    bad = {line.split(":")[1]: line for line in out[:-1]}
    assert set(bad) == {"1", "2", "3"}
    assert "verifier.gold: the gold scores 0, not 1 (FORMAT_ERROR" in bad["1"]
    assert "verifier.gold: the gold scores 0, not 1 (OK: passed 0/2" in bad["2"]
    assert "verifier.spec.solution: the gold scores 0" in bad["3"]
    assert out[-1].startswith("validate: 4 rows in 1 file(s): 1 good, 3 bad")


def test_unreadable_files_and_bad_flags_exit_2_in_one_line(capsys, tmp_path):
    for files in ([FIXTURES / "truncated.parquet"], [FIXTURES / "mixed.jsonl", tmp_path / "gone.jsonl"]):
        code, out, err = validate(capsys, *files)
        assert code == 2 and out == [] and len(err.splitlines()) == 1 and err.startswith("m1flow: error: ")
    assert validate(capsys, FIXTURES / "mixed.jsonl", kinds="[1]")[0] == 2


def test_verl_rows_of_an_unmapped_source_are_bad_until_mapped(capsys, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(ROOT / "scripts"))
    from make_fixtures import verl_rows

    rows = [{**r, "data_source": "ours/word-problems", "ability": "arithmetic"} for r in verl_rows(3)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "ours.parquet")
    code, out, _ = validate(capsys, tmp_path / "ours.parquet")
    assert code == 1 and out[0].endswith("map it in the dataset's kinds, e.g. kinds: {'ours/word-problems': math}")
    assert validate(capsys, tmp_path / "ours.parquet", kinds='{"ours/word-problems": "math"}')[0] == 0


def test_a_kind_without_a_gold_writer_is_schema_checked_and_said_so_per_row(capsys, tmp_path, monkeypatch):
    """A declared kind that has a schema but no gold writer (a kind half added): each of its rows is
    schema-checked and its verdict says why it was not scored, never a traceback; other rows are checked."""
    from m1flow.kinds import KINDS, Kind, KindSchema, Style

    monkeypatch.setitem(KINDS._items, "plain", Kind(name="plain", schema=KindSchema, styles=(Style("text", "the text"),)))
    rows = [row("p", "a", "Say hi.", "plain", "hi"), row("p", "ok", "1+1=", "arith", "2"), row("p", "b", "Bye.", "plain")]
    path = write(tmp_path, "jsonl", rows)
    code, out, err = validate(capsys, path)
    assert (code, out) == (0, ["validate: 3 rows in 1 file(s): 1 good, 0 bad, 2 schema-checked only "
                               "(verifier kind 'plain' declares no gold writer: 2)"]) and "Traceback" not in err
    checker = GoldChecker()
    try:
        verdicts = list(check_rows(checker, str(path), open_source(DatasetConfig(path=str(path))).records()))
    finally:
        checker.close()
    assert [(v.index, v.error, v.unchecked) for v in verdicts] == [
        (0, None, "verifier kind 'plain' declares no gold writer"), (1, None, ""),
        (2, None, "verifier kind 'plain' declares no gold writer")]


def test_check_rows_keeps_row_order_with_parallel_checks():
    checker = GoldChecker()
    try:
        source = open_source(DatasetConfig(generator="arith", size=40, seed=2))
        verdicts = list(check_rows(checker, "arith", source.records(), jobs=3))
    finally:
        checker.close()
    assert [v.index for v in verdicts] == list(range(40)) and not any(v.error for v in verdicts)


def test_a_killed_validate_leaves_no_sandbox_running(tmp_path):
    """SIGKILL runs no `finally`: the kernel kills the tethered sandbox with its parent."""
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "ops", "data", "validate", str(FIXTURES / "mixed.jsonl")],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pattern = f"ops.tethered {proc.pid} "

    def sandboxes() -> str:
        return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.strip()

    deadline = time.monotonic() + 60
    while not sandboxes() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert sandboxes(), "no sandbox started"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 10
    while sandboxes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not sandboxes(), "the sandbox outlived a killed validate"
