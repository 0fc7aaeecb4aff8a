"""Task rows of every verifier kind in m1flow's record form, and the files of every format they are
written to, for the validate tests and the prompt-source tests over the broker.

Why one place: a row of each kind (with a gold that scores 1) and a file of each format are what both
`m1flow data validate` and svc_source must read alike; writing them twice would let the two drift.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from m1flow.task_store import TaskStore

FORMATS = ("jsonl", "csv", "parquet", "arrow", "hf-save", "hf-files")
SUM_PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
SUM_TESTS = [{"stdin": "2 3\n", "expected_stdout": "5\n"}, {"stdin": "10 -4\n", "expected_stdout": "6\n"}]


class Malformed:
    """A row that does not decode, written in its format's own way (see `write`)."""


MALFORMED = Malformed()
# the field a malformed row of each format is reported under
MALFORMED_FIELD = {"jsonl": "json", "csv": "csv", "parquet": "verifier.spec", "hf-files": "verifier.spec",
                   "arrow": "prompt", "hf-save": "prompt"}


def row(source: str, id_: str, prompt: Any, kind: str, gold: str = "", spec: dict | None = None,
        payload_uri: str = "", **extra: Any) -> dict[str, Any]:
    verifier: dict[str, Any] = {"kind": kind, "gold": gold, "spec": spec or {}}
    if payload_uri:
        verifier["payload_uri"] = payload_uri
    return {"id": id_, "source": source, "prompt": prompt, "verifier": verifier, **extra}


def swe_row(tmp_path: Path, store: TaskStore, source: str = "repo") -> dict[str, Any]:
    """A two-file repository with a bug in add(): its snapshot goes to the task store, the row names
    it by payload_uri and carries the fixing patch as its gold."""
    from svc_sandbox.client import snapshot_tar
    from tests.reward.test_swe_verifier import CALC, F2P, LIMITS, P2P, TESTS, diff_after, fixed, git

    repo = tmp_path / f"repo-{source}"
    if not repo.exists():
        repo.mkdir()
        (repo / "calc.py").write_text(CALC)
        (repo / "test_calc.py").write_text(TESTS)
        git(repo, "init", "-q")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "calc with a bug in add")
    return row(source, "calc-add", "calc.add subtracts; fix it. Answer with a unified diff.", "swe",
               diff_after(repo, {"calc.py": fixed()}),
               {"fail_to_pass": F2P, "pass_to_pass": P2P, "limits": LIMITS.model_dump()},
               payload_uri=store.put(snapshot_tar(repo)))


def humaneval_row(task_id: str = "HumanEval/34") -> dict[str, Any]:
    """A HumanEval problem as m1flow.tasks.humaneval makes it (function style; gold: the canonical solution)."""
    from m1flow.tasks import humaneval

    problem = next(p for p in humaneval.problems() if p["task_id"] == task_id)
    return humaneval.to_record(problem).model_dump()


def good_rows(tmp_path: Path, store: TaskStore) -> list[dict[str, Any]]:
    """One row of each kind (math in two styles, one a chat conversation, code in both styles),
    every gold scoring 1; the genrm row has none (a judge scores it)."""
    from m1flow.data.generators import logic_record, rg_record

    return [
        row("mix", "arith", "47+38=", "arith", "85"),
        row("mix", "boxed", "What is $\\frac{1}{2} + \\frac{1}{4}$?", "math", "\\frac{3}{4}", {"style": "boxed"}),
        row("mix", "dapo", [{"role": "system", "content": "You are a careful mathematician."},
                            {"role": "user", "content": "Solve 2x + 3 = 11. End with 'Answer: x'."}],
            "math", "4", {"style": "math_dapo"}),
        logic_record("sudoku", 3, 0).model_dump(),
        row("mix", "stdio", "Print a + b for two integers on one line.", "code", SUM_PROGRAM, {"tests": SUM_TESTS}),
        humaneval_row(),
        swe_row(tmp_path, store),
        rg_record("leg_counting", 1, 0).model_dump(),
        row("mix", "haiku", "Write a haiku about streams.", "genrm", domain="general"),
    ]


def bad_rows() -> dict[str, dict[str, Any] | Malformed]:
    """case -> a row with that one problem (what validate and the source must name)."""
    return {
        "malformed": MALFORMED,
        "missing-gold": row("mix", "no-gold", "What is 6 * 7?", "math"),
        "unknown-kind": row("mix", "odd", "Spell it.", "spelling", "cat"),
        "unknown-rg-task": row("mix", "rg-0", "Count the legs.", "rg:leg_countin",
                               spec={"task": "leg_countin", "seed": 1, "index": 0}),
    }


BAD_FIELD = {"missing-gold": "verifier.gold", "unknown-kind": "verifier.kind", "unknown-rg-task": "verifier.spec.task"}


def write(dest: Path, fmt: str, rows: list[dict[str, Any] | Malformed]) -> Path:
    """The rows as a file (or directory) of format `fmt` under dest; returns its path.

    jsonl: one object per line, nested as it is. csv: dotted columns (verifier.kind), the spec and a
    chat prompt as JSON text. parquet and hf-files (a folder of data/train-*.parquet): the spec as JSON
    text (the kinds' specs do not share one struct type, and Parquet cannot hold an empty struct).
    arrow (an IPC stream) and hf-save (`Dataset.save_to_disk`): nested structs, the specs of all kinds
    merged into one type, the members a row lacks null. A chat prompt is JSON text in every column.
    """
    dest.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        path = dest / "rows.jsonl"
        broken = '{"id": "broken", "prompt": "2+2=", "verifier": {"kind": "arith"'  # cut short: not JSON
        path.write_text("".join((broken if isinstance(r, Malformed) else json.dumps(r)) + "\n" for r in rows))
        return path
    if fmt == "csv":
        return _write_csv(dest / "rows.csv", rows)
    columnar = [_columnar(r, fmt) for r in rows]
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(columnar), dest / "rows.parquet")
        return dest / "rows.parquet"
    if fmt == "hf-files":
        import pyarrow as pa
        import pyarrow.parquet as pq

        (dest / "hub" / "data").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(columnar), dest / "hub" / "data" / "train-00000-of-00001.parquet")
        return dest / "hub"
    if fmt == "arrow":
        import pyarrow as pa

        table = pa.Table.from_pylist(columnar)
        with pa.OSFile(str(dest / "rows.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return dest / "rows.arrow"
    if fmt == "hf-save":
        import datasets

        datasets.disable_progress_bars()
        datasets.Dataset.from_list(columnar).save_to_disk(str(dest / "saved"))
        return dest / "saved"
    raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")


def _columnar(r: dict[str, Any] | Malformed, fmt: str) -> dict[str, Any]:
    text_spec = fmt in ("parquet", "hf-files")
    if isinstance(r, Malformed):  # parquet: a spec that is not JSON; arrow: a row without its prompt
        broken = row("mix", "broken", "2+2=", "arith", "4")
        if text_spec:
            broken["verifier"]["spec"] = '{"tests": ['
        else:
            broken["prompt"] = None
        r = broken
    out = {"id": r["id"], "source": r.get("source", ""), "domain": r.get("domain", "reasoning"),
           "prompt": r["prompt"] if isinstance(r["prompt"], str) or r["prompt"] is None else json.dumps(r["prompt"]),
           "verifier": {"kind": r["verifier"]["kind"], "gold": r["verifier"].get("gold", ""),
                        "payload_uri": r["verifier"].get("payload_uri", "")}}
    spec = r["verifier"].get("spec") or {}
    out["verifier"]["spec"] = (spec if isinstance(spec, str) else json.dumps(spec)) if text_spec else spec
    return out


def _write_csv(path: Path, rows: list[dict[str, Any] | Malformed]) -> Path:
    header = ["id", "source", "domain", "prompt", "verifier.kind", "verifier.gold", "verifier.spec",
              "verifier.payload_uri"]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for r in rows:
            if isinstance(r, Malformed):
                writer.writerow(["broken", "mix"])  # two fields: the header has eight
                continue
            c = _columnar(r, "parquet")
            writer.writerow([c["id"], c["source"], c["domain"], c["prompt"], c["verifier"]["kind"],
                             c["verifier"]["gold"], c["verifier"]["spec"], c["verifier"]["payload_uri"]])
    return path


def unreadable(dest: Path, fmt: str, good: list[dict[str, Any]]) -> Path:
    """A file of `fmt` that cannot be read at all: a gzip JSONL that is not gzip, an empty CSV, a
    Parquet or Arrow file cut short (for the directories: their data file)."""
    dest.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        path = dest / "rows.jsonl.gz"
        path.write_text(json.dumps(good[0]) + "\n")  # named .gz, not gzip
        return path
    if fmt == "csv":
        path = dest / "rows.csv"
        path.write_text("")
        return path
    path = write(dest, fmt, good)
    data = {"parquet": [path], "arrow": [path], "hf-files": sorted(path.rglob("*.parquet")),
            "hf-save": sorted(path.glob("*.arrow"))}[fmt]
    for f in data:
        raw = f.read_bytes()
        f.write_bytes(raw[: len(raw) * 2 // 3])
    return path
