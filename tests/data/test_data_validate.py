"""`m1flow data validate`: good and bad files of every format (JSONL, CSV, Parquet, Arrow, Hugging Face
save_to_disk and data-files directories: tests/data/rows.py writes them), the fixture files, and the
CLI once as a subprocess."""
from __future__ import annotations

import gzip
import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from m1flow.data import DatasetConfig, open_source
from ops.data_cli import cmd_validate
from ops.data_validate import GoldChecker, check_rows
from m1flow.task_store import TaskStore, TaskStoreConfig
from tests.data.rows import BAD_FIELD, FORMATS, MALFORMED_FIELD, bad_rows, good_rows, row, swe_row, unreadable, write

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "data"


def validate(capsys, *files: Path | str, **flags) -> tuple[int, list[str], str]:
    import argparse

    args = argparse.Namespace(files=[Path(f) for f in files], format=flags.get("format"), importer="auto",
                              kinds=flags.get("kinds", "{}"), sandbox=flags.get("sandbox", ""),
                              limit=flags.get("limit"), jobs=2, split=flags.get("split"),
                              progress_every=flags.get("progress_every", 10.0), task_store=flags.get("task_store"))
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
GOOD_BY_SOURCE = ["  humaneval: 1 rows: 1 good, 0 bad, 0 schema-checked only",
                  "  logic:sudoku: 1 rows: 1 good, 0 bad, 0 schema-checked only",
                  "  mix: 5 rows: 4 good, 0 bad, 1 schema-checked only",
                  "  repo: 1 rows: 1 good, 0 bad, 0 schema-checked only",
                  "  rg:leg_counting: 1 rows: 1 good, 0 bad, 0 schema-checked only"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_good_file_of_each_format_with_a_row_of_every_kind_is_good(capsys, tmp_path, sandbox, fmt):
    """arith, math (boxed; DAPO as a chat conversation), logic, code (stdin/stdout and HumanEval),
    swe (a snapshot by task-store reference, its patch run in the sandbox), rg, genrm."""
    path = write(tmp_path, fmt, good_rows(tmp_path, TaskStore(tmp_path / "tasks")))
    code, out, _ = validate(capsys, path, sandbox=sandbox, task_store=tmp_path / "tasks")
    assert (code, out[0]) == (0, GOOD_SUMMARY), out
    assert out[1:] == GOOD_BY_SOURCE, out


@pytest.mark.parametrize("case", sorted(bad_rows()))
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_bad_row_in_a_file_of_each_format_is_named_and_exits_1(capsys, tmp_path, fmt, case):
    """A malformed row (the format's own kind: a line that is not JSON, a CSV line short of fields, a
    spec that is not JSON text, a row without its prompt), a missing gold, an unknown kind, a
    reasoning-gym task that does not exist: named by file (a directory's data file), row and field;
    the good rows around it pass."""
    path = write(tmp_path, fmt, [row("mix", "ok", "1+1=", "arith", "2"), bad_rows()[case],
                                 row("mix", "ok-2", "2+2=", "arith", "4")])
    code, out, _ = validate(capsys, path)
    field = MALFORMED_FIELD[fmt] if case == "malformed" else BAD_FIELD[case]
    assert code == 1 and len(out) == 2, out
    where = path if path.is_file() else next(f for f in path.rglob("*") if f.suffix in (".arrow", ".parquet"))
    assert out[0].startswith(f"{where}:1: {field}: "), out[0]  # a directory's row: named by its data file
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
    code, out, _ = validate(capsys, write(tmp_path, "jsonl", [good, wrong]), sandbox=sandbox,
                            task_store=tmp_path / "tasks")
    assert code == 1 and len(out) == 2, out
    assert ":1: verifier.gold: the gold scores 0, not 1 (OK: NO: FAIL_TO_PASS 0/1" in out[0], out[0]
    assert out[1].startswith("validate: 2 rows in 1 file(s): 1 good, 1 bad")


def test_a_payload_uri_that_is_not_an_intact_file_of_the_task_store_is_refused_with_the_reason(capsys, tmp_path):
    """A row names its payload; validate reads it as the reward service will (m1flow.task_store): a
    FIFO, /dev/zero, a file outside the store, one over the size cap, one whose bytes are not its
    name, a symlink out of the store: each row is bad at verifier.payload_uri with the reason, at once
    (no sandbox starts: nothing is scored), and the good row beside them passes."""
    import hashlib
    import time

    store = TaskStore(tmp_path / "tasks")
    good = store.put(b"snapshot")
    fifo = store.root / hashlib.sha256(b"fifo").hexdigest()
    os.mkfifo(fifo)
    outside = tmp_path / hashlib.sha256(b"outside").hexdigest()
    outside.write_bytes(b"outside")
    big = store.root / hashlib.sha256(b"x" * 2048).hexdigest()
    big.write_bytes(b"x" * 2048)
    wrong = store.root / hashlib.sha256(b"right").hexdigest()
    wrong.write_bytes(b"wrong")
    link = store.root / hashlib.sha256(b"link").hexdigest()
    link.symlink_to("/etc/hostname")
    cases = [(fifo.as_uri(), "is not a regular file (a FIFO)"), ("file:///dev/zero", "its name is not a SHA-256"),
             (outside.as_uri(), "outside the task store"), (big.as_uri(), "2048 bytes, over the cap of 1024"),
             (wrong.as_uri(), "does not match its SHA-256 name"), (link.as_uri(), "a symlink"),
             ("s3://bucket/" + "0" * 64, "unsupported URI scheme 's3'")]
    spec = {"fail_to_pass": ["test_a"]}
    rows = [row("repo", f"bad{i}", "Fix it.", "swe", "", spec, payload_uri=uri) for i, (uri, _) in enumerate(cases)]
    rows.append(row("repo", "ok", "1+1=", "arith", "2", payload_uri=good))  # an intact payload passes
    path = write(tmp_path, "jsonl", rows)
    started = time.monotonic()
    checker = GoldChecker(task_store=TaskStoreConfig(root=store.root, max_payload_bytes=1024))
    try:
        verdicts = list(check_rows(checker, str(path), open_source(DatasetConfig(path=str(path))).records()))
    finally:
        checker.close()
    assert time.monotonic() - started < 30  # the FIFO did not block a check
    errors = [str(v.error) if v.error else "" for v in verdicts]
    assert errors[-1] == "" and len(errors) == len(cases) + 1, errors
    for i, (uri, reason) in enumerate(cases):
        assert errors[i].startswith(f"{path}:{i}: verifier.payload_uri: "), errors[i]
        assert reason in errors[i], errors[i]
    code, out, _ = validate(capsys, path, task_store=store.root)  # the CLI: the default cap, so the big file passes
    assert code == 1 and out[-1].startswith(f"validate: {len(rows)} rows in 1 file(s): 1 good, {len(cases) - 1} bad, "
                                            "1 schema-checked only"), out


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
        "answer: a judge model scores it, not checkable offline: 1)",
        "  csv: 3 rows: 3 good, 0 bad, 0 schema-checked only",
        "  mixed: 7 rows: 6 good, 0 bad, 1 schema-checked only",
        "  openai/gsm8k: 48 rows: 48 good, 0 bad, 0 schema-checked only"]
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


def test_a_row_whose_prompt_is_over_the_bus_limit_is_bad_in_one_line(capsys, tmp_path):
    """A row whose encoded Prompt the broker would refuse (m1flow.bus.limits) is named with its size
    and the limit; the rows around it pass. The row is just over the limit: the smallest that shows it."""
    from m1flow.bus.limits import MESSAGE_MAX_BYTES

    huge = row("big", "huge", "x" * (MESSAGE_MAX_BYTES - 200) + " 1+1=", "arith", "2")
    path = write(tmp_path, "jsonl", [row("big", "ok-0", "1+1=", "arith", "2"), huge, row("big", "ok-1", "1+1=", "arith", "2")])
    code, out, _ = validate(capsys, path)
    assert code == 1 and len(out) == 2, out
    assert out[0].startswith(f"{path}:1: prompt: the encoded Prompt is 16,7") and "\n" not in out[0]
    assert f"over the bus's limit of {MESSAGE_MAX_BYTES:,} bytes" in out[0]
    assert out[1] == "validate: 3 rows in 1 file(s): 2 good, 1 bad, 0 schema-checked only"


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
    mapping = '{"ours/word-problems": "math"}'
    hint = f"--kinds '{mapping}' (or kinds: {mapping} in the dataset's config)"
    assert code == 1 and out[0].endswith(f"map it to one: {hint}"), out[0]
    flag, value = shlex.split(hint.split(" (or ")[0])  # the hint as a shell reads it is what --kinds takes
    assert flag == "--kinds" and validate(capsys, tmp_path / "ours.parquet", kinds=value)[0] == 0


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


# -- issue 38: nothing skipped, every bad input one line -------------------------------------------------

def _arith_rows(n: int, source: str = "s", start: int = 0) -> list[dict]:
    return [row(source, str(i), f"{i}+1=", "arith", str(i + 1)) for i in range(start, start + n)]


def test_the_split_trap_folder_validates_its_40_test_rows_and_says_what_it_did_not_read(capsys, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    rows = [{**r, "verifier": {**r["verifier"], "spec": "{}"}} for r in _arith_rows(40)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / "test-00000-of-00001.parquet")
    (tmp_path / "constraints.json").write_text('{"max_len": 3}\n')
    (tmp_path / "dataset_infos.json").write_text('{"default": {}}\n')
    code, out, err = validate(capsys, tmp_path)
    assert (code, out) == (0, ["validate: 40 rows in 1 file(s): 40 good, 0 bad, 0 schema-checked only"])
    assert f"validate: {tmp_path}: split 'test' (1 file, 40 rows); in no split, not read: constraints.json" in err
    code, out, err = validate(capsys, tmp_path, split="train")
    assert (code, out) == (2, []) and err == f"m1flow: error: {tmp_path}: no split 'train': the splits here are test\n"


def test_errors_inside_a_directory_name_its_file_and_row(capsys, tmp_path):
    first, second = tmp_path / "train-0.jsonl", tmp_path / "train-1.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in _arith_rows(3)))
    rows = _arith_rows(3, start=3)
    rows[1], rows[2]["prompt"] = {"id": "x", "source": "s", "prompt": "9+1="}, ""
    second.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, _ = validate(capsys, tmp_path)
    assert code == 1 and out[:2] == [f"{second}:1: verifier: missing", f"{second}:2: prompt: empty"], out


def test_a_latin1_csv_is_one_line_naming_file_row_and_column(capsys, tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("id,prompt,verifier.kind,verifier.gold\n1,1+1=,arith,2\n2,caf\xe9 2+2=,arith,4\n"
                     .encode("latin-1"))
    code, out, _ = validate(capsys, path)
    assert (code, out) == (1, [f"{path}:1: prompt: line 3: not UTF-8 text (byte 0xe9 at character 4): re-save the "
                               "file as UTF-8", "validate: 2 rows in 1 file(s): 1 good, 1 bad, 0 schema-checked only"])


@pytest.mark.parametrize("name", ["rows.jsonl.gz", "rows.csv.gz"])
def test_a_truncated_gz_is_one_line_and_exit_2(capsys, tmp_path, name):
    rows = _arith_rows(2000)
    text = "".join(json.dumps(r) + "\n" for r in rows) if name.startswith("rows.jsonl") else \
        "id,prompt,verifier.kind,verifier.gold\n" + "".join(f"{i},{i}+1=,arith,{i + 1}\n" for i in range(2000))
    raw = gzip.compress(text.encode())
    (tmp_path / name).write_bytes(raw[: len(raw) * 2 // 3])
    code, out, err = validate(capsys, tmp_path / name)
    assert code == 2 and out == [] and len(err.splitlines()) == 1, err
    assert err.startswith(f"m1flow: error: {tmp_path / name}: compressed data damaged after line ") and \
        "end-of-stream marker" in err


def test_duplicate_ids_in_a_file_are_bad_naming_the_first_row(capsys, tmp_path):
    rows = _arith_rows(3)
    rows.append({**_arith_rows(1, start=7)[0], "id": "1"})
    path = write(tmp_path, "jsonl", rows)
    code, out, _ = validate(capsys, path)
    assert (code, out) == (1, [f"{path}:3: id: duplicate id '1': {path}:1 has it too (prompt ids <source>/<id> must "
                               "be unique: 's/1')",
                               "validate: 4 rows in 1 file(s): 3 good, 1 bad, 0 schema-checked only"])
    other = write(tmp_path / "test", "jsonl", _arith_rows(3))  # another file (a test split) may repeat the ids
    assert validate(capsys, write(tmp_path / "train", "jsonl", _arith_rows(3)), other)[:2] == (
        0, ["validate: 6 rows in 2 file(s): 6 good, 0 bad, 0 schema-checked only"])


def test_none_and_nan_golds_are_bad_with_the_reason(capsys, tmp_path):
    """Text a missing value turns into (`None`, `nan`) is not an answer, nor is a NaN number in a
    column (m1flow form or verl's ground_truth)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [row("s", "a", "What is 1/0 as a float?", "math", "nan", {"style": "boxed"}),
            row("s", "b", "Who won?", "math", "None", {"style": "boxed"}),
            row("s", "c", "What is 2+2?", "math", "4", {"style": "boxed"})]
    path = write(tmp_path, "jsonl", rows)
    code, out, _ = validate(capsys, path)
    assert code == 1 and out[:2] == [
        f"{path}:0: verifier.gold: 'nan' is a missing value written as text (None, NaN, null), not an answer",
        f"{path}:1: verifier.gold: 'None' is a missing value written as text (None, NaN, null), not an answer"], out
    table = pa.table({"id": ["a", "b"], "prompt": ["What is 2+2?", "What is 3+3?"], "verifier.kind": ["math", "math"],
                      "verifier.gold": [4.0, math.nan]})
    pq.write_table(table, tmp_path / "floats.parquet")
    code, out, _ = validate(capsys, tmp_path / "floats.parquet")
    floats = tmp_path / "floats.parquet"
    assert code == 1 and out[0] == f"{floats}:1: verifier.gold: NaN: a missing value, not an answer"
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_fixtures import verl_rows

    verl = verl_rows(2)
    verl[1]["reward_model"] = {"style": "rule", "ground_truth": math.nan}
    verl[0]["reward_model"] = {"style": "rule", "ground_truth": 18.0}
    pq.write_table(pa.Table.from_pylist(verl), tmp_path / "verl.parquet")
    code, out, _ = validate(capsys, tmp_path / "verl.parquet")
    assert code == 1 and f"{tmp_path / 'verl.parquet'}:1: reward_model.ground_truth: NaN: a missing value, " \
                         "not an answer" in out, out


@pytest.mark.parametrize("flag,value", [("--limit", "-1"), ("--limit", "0"), ("--jobs", "0")])
def test_a_count_flag_below_one_is_refused(capsys, flag, value):
    from ops.cli import parser

    with pytest.raises(SystemExit) as info:
        parser().parse_args(["data", "validate", "rows.jsonl", flag, value])
    assert info.value.code == 2
    assert f"argument {flag}: must be 1 or more, got {value}" in capsys.readouterr().err


def test_verl_rows_are_counted_per_data_source(capsys, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(ROOT / "scripts"))
    from make_fixtures import verl_rows

    rows = verl_rows(5)
    for r in rows[3:]:
        r["data_source"] = "ours/more-gsm8k"
    rows[4]["reward_model"] = {"style": "rule", "ground_truth": ""}
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "two.parquet")
    code, out, _ = validate(capsys, tmp_path / "two.parquet", kinds='{"ours/more-gsm8k": "math"}')
    assert code == 1 and out[1:] == [
        "validate: 5 rows in 1 file(s): 4 good, 1 bad, 0 schema-checked only",
        "  openai/gsm8k: 3 rows: 3 good, 0 bad, 0 schema-checked only",
        "  ours/more-gsm8k: 2 rows: 1 good, 1 bad, 0 schema-checked only"], out


def test_validate_says_its_progress_on_stderr(capsys, tmp_path):
    path = write(tmp_path, "jsonl", _arith_rows(5))
    code, out, err = validate(capsys, path, progress_every=0)
    lines = [line for line in err.splitlines() if line.startswith(f"validate: {path}: ")]
    assert code == 0 and len(lines) == 5, err
    assert lines[0].startswith(f"validate: {path}: 1/5 rows, 0 bad, ") and " rows/s" in lines[0]
    assert lines[0].endswith(" left") and not lines[-1].endswith(" left")
    quiet = validate(capsys, path)[2]
    assert f"validate: {path}: " not in quiet  # 5 rows take less than the default 10 s between lines


def test_the_local_sandbox_runs_swe_environments_in_the_jail(tmp_path):
    """swe-make --envs builds each environment over this host's interpreter, which only the jail shares:
    with `auto`, a Docker engine that answers would run the tests in the run image, where that
    interpreter is not, and every gold would be a SANDBOX_ERROR (it happened: 52 of 52 toolz golds)."""
    args = GoldChecker(envs=tmp_path / "envs")._env_args()
    assert args == ["--swe-envs", str((tmp_path / "envs").resolve()), "--backend", "jail"]
    assert GoldChecker()._env_args() == []  # no environments: the sandbox's own choice of backend
