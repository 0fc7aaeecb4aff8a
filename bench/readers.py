"""Which library reads each task-data format fastest here: rows/s turning a 100k-row file into dicts.

    PYTHONPATH=. python bench/readers.py [--rows 100000]

Per format, m1flow's reader (m1flow.data.readers, the library it settled on) beside its peers on the
same file in the same run: duckdb (fetchmany batches), pyarrow (its JSON/CSV readers, batches),
`datasets` (load_from_disk) and the standard library. duckdb reads no Arrow IPC stream files
(what save_to_disk writes), so it has no row for hf. Also the cost of rows(start) at the last
row (seek) against reading from 0. The rows are verl-shaped gsm8k rows (nested prompt, reward_model,
extra_info), the shape a real RL set has.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from make_fixtures import verl_rows  # noqa: E402

from m1flow.data.readers import open_table  # noqa: E402

BATCH = 1024


def timed(fn: Callable[[], Iterator]) -> tuple[float, int]:
    start = time.perf_counter()
    n = sum(1 for _ in fn())
    return time.perf_counter() - start, n


def duckdb_rows(sql: str) -> Callable[[], Iterator[dict]]:
    def run() -> Iterator[dict]:
        import duckdb

        con = duckdb.connect()
        cur = con.execute(sql)
        names = [d[0] for d in cur.description]
        while batch := cur.fetchmany(BATCH):
            for values in batch:
                yield dict(zip(names, values))
        con.close()
    return run


def pyarrow_batches(open_reader: Callable[[], object]) -> Callable[[], Iterator[dict]]:
    def run() -> Iterator[dict]:
        for batch in open_reader():
            yield from batch.to_pylist()
    return run


def ours(path: Path, start: int = 0) -> Callable[[], Iterator]:
    return lambda: open_table(path).rows(start)


def stdlib_jsonl(path: Path) -> Callable[[], Iterator[dict]]:
    def run() -> Iterator[dict]:
        with open(path, "rb") as f:
            for line in f:
                yield json.loads(line)
    return run


def stdlib_csv(path: Path) -> Callable[[], Iterator[dict]]:
    def run() -> Iterator[dict]:
        with open(path, newline="") as f:
            yield from csv.DictReader(f)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    n = parser.parse_args().rows
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    rows = [verl_rows(1, seed=i)[0] for i in range(min(n, 2000))]
    rows = [{**rows[i % len(rows)], "extra_info": {**rows[i % len(rows)]["extra_info"], "index": i}} for i in range(n)]
    flat = [{"id": str(r["extra_info"]["index"]), "prompt": r["prompt"][0]["content"], "verifier.kind": "math",
             "verifier.gold": r["reward_model"]["ground_truth"]} for r in rows]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        pq.write_table(pa.Table.from_pylist(rows), d / "t.parquet", row_group_size=10_000)
        (d / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        with open(d / "t.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(flat[0]))
            w.writeheader()
            w.writerows(flat)
        import datasets

        datasets.disable_progress_bars()
        datasets.Dataset.from_list(rows).save_to_disk(str(d / "hf"))
        hf_file = next((d / "hf").glob("*.arrow"))

        cases: list[tuple[str, str, Callable[[], Iterator]]] = [
            ("parquet", "m1flow (pyarrow iter_batches)", ours(d / "t.parquet")),
            ("parquet", "duckdb read_parquet", duckdb_rows(f"SELECT * FROM read_parquet('{d}/t.parquet')")),
            ("parquet", "pyarrow read_table", pyarrow_batches(lambda: pq.read_table(d / "t.parquet").to_batches(BATCH))),
            ("parquet", "m1flow rows(last)", ours(d / "t.parquet", n - 1)),
            ("jsonl", "m1flow (stdlib json, offset index)", ours(d / "t.jsonl")),
            ("jsonl", "stdlib json.loads per line", stdlib_jsonl(d / "t.jsonl")),
            ("jsonl", "duckdb read_json", duckdb_rows(f"SELECT * FROM read_json('{d}/t.jsonl', format='newline_delimited')")),
            ("jsonl", "pyarrow.json", pyarrow_batches(lambda: pajson.read_json(d / "t.jsonl").to_batches(BATCH))),
            ("jsonl", "m1flow rows(last)", ours(d / "t.jsonl", n - 1)),
            ("csv", "m1flow (stdlib csv, offset index)", ours(d / "t.csv")),
            ("csv", "stdlib csv.DictReader", stdlib_csv(d / "t.csv")),
            ("csv", "duckdb read_csv", duckdb_rows(f"SELECT * FROM read_csv('{d}/t.csv', all_varchar=true)")),
            ("csv", "pyarrow.csv", pyarrow_batches(lambda: pacsv.read_csv(d / "t.csv").to_batches(BATCH))),
            ("hf", "m1flow (pyarrow memory-mapped stream)", ours(d / "hf")),
            ("hf", "datasets load_from_disk", lambda: iter(datasets.load_from_disk(str(d / "hf")))),
            ("hf", "m1flow rows(last)", ours(hf_file.parent, n - 1)),
        ]
        print(f"{n} rows, verl-shaped; rows/s turning each row into a dict (higher is better)")
        print(f"{'format':<8}{'reader':<40}{'seconds':>9}{'rows/s':>11}")
        for fmt, name, fn in cases:
            seconds, count = timed(fn)
            print(f"{fmt:<8}{name:<40}{seconds:>9.3f}{count / seconds:>11.0f}" + (f"   ({count} row)" if count < n else ""))


if __name__ == "__main__":
    main()
