"""Every reader on good and bad files; rows(start) seeks without decoding what comes before."""
from __future__ import annotations

import csv
import gzip
import json
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from m1flow.data import DatasetConfig, RowError, TableError, TaskRecord, open_source, open_table
from m1flow.data import readers
from m1flow.data.readers import read_all

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "data"
BIG = 200_000


def test_jsonl_rows_blank_lines_and_bad_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\n\n{bad\n[1]\n{"a": 4}\n')
    table = open_table(path)
    rows = read_all(table)
    assert len(table) == 4 and rows[0] == (0, {"a": 1}) and rows[3] == (3, {"a": 4})
    assert str(rows[1][1]) == f"{path}:1: json: line 3: not JSON (Expecting property name enclosed in double " \
                              "quotes at column 2)"
    assert rows[2][1].why == "line 4: a list, not an object"
    assert list(table.rows(3)) == [(3, {"a": 4})] and list(table.rows(1, 1)) == []
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert [r for _, r in read_all(open_table(gz)) if isinstance(r, dict)] == [{"a": 1}, {"a": 4}]
    (tmp_path / "arr.json").write_text('[{"a": 1}]')
    with pytest.raises(TableError, match="JSON array"):
        len(open_table(tmp_path / "arr.json"))


def test_csv_quoted_newlines_short_rows_and_seek(tmp_path):
    path = tmp_path / "t.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x", "y"])
        w.writerows([["1", "two\nlines"], ["2"], ["3", "z"]])
    table = open_table(path)
    assert len(table) == 3 and read_all(table)[0] == (0, {"x": "1", "y": "two\nlines"})
    bad = read_all(table)[1][1]
    assert isinstance(bad, RowError) and bad.field == "csv" and bad.why == "line 4: 1 fields, the header has 2"
    assert list(table.rows(2)) == [(2, {"x": "3", "y": "z"})]
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(TableError):
        open_table(tmp_path / "empty.csv")


def test_parquet_seeks_by_row_group_and_truncated_file_is_unreadable(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": list(range(2500))}), path, row_group_size=1000)
    table = open_table(path)
    assert len(table) == 2500 and list(table.rows(998, 1002)) == [(i, {"x": i}) for i in range(998, 1002)]
    assert [i for i, _ in table.rows(2499)] == [2499]
    with pytest.raises(TableError, match="not a readable Parquet file"):
        open_table(FIXTURES / "truncated.parquet")
    with pytest.raises(TableError, match="no such file"):
        open_table(tmp_path / "nope.parquet")
    (tmp_path / "t.xlsx").write_text("x")
    with pytest.raises(TableError, match="cannot tell the format"):
        open_table(tmp_path / "t.xlsx")


def test_hf_save_to_disk_dataset_dict_and_data_files(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    rows = [json.loads(line) for line in (FIXTURES / "mixed.jsonl").read_text().splitlines()]
    rows = [r for r in rows if isinstance(r["prompt"], str)]  # a column has one type: text prompts here
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"), max_shard_size="2KB")
    table = open_table(tmp_path / "ds")
    assert len(list((tmp_path / "ds").glob("*.arrow"))) > 1  # shards: rows run on across files
    got = read_all(table)
    assert len(table) == len(rows) and [r["id"] for _, r in got] == [r["id"] for r in rows]
    assert [i for i, _ in table.rows(len(rows) - 2)] == [len(rows) - 2, len(rows) - 1]
    source = open_source(DatasetConfig(path=str(tmp_path / "ds")))
    records = [r for _, r in source.records()]
    assert all(isinstance(r, TaskRecord) for r in records) and records[4].verifier.kind == "code"
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:3]),
                                   "test": datasets.Dataset.from_list(rows[3:])})
    splits.save_to_disk(str(tmp_path / "dd"))
    assert len(open_table(tmp_path / "dd")) == 3
    files = tmp_path / "hub" / "data"
    files.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows[:4]), files / "train-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(rows[4:]), files / "train-00001-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(rows[2:3]), files / "test-00000-of-00001.parquet")
    hub = open_table(tmp_path / "hub")
    assert len(hub) == len(rows) and [r["id"] for _, r in hub.rows(2, 4)] == ["logic-0", "logic-1"]
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "state.json").write_text('{"_data_files": [{"filename": "gone.arrow"}]}')
    with pytest.raises(TableError, match="missing data files"):
        open_table(tmp_path / "broken")
    (tmp_path / "void").mkdir()
    with pytest.raises(TableError, match="no data files"):
        open_table(tmp_path / "void")


def _row(i: int) -> dict:
    return {"id": str(i), "source": "big", "prompt": f"{i}+{i}=", "verifier": {"kind": "arith", "gold": str(2 * i)}}


@pytest.fixture(scope="module")
def big_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("big")
    with open(d / "big.jsonl", "w") as f:
        for i in range(BIG):
            f.write(json.dumps(_row(i)) + "\n")
    flat = {"id": [str(i) for i in range(BIG)], "prompt": [f"{i}+{i}=" for i in range(BIG)]}
    pq.write_table(pa.table(flat), d / "big.parquet", row_group_size=10_000)
    return d


@pytest.mark.parametrize("name", ["big.jsonl", "big.parquet"])
def test_rows_from_the_end_decode_only_what_they_yield_in_bounded_memory(big_files, name, monkeypatch):
    table = open_table(big_files / name)
    assert len(table) == BIG
    decoded = []
    if name.endswith(".jsonl"):
        real = readers.JsonlTable._decode
        monkeypatch.setattr(readers.JsonlTable, "_decode", lambda self, *a: decoded.append(a[0]) or real(self, *a))
    tracemalloc.start()
    try:
        tail = list(table.rows(BIG - 3))
        first, _ = next(table.rows(150_000))
        count = sum(1 for _ in table.rows())  # a whole pass, streamed
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [i for i, _ in tail] == [BIG - 3, BIG - 2, BIG - 1] and tail[-1][1]["id"] == str(BIG - 1)
    assert first == 150_000 and count == BIG
    if decoded:
        assert decoded[:4] == [BIG - 3, BIG - 2, BIG - 1, 150_000]
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.1f} MiB for a {BIG}-row file"


def test_fixture_files_read_as_records():
    for name, count in (("gsm8k_verl.parquet", 24), ("mixed.jsonl", 7), ("tasks.csv", 3)):
        source = open_source(DatasetConfig(path=str(FIXTURES / name)))
        records = [r for _, r in source.records()]
        assert len(records) == count and all(isinstance(r, TaskRecord) for r in records), records
    gsm8k = next(open_source(DatasetConfig(path=str(FIXTURES / "gsm8k_verl.parquet"))).records())[1]
    assert gsm8k.verifier.spec == {"style": "gsm8k"} and gsm8k.id == "train-0" and gsm8k.source == "gsm8k_verl"
