"""The monitor's per-source accounting on both store backends: source and kind per stored group,
reward, accuracy (verdicts only: partial credit is not half correct), length and samples per minute
per source and version, in the report and on the dashboard; older stores get a source on upgrade."""
from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

import svc_monitor.dashboard

from m1flow.bus import codec
from m1flow.contracts import events
from ops.control_cli import format_report
from m1flow.status import Status
from svc_monitor import adapters
from svc_monitor.config import MonitorConfig
from svc_monitor.controller import Controller
from svc_monitor.dashboard.figures import Figures
from svc_monitor.report import build_report
from svc_monitor.schema import PolicyRow
from svc_monitor.store import Batch, Store, make_engine, migrate


def group(gid: str, version: int, source: str, kind: str, rewards: list[float],
          correct: list[bool | None], task_type: str = "t") -> events.ScoredGroup:
    g = events.ScoredGroup(header=codec.header("test"), group_id=gid, task_type=task_type, source=source,
                           verifier_kind=kind, domain="reasoning")
    for i, (reward, verdict) in enumerate(zip(rewards, correct)):
        s = g.samples.add(index=i, reward=reward, token_ids=[1] * (i + 1), policy_version=version, status=Status.OK)
        if verdict is not None:
            s.correct = verdict
    return g


MINUTE = 60_000


def fill(store: Store) -> None:
    rows = [
        (group("a0", 0, "gsm8k", "math", [1.0, 0.0], [True, False]), 0),
        (group("a1", 0, "gsm8k", "math", [1.0, 1.0], [True, True]), MINUTE),
        # partial credit, no verdict on the 0.5s: reward 0.5 each, never "correct"
        (group("b0", 0, "rg:leg_counting", "rg:leg_counting", [0.5, 0.5], [None, None]), 2 * MINUTE),
        (group("b1", 1, "rg:leg_counting", "rg:leg_counting", [0.5, 1.0], [None, True]), 3 * MINUTE),
        (group("c0", 1, "", "arith", [0.0, 1.0], [False, True], task_type="arith"), 3 * MINUTE),  # no source
    ]
    store.write(Batch(groups=[adapters.scored_group_rows(g, 1_000_000 + at) for g, at in rows]))


def test_each_source_has_its_own_reward_accuracy_length_and_throughput(store_url):
    store = Store(store_url)
    fill(store)
    rows = {(r["policy_version"], r["source"], r["kind"]): r for r in store.by_source()}
    assert set(rows) == {(0, "gsm8k", "math"), (0, "rg:leg_counting", "rg:leg_counting"),
                         (1, "rg:leg_counting", "rg:leg_counting"), (1, "arith", "arith")}
    gsm = rows[(0, "gsm8k", "math")]
    assert (gsm["groups"], gsm["samples"], gsm["judged"]) == (2, 4, 4)
    assert gsm["mean_reward"] == 0.75 and gsm["accuracy"] == 0.75 and gsm["mean_length"] == 1.5
    assert gsm["samples_per_min"] == pytest.approx(4 / 2)  # version 0 arrived over 2 minutes
    partial = rows[(0, "rg:leg_counting", "rg:leg_counting")]
    assert partial["mean_reward"] == 0.5 and partial["accuracy"] is None  # 0.5 is reward, not a verdict
    assert partial["samples_per_min"] == pytest.approx(1.0)
    mixed = rows[(1, "rg:leg_counting", "rg:leg_counting")]
    assert mixed["mean_reward"] == 0.75 and mixed["accuracy"] == 1.0 and mixed["judged"] == 1
    assert mixed["samples_per_min"] is None  # version 1's groups arrived at one instant
    assert rows[(1, "arith", "arith")]["accuracy"] == 0.5  # an empty source is the task type
    by_source = {(r["policy_version"], r["source"]) for r in store.by_source(kinds=False)}
    assert by_source == {(0, "gsm8k"), (0, "rg:leg_counting"), (1, "rg:leg_counting"), (1, "arith")}
    store.close()


def test_throughput_is_over_the_time_each_version_was_the_newest_policy(store_url):
    store = Store(store_url)
    fill(store)  # version 0's groups arrive over 2 minutes, version 1's at one instant
    store.write(Batch(policies=[PolicyRow(version=0, ts_ms=1_000_000 - MINUTE),
                                PolicyRow(version=1, ts_ms=1_000_000 + 3 * MINUTE)]))
    rows = {(r["policy_version"], r["source"]): r for r in store.by_source(kinds=False)}
    assert rows[(0, "gsm8k")]["samples_per_min"] == pytest.approx(4 / 4)  # v0 was the newest for 4 minutes
    assert rows[(0, "rg:leg_counting")]["samples_per_min"] == pytest.approx(2 / 4)
    assert rows[(1, "arith")]["samples_per_min"] is None  # v1: announced when its one burst of groups came
    store.write(Batch(groups=[adapters.scored_group_rows(group("late", 1, "gsm8k", "math", [1.0], [True]),
                                                         1_000_000 + 5 * MINUTE)]))
    rows = {(r["policy_version"], r["source"]): r for r in store.by_source(kinds=False)}
    assert rows[(1, "arith")]["samples_per_min"] == pytest.approx(2 / 2)  # newest: up to its last group
    store.close()


def test_the_report_and_the_cli_show_each_source(store_url):
    store = Store(store_url)
    fill(store)
    report = build_report(store, Controller(store, MonitorConfig()), "")
    rows = {(r.policy_version, r.source): r for r in report.source_rows}
    assert rows[(0, "gsm8k")].accuracy == 0.75 and rows[(0, "gsm8k")].HasField("samples_per_min")
    assert not rows[(0, "rg:leg_counting")].HasField("accuracy")
    assert not rows[(1, "arith")].HasField("samples_per_min")
    text = format_report(report)
    assert "per source (newest 2 versions):" in text
    line = next(t for t in text.splitlines() if "rg:leg_counting" in t and t.strip().startswith("0 |"))
    assert line.split("|")[6].strip() == "-"  # accuracy: no verdict
    store.close()


def test_the_dashboard_plots_each_source_over_versions(store_url):
    store = Store(store_url)
    fill(store)
    figures = Figures(store, MonitorConfig())
    per_source = figures.per_source()
    assert set(per_source) == {"source_reward", "source_accuracy", "source_length", "source_samples_per_min"}
    traces = {t.name: list(t.x) for t in per_source["source_reward"].data}
    assert traces == {"gsm8k": [0], "rg:leg_counting": [0, 1], "arith": [1]}
    accuracy = {t.name: list(t.y) for t in per_source["source_accuracy"].data}
    assert accuracy == {"gsm8k": [0.75], "rg:leg_counting": [1.0], "arith": [0.5]}  # v0's partial credit: no point
    assert {(r["source"], r["kind"]) for r in figures.source_table()} == {("rg:leg_counting", "rg:leg_counting"),
                                                                           ("arith", "arith")}
    data = figures.build()
    assert {"source_reward", "source_samples_per_min"} <= set(data["figures"]) and len(data["sources"]) == 2
    store.close()


def test_groups_stored_before_sources_get_their_kind_as_source(store_url):
    engine = make_engine(store_url)
    migrate(engine, "0002")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO groups (group_id, policy_version, samples, reward_sum, correct, judged, "
                             "length_sum, dropped, kind, ts_ms) VALUES ('old', 3, 2, 1.0, 1, 2, 4, 0, 'math', 5)"))
    engine.dispose()
    store = Store(store_url)
    (row,) = store.by_source()
    assert (row["source"], row["kind"], row["accuracy"]) == ("math", "math", 0.5)
    store.close()


def test_verdict_reasons_are_counted_per_source_and_kind(store_url):
    """Why samples scored what they did (the swe kind's reasons) sums per source over its groups; groups
    without reasons (other kinds, older records) count nowhere."""
    store = swe_store(store_url)
    counts = {(r["source"], r["reason"]): r["samples"] for r in store.reasons_by_source()}
    assert counts == {("swe:calc", "resolved"): 1, ("swe:calc", "did_not_apply"): 2,
                      ("swe:calc", "pass_to_pass_regression"): 1, ("swe:calc", "edits_tests"): 1,
                      ("swe:toolz", "does_not_import"): 1}
    store.close()


def swe_store(store_url: str) -> Store:
    """Two swe sources with reasons, and groups of other kinds without."""
    store = Store(store_url)
    fill(store)
    swe = [group("s0", 0, "swe:calc", "swe", [1.0, 0.0, 0.0], [True, False, False]),
           group("s1", 1, "swe:calc", "swe", [0.0, 0.0], [False, False]),
           group("s2", 1, "swe:toolz", "swe", [0.0], [False])]
    for g, reasons in zip(swe, (["resolved", "did_not_apply", "pass_to_pass_regression"],
                                ["did_not_apply", "edits_tests"], ["does_not_import"])):
        for sample, reason in zip(g.samples, reasons):
            sample.reason = reason
    store.write(Batch(groups=[adapters.scored_group_rows(g, 2_000_000) for g in swe]))
    return store


def test_the_report_and_the_cli_count_each_reason_per_source(store_url):
    store = swe_store(store_url)
    report = build_report(store, Controller(store, MonitorConfig()), "")
    rows = {(r.source, r.kind, r.reason): r.samples for r in report.reason_rows}
    assert rows == {("swe:calc", "swe", "resolved"): 1, ("swe:calc", "swe", "did_not_apply"): 2,
                    ("swe:calc", "swe", "pass_to_pass_regression"): 1, ("swe:calc", "swe", "edits_tests"): 1,
                    ("swe:toolz", "swe", "does_not_import"): 1}
    text = format_report(report).splitlines()
    start = text.index("verdict reasons per source (samples, whole run):")
    calc, toolz = text[start + 2], text[start + 3]
    assert [c.strip() for c in calc.split("|")] == [
        "swe:calc", "swe", "5", "did_not_apply 2 (40%), edits_tests 1 (20%), pass_to_pass_regression 1 (20%), "
                                "resolved 1 (20%)"]
    assert [c.strip() for c in toolz.split("|")] == ["swe:toolz", "swe", "1", "does_not_import 1 (100%)"]
    assert not any("gsm8k" in line for line in text[start:start + 4])  # no reasons: not in this table
    store.close()


def test_the_dashboard_shows_each_reason_per_source(store_url):
    store = swe_store(store_url)
    figures = Figures(store, MonitorConfig())
    bars = {t.name: dict(zip(t.x, t.y)) for t in figures.reasons().data}
    assert bars["did_not_apply"] == {"swe:calc": 2, "swe:toolz": 0}
    assert bars["does_not_import"] == {"swe:calc": 0, "swe:toolz": 1} and set(bars) == {
        "resolved", "did_not_apply", "pass_to_pass_regression", "edits_tests", "does_not_import"}
    data = figures.build()
    assert "reasons" in data["figures"]
    assert data["reasons"] == [
        {"source": "swe:calc", "kind": "swe", "samples": 5,
         "reasons": {"did_not_apply": 2, "edits_tests": 1, "pass_to_pass_regression": 1, "resolved": 1}},
        {"source": "swe:toolz", "kind": "swe", "samples": 1, "reasons": {"does_not_import": 1}}]
    page = (Path(svc_monitor.dashboard.__file__).parent / "page.html").read_text()
    assert 'id="reasons"' in page and 'fillTable("reasons_table", data.reasons' in page
