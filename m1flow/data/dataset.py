"""One configured source of tasks: a file read through a table and an importer, or a generator.

The prompt source service holds a list of these (with weights, for the mixture); `m1flow data
validate` opens one per file. Both see `records(start, stop)`: (row, TaskRecord or RowError), so a
bad row is reported with its file, row and field and the rest goes on.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, model_validator

from m1flow.data.importers import DEFAULT_KINDS, IMPORTERS, ImportContext, Importer, import_row
from m1flow.data.readers import Table, open_table
from m1flow.data.record import RowError, SpecError, TaskRecord

__all__ = ["DEFAULT_KINDS", "DatasetConfig", "FileSource", "GeneratorSource", "Labelled", "TaskSource", "label_of",
           "open_source"]


class DatasetConfig(BaseModel):
    name: str = Field("", description="source name (prompt ids are '<name>/<id>'); default: the file stem "
                                      "or the generator")
    path: str = Field("", description="a file (jsonl, parquet, csv, arrow) or a Hugging Face datasets directory")
    generator: str = Field("", description='instead of path: "arith", "general", "logic:<family>", "rg:<task>"')
    format: str | None = Field(None, description="jsonl, parquet, csv, arrow, hf; default: from the suffix / layout")
    split: str | None = Field(None, description="a directory's split, by its exact name (train, test, validation, "
                                                "or a hub shard's name); default: train, else the only one")
    importer: str = Field("auto", description="m1flow, verl, or auto (verl when rows have data_source and "
                                              "reward_model)")
    domain: Literal["reasoning", "general"] | None = Field(None, description="override the rows' domain")
    kinds: dict[str, str] = Field(default_factory=dict,
                                  description='verl data_source -> verifier kind, over DEFAULT_KINDS, '
                                              'e.g. {"my/gsm8k-copy": "math"}')
    size: int = Field(10_000, ge=1, description="generators: items per epoch")
    seed: int = Field(0, description="generators: the seed records are a function of")
    level: int | None = Field(None, description="generators: difficulty level")
    config: dict[str, Any] = Field(default_factory=dict, description="generator config (reasoning-gym task "
                                                                     "config)")
    weight: float = Field(1.0, ge=0, description="mixture weight")

    @model_validator(mode="after")
    def _one_origin(self) -> "DatasetConfig":
        if bool(self.path) == bool(self.generator):
            raise ValueError("a dataset needs exactly one of path and generator")
        return self

    @property
    def source_name(self) -> str:
        if self.name:
            return self.name
        if self.generator:
            return self.generator
        stem = Path(self.path).name
        for suffix in (".gz", ".jsonl", ".ndjson", ".json", ".parquet", ".pq", ".csv", ".arrow"):
            stem = stem.removesuffix(suffix)
        return stem


Labelled = tuple[int, "TaskRecord | RowError", str]  # (row, record or error, what to count it under;
# "" for a row that did not decode: it says nothing of where it came from)


class TaskSource(Protocol):
    name: str

    def __len__(self) -> int: ...

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, TaskRecord | RowError]]: ...

    def labelled(self, start: int = 0, stop: int | None = None) -> Iterator[Labelled]:
        """records() with the name each row is counted under in summaries (`label_of`)."""


def label_of(row: dict[str, Any] | None, item: TaskRecord | RowError, name: str) -> str:
    """What a row is counted under: a verl row's data_source (one file often holds several sets),
    else its record's source, else the source's name (a row too broken to say)."""
    data_source = row.get("data_source") if row is not None else None
    if isinstance(data_source, str) and data_source:
        return data_source
    if isinstance(item, TaskRecord):
        return item.source
    own = row.get("source") if row is not None else None
    return own if isinstance(own, str) and own else name


class FileSource:
    """Rows of a table turned into records by an importer."""

    def __init__(self, name: str, table: Table, importer: Importer, ctx: ImportContext) -> None:
        self.name, self.table, self.importer, self.ctx = name, table, importer, ctx

    def __len__(self) -> int:
        return len(self.table)

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, TaskRecord | RowError]]:
        for index, row in self.table.rows(start, stop):
            yield index, row if isinstance(row, RowError) else import_row(self.importer, row, index, self.ctx)

    def labelled(self, start: int = 0, stop: int | None = None) -> Iterator[Labelled]:
        for index, row in self.table.rows(start, stop):
            if isinstance(row, RowError):
                yield index, row, ""
            else:
                item = import_row(self.importer, row, index, self.ctx)
                yield index, item, label_of(row, item, self.name)


class GeneratorSource:
    """`size` records per epoch of a generator; record i regenerated from (seed, i, level, config)."""

    def __init__(self, cfg: DatasetConfig, tag_level: bool = False) -> None:
        from m1flow.data import generators

        self.cfg, self.name, self.tag_level = cfg, cfg.source_name, tag_level
        family, _, suffix = cfg.generator.partition(":")
        generators.GENERATORS.get(family)  # unknown generator: ValueError naming the known ones
        if family == "rg":
            from m1flow.kinds.rg import check_rg_task

            try:
                check_rg_task(suffix)
            except SpecError as exc:
                raise ValueError(f"generator {cfg.generator!r}: {exc.why}") from None
        self._generate = generators.generate

    def __len__(self) -> int:
        return self.cfg.size

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, TaskRecord | RowError]]:
        cfg = self.cfg
        for index in range(start, cfg.size if stop is None else min(stop, cfg.size)):
            try:
                record = self._generate(cfg.generator, cfg.seed, index, cfg.level, cfg.config)
            except SpecError as exc:
                yield index, RowError(f"generator:{cfg.generator}", index, exc.field, exc.why)
                continue
            except (ValueError, KeyError, TypeError) as exc:
                yield index, RowError(f"generator:{cfg.generator}", index, "generator", repr(exc))
                continue
            update: dict[str, Any] = {}
            if cfg.name and record.source != cfg.name:
                update["source"] = cfg.name
            if cfg.domain:
                update["domain"] = cfg.domain
            if self.tag_level:  # a level set at run time: item i there is another task than at the config's
                update["id"] = f"{record.id}@L{cfg.level}"
            yield index, record.model_copy(update=update) if update else record

    def labelled(self, start: int = 0, stop: int | None = None) -> Iterator[Labelled]:
        for index, item in self.records(start, stop):
            yield index, item, label_of(None, item, self.name)


def open_source(cfg: DatasetConfig, tag_level: bool = False) -> TaskSource:
    """The configured source; an unreadable file raises TableError, an unknown name ValueError.
    tag_level: a generator's record ids name its level (the prompt source's run-time levels)."""
    if cfg.generator:
        return GeneratorSource(cfg, tag_level)
    table = open_table(cfg.path, cfg.format, cfg.split)
    ctx = ImportContext(source=cfg.source_name, path=str(cfg.path), kinds=cfg.kinds, domain=cfg.domain,
                        locate=table.locate)
    return FileSource(cfg.source_name, table, IMPORTERS.get(cfg.importer), ctx)
