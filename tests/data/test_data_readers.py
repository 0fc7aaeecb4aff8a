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


# -- issue 38: splits by exact name, metadata never rows, non-UTF-8 refused, damage in one line ----------

def _arith(n: int, start: int = 0) -> list[dict]:
    return [{"id": str(i), "source": "s", "prompt": f"{i}+1=", "verifier.kind": "arith", "verifier.gold": str(i + 1)}
            for i in range(start, start + n)]


def test_a_folder_of_test_shards_beside_constraints_json_reads_the_40_test_rows(tmp_path):
    """The trap: 'constraints' holds 'train' as a substring; splits are exact names, so the hub's
    data/test-* shards are the one split, read whole, and constraints.json (in no split) is said unread."""
    (tmp_path / "data").mkdir()
    pq.write_table(pa.Table.from_pylist(_arith(40)), tmp_path / "data" / "test-00000-of-00001.parquet")
    (tmp_path / "constraints.json").write_text('{"max_len": 3}\n')
    (tmp_path / "dataset_infos.json").write_text('{"default": {"features": {}}}\n')
    (tmp_path / "README.md").write_text("# a card\n")
    table = open_table(tmp_path)
    assert len(table) == 40 and [r["id"] for _, r in table.rows(38)] == ["38", "39"]
    assert table.split == "test" and table.splits == ("test",)
    assert table.describe() == f"{tmp_path}: split 'test' (1 file, 40 rows); in no split, not read: constraints.json"
    assert len(open_table(tmp_path, split="test")) == 40
    with pytest.raises(TableError, match=r": no split 'train': the splits here are test$"):
        open_table(tmp_path, split="train")


@pytest.mark.parametrize("layout,expected", [
    ({"train.jsonl": 2, "test.jsonl": 3, "dataset_info.json": 1}, {"train": 2, "test": 3}),
    ({"data/train/a.jsonl": 2, "data/dev/b.jsonl": 4}, {"train": 2, "validation": 4}),
    ({"my_test-0.jsonl": 3, "constraints.jsonl": 5}, {"test": 3}),
    ({"rows.jsonl": 2, "constraints.jsonl": 5, "dataset_infos.json": 1, ".cache/x.jsonl": 9}, {"train": 7}),
    ({"data/mysplit-00000-of-00001.jsonl": 2, "train.jsonl": 1}, {"mysplit": 2}),
])
def test_split_files_by_exact_names_as_datasets_resolves_them(tmp_path, layout, expected):
    """Hub shards first (any split name), then folders, then file names with the keyword between
    separators, else one `train` split of every data file; metadata and hidden files are never rows."""
    for name, n in layout.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in _arith(n)))
    for split, n in expected.items():
        assert len(open_table(tmp_path, split=split)) == n, split
    files = sorted(f for f in tmp_path.rglob("*") if readers._is_data_file(f, tmp_path))
    assert list(readers.split_files(tmp_path, files)) == list(expected)


def test_several_splits_and_none_named_train_is_refused_listing_them(tmp_path):
    for name in ("validation.jsonl", "test.jsonl"):
        (tmp_path / name).write_text(json.dumps(_arith(1)[0]) + "\n")
    with pytest.raises(TableError, match="splits validation, test and none is 'train': name one"):
        open_table(tmp_path)
    assert len(open_table(tmp_path, split="validation")) == 1


def test_save_to_disk_splits_are_chosen_by_name_and_an_absent_one_is_refused(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    dd = datasets.DatasetDict({"validation": datasets.Dataset.from_list(_arith(2)),
                               "test": datasets.Dataset.from_list(_arith(3))})
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(TableError, match="splits validation, test and none is 'train'"):
        open_table(tmp_path / "dd")
    assert len(open_table(tmp_path / "dd", split="test")) == 3
    with pytest.raises(TableError, match="no split 'train': the splits here are validation, test"):
        open_table(tmp_path / "dd", split="train")
    dd["test"].save_to_disk(str(tmp_path / "one"))
    assert len(open_table(tmp_path / "one")) == 3
    assert len(open_source(DatasetConfig(path=str(tmp_path / "dd"), split="validation"))) == 2


def test_errors_inside_a_directory_name_the_file_and_its_row(tmp_path):
    """Not a row number counted across the directory's files: the data file and the row in it."""
    (tmp_path / "data").mkdir()
    pq.write_table(pa.Table.from_pylist(_arith(3)), tmp_path / "data" / "train-00000-of-00002.parquet")
    rows = _arith(3, start=3)
    rows[1]["verifier.gold"] = ""
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / "train-00001-of-00002.parquet")
    got = list(open_source(DatasetConfig(path=str(tmp_path))).records())
    bad = [(i, r) for i, r in got if isinstance(r, RowError)]
    second = tmp_path / "data" / "train-00001-of-00002.parquet"
    assert [i for i, _ in bad] == [4] and (bad[0][1].path, bad[0][1].row) == (str(second), 1)
    assert str(bad[0][1]).startswith(f"{second}:1: verifier.gold: ")
    assert open_table(tmp_path).locate(4) == (str(second), 1)


def test_latin1_csv_is_refused_per_row_naming_the_column_like_the_same_bytes_in_jsonl(tmp_path):
    """Never read with replacement characters: the row names file, row, column and the byte."""
    path = tmp_path / "latin1.csv"
    path.write_bytes("id,prompt,verifier.kind,verifier.gold\n1,1+1=,arith,2\n2,caf\xe9: 2+2=,arith,4\n"
                     "3,3+3=,arith,6\n".encode("latin-1"))
    rows = read_all(open_table(path))
    assert [i for i, r in rows if isinstance(r, dict)] == [0, 2]
    assert str(rows[1][1]) == (f"{path}:1: prompt: line 3: not UTF-8 text (byte 0xe9 at character 4): "
                               "re-save the file as UTF-8")
    assert list(open_table(path).rows(1, 2))[0][1].why == rows[1][1].why  # the seeking path refuses it alike
    jsonl = tmp_path / "latin1.jsonl"
    jsonl.write_bytes('{"id": "1"}\n{"id": "caf\xe9"}\n'.encode("latin-1"))
    bad = read_all(open_table(jsonl))[1][1]
    assert str(bad) == f"{jsonl}:1: json: line 2: not UTF-8 text (byte 0xe9 at character 12): re-save the file as UTF-8"
    header = tmp_path / "header.csv"
    header.write_bytes("id,pr\xe9mpt\n1,x\n".encode("latin-1"))
    with pytest.raises(TableError, match=r"line 1: the CSV header is not UTF-8 text \(byte 0xe9"):
        open_table(header)


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_string_that_is_not_utf8_in_a_columnar_file_is_its_rows_error(tmp_path, fmt):
    """Arrow does not check UTF-8 on read: the row holding such a string is a RowError naming its
    column; the rows of its batch around it are read."""
    raw = pa.array([b"1+1=", b"caf\xe9", b"2+2="], pa.binary())
    table = pa.table({"id": ["a", "b", "c"], "prompt": pa.Array.from_buffers(pa.string(), 3, raw.buffers())})
    path = tmp_path / f"t.{fmt}"
    if fmt == "parquet":
        pq.write_table(table, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    rows = read_all(open_table(path))
    assert rows[0] == (0, {"id": "a", "prompt": "1+1="}) and rows[2] == (2, {"id": "c", "prompt": "2+2="})
    assert isinstance(rows[1][1], RowError) and (rows[1][1].row, rows[1][1].field) == (1, "prompt")
    assert "not UTF-8 text (byte 0xe9" in rows[1][1].why


@pytest.mark.parametrize("name", ["t.jsonl.gz", "t.csv.gz"])
@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_gz_is_one_table_error_naming_the_line(tmp_path, name, damage):
    lines = ["id,prompt"] + [f"{i},{i}+1=" for i in range(3000)] if name.endswith("csv.gz") \
        else [json.dumps({"id": str(i), "prompt": f"{i}+1= {i * 7919 % 104729}"}) for i in range(3000)]
    raw = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / name
    path.write_bytes(raw[: len(raw) // 2] if damage == "truncated" else raw[:-8] + b"\x00" * 8)
    with pytest.raises(TableError) as info:
        len(open_table(path))
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: compressed data damaged after line ")
    assert ("ended before the end-of-stream marker" if damage == "truncated" else "CRC check failed") in message
