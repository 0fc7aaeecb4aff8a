"""`m1flow data filter`: keep the rows whose profiled pass rate lies in a band.

Why bands: a row every sample solves, or none does, gives a group whose rewards are all equal, so
it teaches nothing (dynamic sampling skips it) and costs its sampling. The M1 report keeps math
problems whose pass@10 lies in (0, 0.9) and logic tasks by pass-rate bands; the default band here
is the report's math band, for every kind, and `KIND=LO,HI` sets another for a kind (`logic`, or
one family, `logic:sudoku`, which wins over `logic`).

A band is written `LO,HI` (open at both ends, as the report's), or with brackets saying which ends
are in: `[0.1,0.8]`, `(0,1]`. A rate below the band is too hard, one above too easy; a row without
a pass rate (no profile line, a bad row, no verdicts) is unprofiled and is dropped unless asked.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from m1flow.data import DatasetConfig, RowError, TableError, open_source
from m1flow.data.dataset import FileSource, label_of
from m1flow.data.importers import import_row
from m1flow.data.record import TaskRecord
from m1flow.data.writers import open_writer, sibling_path, writer_format
from m1flow.kinds import kind_of
from ops.profile import ProfileError, read_profile

KEPT, TOO_EASY, TOO_HARD, UNPROFILED = "kept", "too easy", "too hard", "unprofiled"
PLACES = (KEPT, TOO_EASY, TOO_HARD, UNPROFILED)
_BAND = re.compile(r"^\s*([\[(]?)\s*([^,\s\])]+)\s*,\s*([^,\s\])]+)\s*([\])]?)\s*$")


class BandError(ValueError):
    """A --band that does not parse or is empty; the message names it."""


@dataclass(frozen=True)
class Band:
    lo: float
    hi: float
    lo_closed: bool = False
    hi_closed: bool = False

    def place(self, rate: float) -> str:
        """kept, too hard (below the band) or too easy (above it)."""
        if rate < self.lo or (rate == self.lo and not self.lo_closed):
            return TOO_HARD
        if rate > self.hi or (rate == self.hi and not self.hi_closed):
            return TOO_EASY
        return KEPT

    def __str__(self) -> str:
        return f"{'[' if self.lo_closed else '('}{self.lo:g}, {self.hi:g}{']' if self.hi_closed else ')'}"


DEFAULT_BAND = Band(0.0, 0.9)  # the report's math band: 0 < pass@10 < 0.9


def parse_band(text: str) -> tuple[str, Band]:
    """`[KIND=]LO,HI` (open), or with brackets: (kind or "" for the default, band)."""
    kind, eq, spec = text.partition("=")
    if not eq:
        kind, spec = "", text
    match = _BAND.match(spec)
    if not match:
        raise BandError(f"--band {text!r}: write LO,HI (open), or [LO,HI], (LO,HI], ... optionally after KIND=")
    left, lo, hi, right = match.groups()
    if bool(left) != bool(right):
        raise BandError(f"--band {text!r}: bracket both ends or neither")
    try:
        band = Band(float(lo), float(hi), lo_closed=left == "[", hi_closed=right == "]")
    except ValueError:
        raise BandError(f"--band {text!r}: {lo!r} and {hi!r} must be numbers") from None
    if not (0.0 <= band.lo <= band.hi <= 1.0) or (band.lo == band.hi and not (band.lo_closed and band.hi_closed)):
        raise BandError(f"--band {text!r}: {band} is empty or outside [0, 1]")
    return kind.strip(), band


@dataclass(frozen=True)
class Bands:
    default: Band = DEFAULT_BAND
    by_kind: dict[str, Band] = field(default_factory=dict)

    @classmethod
    def parse(cls, texts: list[str]) -> "Bands":
        default, by_kind = DEFAULT_BAND, {}
        for text in texts:
            kind, band = parse_band(text)
            if kind:
                by_kind[kind] = band
            else:
                default = band
        return cls(default, by_kind)

    def for_kind(self, kind: str) -> Band:
        """The kind's own band, else its family's (`logic` for `logic:sudoku`), else the default."""
        return self.by_kind.get(kind) or self.by_kind.get(kind_of(kind)) or self.default

    def describe(self) -> str:
        return "; ".join([f"default {self.default}", *(f"{k} {b}" for k, b in sorted(self.by_kind.items()))])


def place(entry: dict[str, Any] | None, kind: str, bands: Bands) -> str:
    """Where a row's profile line puts it."""
    if entry is None or entry.get("pass_rate") is None:
        return UNPROFILED
    return bands.for_kind(entry.get("kind") or kind).place(float(entry["pass_rate"]))


@dataclass
class FilterResult:
    out: Path
    by_source: dict[str, Counter] = field(default_factory=dict)

    def add(self, source: str, where: str) -> None:
        self.by_source.setdefault(source, Counter())[where] += 1

    def table(self) -> str:
        width = max([len("source"), len("total"), *(len(s) for s in self.by_source)])
        lines = [f"{'source':<{width}}" + "".join(f"{p:>12}" for p in PLACES)]
        total: Counter = Counter()
        for source, counts in sorted(self.by_source.items()):
            total.update(counts)
            lines.append(f"{source:<{width}}" + "".join(f"{counts[p]:>12}" for p in PLACES))
        lines.append(f"{'total':<{width}}" + "".join(f"{total[p]:>12}" for p in PLACES))
        return "\n".join(lines)


def filter_file(dataset: DatasetConfig, profile: Path, bands: Bands, out: Path | None = None,
                keep_unprofiled: bool = False) -> FilterResult:
    """Write the rows of `dataset` that the bands keep to `out` (default `<stem>.filtered.<ext>`),
    in the input's format; ProfileError when the profile is not of this file."""
    if not profile.exists():
        raise ProfileError(f"--profile {profile}: no such file (make it with `m1flow data profile`)")
    lines = read_profile(profile)
    try:
        source = open_source(dataset)
    except (TableError, ValueError) as exc:
        raise ProfileError(str(exc).splitlines()[0]) from None
    assert isinstance(source, FileSource), "filter reads files, not generators"
    table = source.table
    result = FilterResult(out or sibling_path(Path(dataset.path), "filtered"))
    if result.out.resolve() == Path(dataset.path).resolve():
        raise ProfileError(f"--out {result.out} is the input file: write the filtered rows elsewhere")
    partial = result.out.with_name(f".partial-{result.out.name}")  # renamed into place once whole
    writer = open_writer(partial, like=table, fmt=writer_format(result.out))
    try:
        try:
            for row, raw in table.rows():
                record = raw if isinstance(raw, RowError) else import_row(source.importer, raw, row, source.ctx)
                entry = lines.get(row)
                _same_row(profile, entry, record, row)
                good = isinstance(record, TaskRecord)
                where = place(entry, record.verifier.kind if good else "", bands)
                label = label_of(raw, record, source.name) if good and isinstance(raw, dict) else \
                    (entry or {}).get("source") or source.name  # a verl row: its data_source
                result.add(label, where)
                if where == KEPT or (where == UNPROFILED and keep_unprofiled and isinstance(raw, dict)):
                    writer.write(raw)
        finally:
            writer.close()
        partial.replace(result.out)
    finally:
        partial.unlink(missing_ok=True)
    return result


def _same_row(profile: Path, entry: dict[str, Any] | None, record: TaskRecord | RowError, row: int) -> None:
    if entry is None or entry.get("id") is None or not isinstance(record, TaskRecord):
        return
    if str(entry["id"]) != record.id:
        raise ProfileError(f"{profile}: row {row} is {entry['id']!r} there but {record.id!r} in the file: "
                           "the profile was made from another file (or another version of it)")


__all__ = ["Band", "BandError", "Bands", "DEFAULT_BAND", "FilterResult", "filter_file", "parse_band", "place"]
