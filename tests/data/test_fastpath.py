"""The one-pass check (m1flow.data.fastpath) accepts only rows the importer and the schemas accept,
and gives them the same prompt bytes: on every row of the fixture files, good and bad, and on rows
mutated field by field into the odd values files hold."""
from __future__ import annotations

import copy
import itertools
from pathlib import Path

import pytest

from m1flow.data.dataset import DatasetConfig, open_source
from m1flow.data.fastpath import quick_body
from m1flow.data.importers import IMPORTERS, ImportContext, import_row
from m1flow.data.readers import open_table
from m1flow.prompt_wire import BodyWriter
from m1flow.source import prompt_bodies, prompt_body

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "data"
FILES = sorted(p for p in FIXTURES.iterdir() if p.suffix in (".jsonl", ".parquet", ".csv") and p.name != "truncated.parquet")
CTX = ImportContext(source="fx", path="fx.jsonl")


def slow(row: dict, index: int = 3, ctx: ImportContext = CTX, group_size: int = 8):
    """The importer's path: (prompt id, body), or the error's text."""
    item = import_row(IMPORTERS.get("auto"), row, index, ctx)
    if isinstance(item, Exception):
        return f"error: {item}"
    try:
        return prompt_body(item, group_size, ctx.path, index)
    except ValueError as exc:
        return f"error: {exc}"


def agrees(row: dict, index: int = 3, ctx: ImportContext = CTX) -> bool | None:
    """True: the quick pass gave the slow path's bytes; None: it deferred; False: it disagreed."""
    quick = quick_body(copy.deepcopy(row), index, ctx.source, BodyWriter(8), ctx.domain)
    if quick is None:
        return None
    return quick == slow(copy.deepcopy(row), index, ctx)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_fixture_row_gets_what_the_slow_path_gives(path):
    rows = [r for _, r in open_table(path).rows() if isinstance(r, dict)]
    verdicts = [agrees(r) for r in rows]
    assert False not in verdicts
    for r, v in zip(rows, verdicts):
        if v is None:
            continue
        assert not str(slow(r)).startswith("error")  # accepted: the slow path accepts it too


def test_the_quick_pass_takes_the_common_rows_and_defers_the_rest():
    mixed = [r for _, r in open_table(FIXTURES / "mixed.jsonl").rows()]
    taken = {r["verifier"]["kind"] for r in mixed if agrees(r)}
    assert {"arith", "math"} <= taken  # it does take the kinds most rows are
    assert not any(agrees(r) for _, r in open_table(FIXTURES / "gsm8k_verl.parquet").rows())  # verl rows: importer


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_files_bodies_and_errors_match_record_by_record(path):
    source = open_source(DatasetConfig(path=str(path), name="fx"))
    fast = list(prompt_bodies(source, 0, len(source), 8, str(path)))
    expected = []
    for row, item in source.records(0, len(source)):
        if isinstance(item, Exception):
            expected.append((row, f"{type(item).__name__}: {item}"))
            continue
        try:
            expected.append((row, prompt_body(item, 8, str(path), row)))
        except ValueError as exc:
            expected.append((row, f"{type(exc).__name__}: {exc}"))
    got = [(row, f"{type(x).__name__}: {x}" if isinstance(x, Exception) else x) for row, x in fast]
    assert got == expected


ODD = [None, "", " ", 0, 7, -3, True, 1.5, [], {}, "{", "[1]", " {\"a\": 1}", "-12", "1e3", "\u0663", "12\n", "x" * 300,
       "caf\u00e9", "\ud800", [{"role": "user", "content": "hi"}], [{"role": "system", "content": "s"}],
       [{"role": "user", "content": ""}], [{"role": "user", "content": "a", "extra": 1}], {"style": "boxed"},
       {"style": "latex"}, {"style": None}, {"candidates": ["a", "b"]}, {"candidates": [1]}, {"x": {"y": None}},
       {"x": b"bytes"}, "math", "arith", "genrm", "code", "logic:sudoku", "reasoning", "general"]
BASE = [
    {"id": "a1", "source": "s", "prompt": "47+38=", "verifier": {"kind": "arith", "gold": "85"}},
    {"id": "m1", "source": "s", "prompt": "What is 6*7?", "verifier": {"kind": "math", "gold": "42", "spec": {}},
     "domain": "reasoning", "difficulty": 0.5, "license": "MIT"},
    {"id": "g1", "prompt": [{"role": "system", "content": "be kind"}, {"role": "user", "content": "a haiku"}],
     "verifier": {"kind": "genrm", "spec": {"candidates": ["x"]}}, "domain": "general"},
]
FIELDS = [("id",), ("source",), ("prompt",), ("domain",), ("difficulty",), ("license",), ("other",),
          ("verifier", "kind"), ("verifier", "gold"), ("verifier", "spec"), ("verifier", "payload_uri"),
          ("verifier", "extra"), ("verifier",)]


def mutated(row: dict, where: tuple[str, ...], value) -> dict:
    out = copy.deepcopy(row)
    node = out
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = copy.deepcopy(value)
    return out


def test_mutated_rows_are_accepted_only_when_the_slow_path_accepts_them_and_then_identically():
    taken = 0
    for base, where, value in itertools.product(BASE, FIELDS, ODD):
        row = mutated(base, where, value)
        verdict = agrees(row)
        assert verdict is not False, (row, quick_body(row, 3, "fx", BodyWriter(8)), slow(row))
        taken += bool(verdict)
        dropped = copy.deepcopy(base)
        node = dropped
        for part in where[:-1]:
            node = node[part]
        node.pop(where[-1], None)
        assert agrees(dropped) is not False, dropped
    assert taken > 50  # the pass does accept many of them: this is not a test of "always defer"


def test_the_datasets_domain_and_name_apply_as_the_importer_applies_them():
    ctx = ImportContext(source="named", path="p.jsonl", domain="general")
    for row in BASE + [{"prompt": "1+1=", "verifier": {"kind": "arith", "gold": 2}}]:
        assert agrees(row, 11, ctx) is True
