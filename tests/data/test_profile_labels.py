"""`m1flow data profile` without its services: verl rows counted per data_source in the summary,
a progress line while the file is read, a damaged file refused in one line (issue 38)."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ops.profile
from ops.profile import ProfileConfig, ProfileError, Profiler, label_lines

ROOT = Path(__file__).resolve().parents[2]


def _two_sources(tmp_path: Path) -> Path:
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_fixtures import verl_rows

    rows = verl_rows(5)
    for r in rows[3:]:
        r["data_source"] = "HuggingFaceH4/MATH-500"
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "two.parquet")
    return tmp_path / "two.parquet"


def test_the_profile_reads_its_file_with_progress_and_labels_verl_rows_by_data_source(tmp_path, monkeypatch):
    monkeypatch.setattr(ops.profile, "PROGRESS_EVERY_S", 0.0)
    said: list[str] = []
    path = _two_sources(tmp_path)
    profiler = Profiler(ProfileConfig(file=path, model=tmp_path / "model"), say=said.append)
    source = profiler._open()
    profiler.counts.total = len(source)
    assert profiler._left(source, {0}) == (4, {"math"})
    reading = [line for line in said if line.startswith(f"profile: reading {path}: ")]
    assert len(reading) == 5 and reading[-1].startswith(f"profile: reading {path}: 5/5 rows, 4 to profile, "), said
    assert profiler.labels == {0: "openai/gsm8k", 1: "openai/gsm8k", 2: "openai/gsm8k",
                               3: "HuggingFaceH4/MATH-500", 4: "HuggingFaceH4/MATH-500"}
    out = profiler.cfg.out_path()
    out.write_text("".join(json.dumps(line) + "\n" for line in [
        {"run": "r", "row": 0, "pass_rate": 0.5}, {"run": "r", "row": 1, "pass_rate": 0.0},
        {"run": "r", "row": 3, "error": "dead-lettered"}, {"run": "r", "row": 4, "pass_rate": 1.0}]))
    assert profiler.label_lines() == [
        "  HuggingFaceH4/MATH-500: 2 rows, 2 profiled (1 bad), mean pass rate 1.000",
        "  openai/gsm8k: 3 rows, 2 profiled (0 bad), mean pass rate 0.250"]
    assert label_lines({0: "a", 1: "a"}, out) == []  # one label: the summary line says it all


def test_a_damaged_file_is_one_profile_error(tmp_path):
    raw = gzip.compress("".join(json.dumps({"id": str(i), "prompt": f"{i}?"}) + "\n" for i in range(3000)).encode())
    (tmp_path / "rows.jsonl.gz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ProfileError, match=r"rows.jsonl.gz: compressed data damaged after line \d+: "):
        Profiler(ProfileConfig(file=tmp_path / "rows.jsonl.gz", model=tmp_path / "model"))._open()


def test_filter_counts_verl_rows_per_data_source(tmp_path):
    from m1flow.data import DatasetConfig
    from ops.bands import KEPT, TOO_EASY, TOO_HARD, Bands, filter_file

    path = _two_sources(tmp_path)
    profile = tmp_path / "p.jsonl"
    rates = {0: 0.5, 1: 1.0, 2: 0.0, 3: 0.5, 4: 0.25}
    ids = ["train-0", "train-1", "train-2", "train-3", "train-4"]
    profile.write_text("".join(json.dumps({"run": "r", "row": r, "id": ids[r], "pass_rate": p}) + "\n"
                               for r, p in rates.items()))
    result = filter_file(DatasetConfig(path=str(path)), profile, Bands())
    assert {s: dict(c) for s, c in result.by_source.items()} == {
        "openai/gsm8k": {KEPT: 1, TOO_EASY: 1, TOO_HARD: 1}, "HuggingFaceH4/MATH-500": {KEPT: 2}}
