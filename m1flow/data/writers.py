"""Table writers: rows written back in the format they were read from (JSONL, CSV, Parquet).

Why: a filtered dataset (`m1flow data filter`) should feed whatever read the original, so a row
goes out as the reader gave it: a JSONL row as its object, a CSV row as its cells under the same
header, a Parquet row under the source file's schema. Formats without a writer here (Arrow
streams, HF directories) are written as JSONL.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from m1flow.data.readers import CsvTable, Table, TableError, detect_format
from m1flow.registry import Registry

BATCH = 1024  # rows per Parquet row group written


class TableWriter(Protocol):
    def write(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


WRITERS: Registry[Callable[[Path, "Table | None"], TableWriter]] = Registry("table writer")


def _open_text(path: Path) -> io.TextIOBase:
    if path.name.lower().endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "wb"), encoding="utf-8", newline="")
    return open(path, "w", encoding="utf-8", newline="")


@WRITERS.register("jsonl")
class JsonlWriter:
    """One object per line (gzip when the name ends in .gz)."""

    def __init__(self, path: Path, like: Table | None = None) -> None:
        self._fh = _open_text(path)

    def write(self, row: dict[str, Any]) -> None:
        self._fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")

    def close(self) -> None:
        self._fh.close()


@WRITERS.register("csv")
class CsvWriter:
    """The header of the table the rows came from (else the first row's keys), then the rows."""

    def __init__(self, path: Path, like: Table | None = None) -> None:
        self._fh = _open_text(path)
        self._header = list(like.header) if isinstance(like, CsvTable) else None
        self._writer: csv.DictWriter | None = None

    def write(self, row: dict[str, Any]) -> None:
        if self._writer is None:
            self._writer = csv.DictWriter(self._fh, fieldnames=self._header or list(row))
            self._writer.writeheader()
        self._writer.writerow(row)

    def close(self) -> None:
        if self._writer is None and self._header:
            csv.writer(self._fh).writerow(self._header)
        self._fh.close()


@WRITERS.register("parquet")
class ParquetWriter:
    """Row groups of BATCH rows under the schema of the Parquet file the rows came from (else inferred)."""

    def __init__(self, path: Path, like: Table | None = None) -> None:
        import pyarrow.parquet as pq

        self._path = path
        self._schema = pq.ParquetFile(like.path).schema_arrow if like is not None and _is_parquet(like.path) else None
        self._rows: list[dict[str, Any]] = []
        self._writer: Any = None

    def write(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
        if len(self._rows) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(self._rows, schema=self._schema)
        if self._writer is None:
            self._schema = table.schema
            self._writer = pq.ParquetWriter(self._path, table.schema)
        self._writer.write_table(table)
        self._rows = []

    def close(self) -> None:
        if self._rows or (self._writer is None and self._schema is not None):
            self._flush()
        if self._writer is not None:
            self._writer.close()


def _is_parquet(path: Path) -> bool:
    try:
        return detect_format(path) == "parquet"
    except TableError:
        return False


def writer_format(path: Path) -> str:
    """The format a file of this name is written in: its reader's, where a writer exists, else JSONL."""
    try:
        fmt = detect_format(path) if not path.is_dir() else "hf"
    except TableError:
        return "jsonl"
    return fmt if fmt in WRITERS.names() else "jsonl"


def open_writer(path: Path, like: Table | None = None, fmt: str | None = None) -> TableWriter:
    """A writer for `path` (format from its name unless given), shaped like the table `like`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return WRITERS.get(fmt or writer_format(path))(path, like)


SUFFIXES = (".jsonl.gz", ".json.gz", ".csv.gz", ".jsonl", ".ndjson", ".json", ".parquet", ".pq", ".csv")


def sibling_path(source: Path, tag: str) -> Path:
    """`data.jsonl.gz` -> `data.<tag>.jsonl.gz`; a directory or a format without a writer -> `<name>.<tag>.jsonl`."""
    name = source.name
    suffix = next((s for s in SUFFIXES if name.lower().endswith(s)), None)
    if source.is_dir() or suffix is None:
        return source.with_name(f"{name}.{tag}.jsonl")
    return source.with_name(f"{name[:-len(suffix)]}.{tag}{name[-len(suffix):]}")


__all__ = ["WRITERS", "TableWriter", "open_writer", "sibling_path", "writer_format"]
