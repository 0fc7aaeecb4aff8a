"""Streamed table readers: rows of a JSONL, Parquet, CSV file or a Hugging Face `datasets` directory.

Why streamed: a 10-million-row dataset must feed with bounded memory, and the prompt source resumes
at a row without decoding what came before. Parquet and Arrow files seek by row group / record
batch from their metadata; JSONL and CSV keep a sparse byte-offset index (one entry per `STRIDE`
rows, built in one pass, held in memory). Which library reads which format was measured
(bench/readers.py, bench/README.md): pyarrow for Parquet and Arrow, the standard library for JSONL
and CSV, since a row that does not decode must come out as its own RowError, which the batch
readers of duckdb and pyarrow cannot give.
An undecodable row yields `(row, RowError)` and the iteration goes on; a file that cannot be opened
at all raises TableError.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from m1flow.data.record import RowError
from m1flow.registry import Registry

STRIDE = 1024  # rows per index entry of the text formats
BATCH = 1024   # rows decoded at once from the columnar formats

Row = tuple[int, "dict[str, Any] | RowError"]


class TableError(ValueError):
    """A file that cannot be read at all (missing, not the format it claims, truncated metadata)."""

    def __init__(self, path: str | Path, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path, self.why = str(path), why


class Table(Protocol):
    path: Path

    def __len__(self) -> int: ...

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[Row]:
        """(row number, row dict or RowError) for rows start..stop, streamed."""


READERS: Registry[Callable[[Path], Table]] = Registry("table format")


def open_table(path: str | Path, fmt: str | None = None) -> Table:
    """The table at path; fmt (jsonl, parquet, csv, hf) defaults to what the suffix or layout says."""
    path = Path(path)
    if not path.exists():
        raise TableError(path, "no such file or directory")
    return READERS.get(fmt or detect_format(path))(path)


def detect_format(path: Path) -> str:
    if path.is_dir():
        return "hf"
    name = path.name.lower()
    for suffixes, fmt in (((".jsonl", ".jsonl.gz", ".ndjson", ".json", ".json.gz"), "jsonl"),
                          ((".parquet", ".pq"), "parquet"), ((".csv", ".csv.gz"), "csv"), ((".arrow",), "arrow")):
        if name.endswith(suffixes):
            return fmt
    raise TableError(path, f"cannot tell the format from the name: give one of {', '.join(READERS.names())}")


def _bounds(start: int, stop: int | None, length: int) -> tuple[int, int]:
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    return start, length if stop is None else min(stop, length)


# -- text formats: a sparse byte-offset index ------------------------------------------------------

def _open_binary(path: Path):
    """The file's bytes; gzip files seek by decompressing from the start (slow, but no row decoding)."""
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


@dataclass(frozen=True)
class _Mark:
    row: int
    offset: int  # byte offset of the row's first line
    line: int    # its line number, from 1


class _TextTable:
    """Common part of JSONL and CSV: the index, seeking to a row, counting."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._marks: list[_Mark] | None = None
        self._length = 0
        try:
            with _open_binary(path) as f:
                f.read(1)
        except (OSError, EOFError) as exc:
            raise TableError(path, f"unreadable: {exc}") from None

    def __len__(self) -> int:
        self._index()
        return self._length

    def _index(self) -> list[_Mark]:
        if self._marks is None:
            marks: list[_Mark] = []
            count = 0
            for offset, line, _ in self._records(0, 1, track=True):
                if count % STRIDE == 0:
                    marks.append(_Mark(count, offset, line))
                count += 1
            self._marks, self._length = marks, count
        return self._marks

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[Row]:
        start, stop = _bounds(start, stop, len(self))
        if start >= stop:
            return
        mark = self._index()[start // STRIDE]
        skip = start - mark.row
        for i, (_, line, record) in enumerate(self._records(mark.offset, mark.line, track=False), start=mark.row):
            if i >= stop:
                return
            if i >= mark.row + skip:
                yield i, self._decode(i, line, record)

    def _records(self, offset: int, line: int, track: bool) -> Iterator[tuple[int, int, Any]]:
        """(byte offset, first line number, raw record) from a row boundary on; without `track`
        the offsets may be left out (-1) where keeping them costs time."""
        raise NotImplementedError

    def _decode(self, row: int, line: int, record: Any) -> dict[str, Any] | RowError:
        raise NotImplementedError


@READERS.register("jsonl")
class JsonlTable(_TextTable):
    """One JSON object per line; blank lines are not rows."""

    def _records(self, offset: int, line: int, track: bool) -> Iterator[tuple[int, int, bytes]]:
        with _open_binary(self.path) as f:
            f.seek(offset)
            if offset == 0:
                head = f.read(64).lstrip()
                if head.startswith(b"["):
                    raise TableError(self.path, "a JSON array is not streamed: write one object per line (JSONL)")
                f.seek(0)
            for raw in f:
                if not raw.isspace():
                    yield offset, line, raw
                offset += len(raw)
                line += 1

    def _decode(self, row: int, line: int, raw: bytes) -> dict[str, Any] | RowError:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            why = f"line {line}: not JSON ({exc.msg} at column {exc.colno})" if isinstance(exc, json.JSONDecodeError) \
                else f"line {line}: not JSON ({exc})"
            return RowError(str(self.path), row, "json", why)
        if not isinstance(value, dict):
            return RowError(str(self.path), row, "json", f"line {line}: a {type(value).__name__}, not an object")
        return value


@READERS.register("csv")
class CsvTable(_TextTable):
    """A header line, then one row per record (quoted fields may span lines). Empty cells are ''."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        with _open_binary(path) as f:
            first = f.readline()
            self._data_offset = len(first)
        try:
            self.header = next(csv.reader([first.decode("utf-8-sig")]))
        except (StopIteration, UnicodeDecodeError, csv.Error) as exc:
            raise TableError(path, f"no readable CSV header: {exc!r}") from None
        if not self.header or not any(self.header):
            raise TableError(path, "empty CSV header")

    def _records(self, offset: int, line: int, track: bool) -> Iterator[tuple[int, int, list[str] | Exception]]:
        if offset == 0:
            offset, line = self._data_offset, 2
        with _open_binary(self.path) as f:
            f.seek(offset)
            pos = [offset, line]

            def tracked() -> Iterator[str]:
                for raw in f:
                    pos[0] += len(raw)
                    pos[1] += 1
                    yield raw.decode("utf-8", errors="replace")

            text = tracked() if track else io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline="")
            reader = csv.reader(text)
            while True:
                begin, first_line = (pos[0], pos[1]) if track else (-1, line + reader.line_num)
                try:
                    fields = next(reader)
                except StopIteration:
                    return
                except csv.Error as exc:
                    fields = exc
                if fields == []:  # a blank line
                    continue
                yield begin, first_line, fields

    def _decode(self, row: int, line: int, fields: list[str] | Exception) -> dict[str, Any] | RowError:
        if isinstance(fields, Exception):
            return RowError(str(self.path), row, "csv", f"line {line}: {fields}")
        if len(fields) != len(self.header):
            return RowError(str(self.path), row, "csv",
                            f"line {line}: {len(fields)} fields, the header has {len(self.header)}")
        return dict(zip(self.header, fields))


# -- columnar formats: seek by row group / record batch -------------------------------------------

@READERS.register("parquet")
class ParquetTable:
    """Row groups from the footer: rows(start) reads from the group holding `start`, memory-mapped."""

    def __init__(self, path: Path) -> None:
        import pyarrow.parquet as pq

        self.path = path
        try:
            self._file = pq.ParquetFile(path, memory_map=True)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds for a bad file
            raise TableError(path, f"not a readable Parquet file: {exc}") from None
        meta = self._file.metadata
        self._starts = [0]
        for i in range(meta.num_row_groups):
            self._starts.append(self._starts[-1] + meta.row_group(i).num_rows)

    def __len__(self) -> int:
        return self._starts[-1]

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[Row]:
        import bisect

        start, stop = _bounds(start, stop, len(self))
        group = bisect.bisect_right(self._starts, start) - 1
        while start < stop and group < len(self._starts) - 1:
            first, end = self._starts[group], self._starts[group + 1]
            try:
                batches = self._file.iter_batches(batch_size=BATCH, row_groups=[group])
                yield from _batch_rows(batches, first, start, stop)
            except Exception as exc:  # noqa: BLE001 - a corrupt group: its rows are bad, the others are not
                for row in range(start, min(end, stop)):
                    yield row, RowError(str(self.path), row, "parquet", f"row group {group} unreadable: {exc}")
            start, group = end, group + 1


def _batch_rows(batches: Any, first: int, start: int, stop: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """Rows start..stop of record batches whose first row is `first`; skipped batches are not decoded."""
    at = first
    for batch in batches:
        end = at + batch.num_rows
        if end > start:
            lo, hi = max(start - at, 0), min(stop, end) - at
            for i, row in enumerate(batch.slice(lo, hi - lo).to_pylist(), start=at + lo):
                yield i, row
        at = end
        if at >= stop:
            return


@READERS.register("arrow")
class ArrowStreamTable:
    """An Arrow IPC stream file (what `datasets` writes), memory-mapped; batch offsets counted once."""

    def __init__(self, path: Path) -> None:
        import pyarrow as pa

        self.path = path
        self._starts = [0]
        try:
            with pa.memory_map(str(path)) as source:
                try:
                    reader = pa.ipc.open_stream(source)
                except pa.ArrowInvalid:
                    source.seek(0)
                    reader = pa.ipc.open_file(source)
                    self._stream = False
                else:
                    self._stream = True
                for batch in _batches(reader):
                    self._starts.append(self._starts[-1] + batch.num_rows)
        except Exception as exc:  # noqa: BLE001
            raise TableError(path, f"not a readable Arrow file: {exc}") from None

    def __len__(self) -> int:
        return self._starts[-1]

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[Row]:
        import pyarrow as pa

        start, stop = _bounds(start, stop, len(self))
        if start >= stop:
            return
        with pa.memory_map(str(self.path)) as source:
            reader = pa.ipc.open_stream(source) if self._stream else pa.ipc.open_file(source)
            yield from _batch_rows(_batches(reader), 0, start, stop)


def _batches(reader: Any) -> Iterator[Any]:
    if hasattr(reader, "num_record_batches"):  # the random-access file format
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
    else:
        yield from reader


class ConcatTable:
    """Several tables read as one, row numbers running on (a HF directory of data files)."""

    def __init__(self, path: Path, parts: list[Table]) -> None:
        self.path, self.parts = path, parts
        self._starts = [0]
        for part in parts:
            self._starts.append(self._starts[-1] + len(part))

    def __len__(self) -> int:
        return self._starts[-1]

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[Row]:
        start, stop = _bounds(start, stop, len(self))
        for part, first, end in zip(self.parts, self._starts, self._starts[1:]):
            if end <= start or first >= stop:
                continue
            for i, row in part.rows(max(start - first, 0), min(stop, end) - first):
                yield i + first, row


@READERS.register("hf")
def open_hf(path: Path, split: str = "train") -> Table:
    """A `datasets` directory: save_to_disk of a Dataset (state.json) or a DatasetDict (its `train`
    split, else the first), or a folder of data files (`data/train-*.parquet`, ...: the train files
    when some are named so, else all), read in name order."""
    if not path.is_dir():
        raise TableError(path, "not a directory: the hf format reads a datasets directory")
    if (path / "dataset_dict.json").exists():
        try:
            splits = json.loads((path / "dataset_dict.json").read_text())["splits"]
        except (ValueError, KeyError) as exc:
            raise TableError(path, f"unreadable dataset_dict.json: {exc!r}") from None
        chosen = split if split in splits else splits[0]
        return open_hf(path / chosen, split)
    if (path / "state.json").exists():
        try:
            files = [path / f["filename"] for f in json.loads((path / "state.json").read_text())["_data_files"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise TableError(path, f"unreadable state.json: {exc!r}") from None
        missing = [f.name for f in files if not f.exists()]
        if missing:
            raise TableError(path, f"state.json names missing data files: {', '.join(missing)}")
        return ConcatTable(path, [ArrowStreamTable(f) for f in files])
    files = sorted(f for f in path.rglob("*") if f.is_file() and _is_data_file(f))
    if not files:
        raise TableError(path, "no data files (parquet, arrow, jsonl, csv) and no save_to_disk state.json")
    wanted = [f for f in files if split in f.relative_to(path).as_posix()]
    return ConcatTable(path, [open_table(f) for f in (wanted or files)])


def _is_data_file(path: Path) -> bool:
    if path.name.startswith(".") or path.name in {"dataset_info.json", "state.json", "dataset_dict.json"}:
        return False
    try:
        detect_format(path)
    except TableError:
        return False
    return True


def read_all(table: Table) -> list[Row]:
    """Every row (tests and small files only)."""
    return list(table.rows())


__all__ = ["READERS", "STRIDE", "ArrowStreamTable", "ConcatTable", "CsvTable", "JsonlTable", "ParquetTable",
           "Table", "TableError", "detect_format", "open_table", "read_all"]
