"""Streamed table readers: rows of a JSONL, Parquet, CSV file or a Hugging Face `datasets` directory.

Why streamed: a 10-million-row dataset must feed with bounded memory, and the prompt source resumes
at a row without decoding what came before. Parquet and Arrow files seek by row group / record
batch from their metadata; JSONL and CSV keep a sparse byte-offset index (one entry per `STRIDE`
rows, built in one pass, held in memory). Which library reads which format was measured
(bench/readers.py, bench/README.md): pyarrow for Parquet and Arrow, the standard library for JSONL
and CSV, since a row that does not decode must come out as its own RowError, which the batch
readers of duckdb and pyarrow cannot give.
An undecodable row yields `(row, RowError)` and the iteration goes on; a file that cannot be opened
at all raises TableError. Text that is not UTF-8 is refused in every format (a row's RowError names the
column), never read with replacement characters; damaged compressed data is a TableError naming the
line it was reached at. A directory's rows are named by their own file and row (`Table.locate`).
"""
from __future__ import annotations

import bisect
import csv
import gzip
import io
import json
import re
import zlib
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

    def locate(self, row: int) -> tuple[str, int]:
        """(the file, the row within it) of a row: a directory's rows are named by their data file."""


READERS: Registry[Callable[[Path], Table]] = Registry("table format")


def open_table(path: str | Path, fmt: str | None = None, split: str | None = None) -> Table:
    """The table at path; fmt (jsonl, parquet, csv, hf) defaults to what the suffix or layout says.
    split: which split of a directory (`open_hf`); a file is one split, so files ignore it."""
    path = Path(path)
    if not path.exists():
        raise TableError(path, "no such file or directory")
    fmt = fmt or detect_format(path)
    return READERS.get(fmt)(path, split) if fmt == "hf" else READERS.get(fmt)(path)


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


DAMAGE = (EOFError, OSError, zlib.error)  # what a truncated or corrupt (gzip) file raises while read


def _damaged(path: Path, line: int, exc: BaseException) -> TableError:
    """A file whose bytes stop making sense part-way (a cut or corrupt .gz): one line naming where."""
    what = "compressed data" if path.name.lower().endswith(".gz") else "file"
    return TableError(path, f"{what} damaged after line {line}: {exc}")


def _not_utf8(text: str) -> str:
    """Why text decoded with surrogateescape is refused: the first byte that is not UTF-8."""
    found = _ESCAPED.search(text)
    byte = ord(found.group()) - 0xDC00 if found else 0
    return f"not UTF-8 text (byte 0x{byte:02x} at character {found.start() + 1 if found else 0}): " \
           "re-save the file as UTF-8"


_ESCAPED = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, as surrogateescape keeps them


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
        except DAMAGE as exc:
            raise TableError(path, f"unreadable: {exc}") from None

    def __len__(self) -> int:
        self._index()
        return self._length

    def locate(self, row: int) -> tuple[str, int]:
        return str(self.path), row

    def _index(self) -> list[_Mark]:
        """One pass over the file (a compressed one decompressed whole): its damage shows here, as
        a TableError, before any row is used."""
        if self._marks is None:
            marks: list[_Mark] = []
            count, line = 0, 1
            try:
                for offset, line, _ in self._records(0, 1, track=True):
                    if count % STRIDE == 0:
                        marks.append(_Mark(count, offset, line))
                    count += 1
            except DAMAGE as exc:
                raise _damaged(self.path, line, exc) from None
            self._marks, self._length = marks, count
        return self._marks

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[Row]:
        start, stop = _bounds(start, stop, len(self))
        if start >= stop:
            return
        mark = self._index()[start // STRIDE]
        skip, line = start - mark.row, mark.line
        records = enumerate(self._records(mark.offset, mark.line, track=False), start=mark.row)
        try:
            for i, (_, line, record) in records:
                if i >= stop:
                    return
                if i >= mark.row + skip:
                    yield i, self._decode(i, line, record)
        except DAMAGE as exc:  # changed since it was indexed
            raise _damaged(self.path, line, exc) from None

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
        except UnicodeDecodeError:
            why = _not_utf8(raw.decode("utf-8", errors="surrogateescape"))
            return RowError(str(self.path), row, "json", f"line {line}: {why}")
        except (ValueError, RecursionError) as exc:
            why = f"line {line}: not JSON ({exc.msg} at column {exc.colno})" if isinstance(exc, json.JSONDecodeError) \
                else f"line {line}: not JSON ({exc})"
            return RowError(str(self.path), row, "json", why)
        if not isinstance(value, dict):
            return RowError(str(self.path), row, "json", f"line {line}: a {type(value).__name__}, not an object")
        return value


@READERS.register("csv")
class CsvTable(_TextTable):
    """A header line, then one row per record (quoted fields may span lines). Empty cells are ''.
    Bytes are decoded with surrogateescape, so a cell that is not UTF-8 is its row's RowError
    (naming the column) and the rows around it read on."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            with _open_binary(path) as f:
                first = f.readline()
        except DAMAGE as exc:
            raise _damaged(path, 0, exc) from None
        self._data_offset = len(first)
        try:
            self.header = next(csv.reader([first.decode("utf-8-sig")]))
        except UnicodeDecodeError:
            raise TableError(path, f"line 1: the CSV header is {_not_utf8(first.decode('utf-8', 'surrogateescape'))}") \
                from None
        except (StopIteration, csv.Error) as exc:
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
                    yield raw.decode("utf-8", errors="surrogateescape")

            text = tracked() if track else io.TextIOWrapper(f, encoding="utf-8", errors="surrogateescape", newline="")
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
        if any(map(_ESCAPED.search, fields)):  # rare: only then look for the column
            name, cell = next((n, c) for n, c in zip(self.header, fields) if _ESCAPED.search(c))
            return RowError(str(self.path), row, name, f"line {line}: {_not_utf8(cell)}")
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

    def locate(self, row: int) -> tuple[str, int]:
        return str(self.path), row

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[Row]:
        start, stop = _bounds(start, stop, len(self))
        group = bisect.bisect_right(self._starts, start) - 1
        while start < stop and group < len(self._starts) - 1:
            first, end = self._starts[group], self._starts[group + 1]
            at = start  # the first row of this group not yet yielded
            try:
                batches = self._file.iter_batches(batch_size=BATCH, row_groups=[group])
                for i, row in _batch_rows(batches, first, start, stop, self.path):
                    at = i + 1
                    yield i, row
            except Exception as exc:  # noqa: BLE001 - a corrupt group: its rows left are bad, the others are not
                for row in range(at, min(end, stop)):
                    yield row, RowError(str(self.path), row, "parquet", f"row group {group} unreadable: {exc}")
            start, group = end, group + 1


def _batch_rows(batches: Any, first: int, start: int, stop: int, path: Path) -> Iterator[Row]:
    """Rows start..stop of record batches whose first row is `first`; skipped batches are not decoded."""
    at = first
    for batch in batches:
        end = at + batch.num_rows
        if end > start:
            lo, hi = max(start - at, 0), min(stop, end) - at
            yield from _slice_rows(batch.slice(lo, hi - lo), at + lo, path)
        at = end
        if at >= stop:
            return


def _slice_rows(batch: Any, first: int, path: Path) -> Iterator[Row]:
    """A batch's rows as dicts; when a string in it is not UTF-8 (Arrow does not check on read),
    row by row, so that only the rows holding such a string are RowErrors (naming the column)."""
    try:
        rows = batch.to_pylist()
    except UnicodeDecodeError:
        for i in range(batch.num_rows):
            yield first + i, _row_of(batch, i, first + i, path)
        return
    yield from enumerate(rows, start=first)


def _row_of(batch: Any, i: int, row: int, path: Path) -> dict[str, Any] | RowError:
    out: dict[str, Any] = {}
    for name, column in zip(batch.schema.names, batch.columns):
        try:
            out[name] = column[i].as_py()
        except UnicodeDecodeError as exc:
            text = exc.object[max(exc.start - 40, 0):exc.end].decode("utf-8", errors="surrogateescape")
            return RowError(str(path), row, name, _not_utf8(text).replace(" at character", " near character"))
    return out


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

    def locate(self, row: int) -> tuple[str, int]:
        return str(self.path), row

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[Row]:
        import pyarrow as pa

        start, stop = _bounds(start, stop, len(self))
        if start >= stop:
            return
        with pa.memory_map(str(self.path)) as source:
            reader = pa.ipc.open_stream(source) if self._stream else pa.ipc.open_file(source)
            yield from _batch_rows(_batches(reader), 0, start, stop, self.path)


def _batches(reader: Any) -> Iterator[Any]:
    if hasattr(reader, "num_record_batches"):  # the random-access file format
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
    else:
        yield from reader


class ConcatTable:
    """Several tables read as one, row numbers running on (a HF directory of data files). A row's
    errors name its own file and its row there (`locate`), never a number counted across files.
    split: the split read; splits: every split found; unread: data files in no split (not read)."""

    def __init__(self, path: Path, parts: list[Table], split: str = "train", splits: tuple[str, ...] = ("train",),
                 unread: tuple[Path, ...] = ()) -> None:
        self.path, self.parts = path, parts
        self.split, self.splits, self.unread = split, splits, unread
        self._starts = [0]
        for part in parts:
            self._starts.append(self._starts[-1] + len(part))

    def __len__(self) -> int:
        return self._starts[-1]

    def locate(self, row: int) -> tuple[str, int]:
        k = min(bisect.bisect_right(self._starts, row) - 1, len(self.parts) - 1)
        return self.parts[k].locate(row - self._starts[k]) if k >= 0 else (str(self.path), row)

    def describe(self) -> str:
        """Which split was read and what was not: said once, so no file of the directory goes unread unsaid."""
        files = len(self.parts)
        other = [s for s in self.splits if s != self.split]
        text = f"{self.path}: split {self.split!r} ({files} file{'s' * (files != 1)}, {len(self)} rows)"
        if other:
            text += f"; other splits, not read: {', '.join(other)}"
        if self.unread:
            names = [p.relative_to(self.path).as_posix() for p in self.unread]
            text += f"; in no split, not read: {', '.join(names[:5])}" + (f" and {len(names) - 5} more"
                                                                         if len(names) > 5 else "")
        return text

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[Row]:
        start, stop = _bounds(start, stop, len(self))
        for part, first, end in zip(self.parts, self._starts, self._starts[1:]):
            if end <= start or first >= stop:
                continue
            for i, row in part.rows(max(start - first, 0), min(stop, end) - first):
                yield i + first, row


# -- Hugging Face directories: splits by exact name -----------------------------------------------

# `datasets`' split keywords (datasets/data_files.py): a file or folder named by one is in that split
SPLIT_KEYWORDS: dict[str, tuple[str, ...]] = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
# files of a datasets directory that describe it and are never rows
METADATA_FILES = frozenset({"dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json",
                            "readme.md", "license", "license.md", "license.txt", ".gitattributes"})
_SEP = r"[-._ 0-9]"
_IN_NAME = {split: re.compile(rf"(?:^|{_SEP})(?:{'|'.join(words)}){_SEP}", re.IGNORECASE)
            for split, words in SPLIT_KEYWORDS.items()}
_SHARD = re.compile(r"^(?P<split>\w+(?:\.\w+)*)-\d{5}-of-\d{5}\.", re.ASCII)  # data/test-00000-of-00001.parquet


@READERS.register("hf")
def open_hf(path: Path, split: str | None = None) -> Table:
    """A `datasets` directory: save_to_disk of a Dataset (state.json) or a DatasetDict
    (dataset_dict.json), or a folder of data files split as `datasets` splits them (`split_files`).
    split None: `train` if there is one, else the only split; a split that is not there, or several
    splits and no `train` without one named, is a TableError listing the splits found."""
    if not path.is_dir():
        raise TableError(path, "not a directory: the hf format reads a datasets directory")
    if (path / "dataset_dict.json").exists():
        try:
            splits = [str(s) for s in json.loads((path / "dataset_dict.json").read_text())["splits"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise TableError(path, f"unreadable dataset_dict.json: {exc!r}") from None
        chosen = choose_split(path, splits, split)
        table = open_hf(path / chosen, None)
        if isinstance(table, ConcatTable):
            table.split, table.splits = chosen, tuple(splits)
        return table
    if (path / "state.json").exists():
        return _saved_dataset(path, split)
    files = sorted(f for f in path.rglob("*") if f.is_file() and _is_data_file(f, path))
    if not files:
        raise TableError(path, "no data files (parquet, arrow, jsonl, csv) and no save_to_disk state.json")
    splits = split_files(path, files)
    chosen = choose_split(path, list(splits), split)
    in_some = {f for group in splits.values() for f in group}
    return ConcatTable(path, [open_table(f) for f in splits[chosen]], chosen, tuple(splits),
                       tuple(f for f in files if f not in in_some))


def _saved_dataset(path: Path, split: str | None) -> Table:
    """A Dataset's save_to_disk: its Arrow shards, in state.json's order; its `_split`, when set,
    must be the one asked for."""
    try:
        state = json.loads((path / "state.json").read_text())
        files = [path / f["filename"] for f in state["_data_files"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise TableError(path, f"unreadable state.json: {exc!r}") from None
    own = state.get("_split") or split or "train"
    if split is not None and own != split:
        raise TableError(path, f"no split {split!r}: this saved Dataset is split {own!r} (state.json)")
    missing = [f.name for f in files if not f.exists()]
    if missing:
        raise TableError(path, f"state.json names missing data files: {', '.join(missing)}")
    return ConcatTable(path, [ArrowStreamTable(f) for f in files], own, (own,))


def split_files(root: Path, files: list[Path]) -> dict[str, list[Path]]:
    """Split name -> its files, as `datasets` resolves a folder of data files, first rule that
    matches wins: hub shards (`data/<split>-00000-of-00001.<ext>`, any split name); a folder named
    by a split keyword (`train/`, `dev/`); a file name holding one between separators
    (`train.jsonl`, `my_test-0.csv`; never inside a word: `constraints.json` is not `train`);
    else every file is `train`. A file no split claims, when some do, is in none (not read)."""
    shards: dict[str, list[Path]] = {}
    for f in files:
        match = _SHARD.match(f.name)
        if match and f.parent in (root, root / "data"):
            shards.setdefault(match["split"], []).append(f)
    if shards:
        known = [name for name in SPLIT_KEYWORDS if name in shards]
        return {name: shards[name] for name in known + sorted(set(shards) - set(known))}
    for claim in (_split_of_folder, _split_of_name):
        found: dict[str, list[Path]] = {}
        for f in files:
            for name in claim(f.relative_to(root)):
                found.setdefault(name, []).append(f)
        if found:
            return {name: found[name] for name in SPLIT_KEYWORDS if name in found}
    return {"train": files}


def _split_of_folder(rel: Path) -> list[str]:
    parts = [p.lower() for p in rel.parts[:-1]]
    return [name for name, words in SPLIT_KEYWORDS.items() if any(p in words for p in parts)]


def _split_of_name(rel: Path) -> list[str]:
    return [name for name, pattern in _IN_NAME.items() if pattern.search(rel.name)]


def choose_split(path: Path, splits: list[str], wanted: str | None) -> str:
    """The split to read: the one asked for, else `train`, else the only one; else a TableError
    that lists what there is."""
    if wanted is not None:
        if wanted in splits:
            return wanted
        raise TableError(path, f"no split {wanted!r}: the splits here are {', '.join(splits) or 'none'}")
    if "train" in splits:
        return "train"
    if len(splits) == 1:
        return splits[0]
    raise TableError(path, f"splits {', '.join(splits)} and none is 'train': name one (--split, or `split:` "
                           "in the dataset's config)")


def _is_data_file(path: Path, root: Path) -> bool:
    """A file that may hold rows: not hidden (nor under a hidden folder, such as .git or .cache), not
    one of a datasets directory's metadata files, and of a format `detect_format` knows."""
    rel = path.relative_to(root)
    if any(part.startswith(".") for part in rel.parts) or path.name.lower() in METADATA_FILES:
        return False
    try:
        detect_format(path)
    except TableError:
        return False
    return True


def read_all(table: Table) -> list[Row]:
    """Every row (tests and small files only)."""
    return list(table.rows())


__all__ = ["METADATA_FILES", "READERS", "SPLIT_KEYWORDS", "STRIDE", "ArrowStreamTable", "ConcatTable", "CsvTable",
           "JsonlTable", "ParquetTable", "Table", "TableError", "choose_split", "detect_format", "open_table",
           "read_all", "split_files"]
