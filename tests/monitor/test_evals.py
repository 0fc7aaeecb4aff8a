"""svc_eval's results in the monitor, on both store backends: one row per (run, set, version) however
often a result arrives (a restart's copy, a replay, two in one poll), the report's rows, the held-out
panel with its interval, and the curriculum's heldout_pass1 signal."""
from __future__ import annotations

import pytest

from m1flow.bus import codec
from m1flow.contracts import events
from ops.control_cli import format_report
from svc_monitor import adapters
from svc_monitor.config import MonitorConfig
from svc_monitor.controller import Controller
from svc_monitor.dashboard.figures import Figures
from svc_monitor.report import build_report
from svc_monitor.rules.curriculum import CurriculumRule
from svc_monitor.schedule import CurriculumConfig
from svc_monitor.store import Batch, Store


def result(run: str, name: str, version: int, pass1: float, ts: int = 1) -> events.EvalResult:
    r = events.EvalResult(header=codec.header("eval", message_id=f"eval:{run}/{name}/v{version}"), run_id=run,
                          set=name, policy_version=version, prompts=10, samples=4, judged=40,
                          correct=round(40 * pass1), pass1=pass1, pass1_low=max(0, pass1 - 0.1),
                          pass1_high=min(1, pass1 + 0.1), mean_length=5.0, duration_s=1.5)
    r.pass_at_k[1] = pass1
    r.pass_at_k[4] = min(1.0, 2 * pass1)
    return r


def rows(results: list[events.EvalResult], ts: int = 1) -> Batch:
    return Batch(evals=[adapters.eval_row(r, ts) for r in results])


def test_a_result_arriving_again_replaces_its_row_never_adds_one(store_url):
    store = Store(store_url)
    store.write(rows([result("r", "a", 0, 0.2), result("r", "a", 0, 0.2), result("r", "b", 0, 0.5)]))  # one poll
    store.write(rows([result("r", "a", 0, 0.2, ts=2), result("r", "a", 1, 0.3)], ts=2))  # a restart's copy
    store.write(rows([result("other", "a", 0, 0.9)]))  # another run's set of the same name
    got = [(r["run_id"], r["set_name"], r["policy_version"], r["pass1"]) for r in store.evals()]
    assert sorted(got) == [("other", "a", 0, 0.9), ("r", "a", 0, 0.2), ("r", "a", 1, 0.3), ("r", "b", 0, 0.5)]
    assert store.evals("r")[0]["pass_at_k"] == {"1": 0.2, "4": 0.4}
    assert store.latest_heldout("r") == {"a": 0.3, "b": 0.5}
    store.close()


def test_the_report_and_the_dashboard_show_each_version_with_its_interval(store_url):
    store = Store(store_url)
    store.write(rows([result("r", "sums", v, 0.1 * v) for v in range(3)]))
    cfg = MonitorConfig()
    rep = build_report(store, Controller(store, cfg), "")
    assert [(e.set, e.policy_version, e.pass_at_k[4]) for e in rep.evals] == [("sums", 0, 0.0), ("sums", 1, 0.2),
                                                                              ("sums", 2, pytest.approx(0.4))]
    text = format_report(rep)
    assert "held-out (svc_eval" in text and "0.200 [0.100, 0.300]" in text
    fig = Figures(store, cfg).heldout().to_plotly_json()
    (trace,) = fig["data"]
    assert list(trace["x"]) == [0, 1, 2] and trace["name"] == "sums"
    assert list(trace["error_y"]["array"]) == pytest.approx([0.1, 0.1, 0.1])
    assert list(trace["error_y"]["arrayminus"]) == pytest.approx([0.0, 0.1, 0.1])
    store.close()


def test_the_curriculum_can_end_a_stage_on_held_out_pass1():
    cfg = CurriculumConfig(window_groups=1, min_judged=1, stages=[
        {"name": "first", "weights": {"arith": 1}, "until": [{"signal": "heldout_pass1", "above": 0.5}]},
        {"name": "second", "weights": {"arith": 1, "other": 1}}])
    rule = CurriculumRule(cfg)
    rule.start()
    from svc_monitor.schema import GroupRow

    window = [GroupRow(group_id="g", policy_version=1, samples=4, reward_sum=1, correct=1, judged=4, length_sum=4,
                       source="arith", seq=1, ts_ms=1)]
    assert not rule.evaluate(window).commands  # no held-out result yet: no evidence
    rule.heldout = {"arith": 0.4}
    assert not rule.evaluate(window).commands
    rule.heldout = {"arith": 0.6}
    (command,) = rule.evaluate(window).commands
    assert command.stage == "second" and command.evidence.signals["heldout_pass1[arith]"] == 0.6
