"""The dashboard's data and server without a browser, on both store backends: every figure is built
from stored rows, the page and plotly.js are served from the package, unknown paths are 404."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from m1flow.contracts import events
from svc_monitor import adapters
from svc_monitor.config import MonitorConfig
from svc_monitor.dashboard import Dashboard
from svc_monitor.schema import DeadLetterRow, MetricRow, SignalRow
from svc_monitor.store import Batch, Store, now_ms

from tests.monitor.test_store import control, rollout, scored


@pytest.fixture
def filled(store_url):
    store = Store(store_url)
    at = now_ms()
    store.write(Batch(groups=[adapters.scored_group_rows(scored(f"g{v}", v, genrm=v % 2 == 0), at) for v in range(4)],
                      rollouts=[adapters.rollout_row(rollout(f"r{v}", v, [1, 2, 3][: v % 3 + 1]), at, 2)
                                for v in range(4)],
                      metrics=[MetricRow(service="learner", name="learner/train_infer_corr", step=v, value=0.99,
                                         ts_ms=at) for v in range(4)]
                      + [MetricRow(service="learner", name="learner/groups_skipped", step=v, value=v + 1,
                                   labels={"reason": "all_rewards_equal"}, ts_ms=at) for v in (1, 2)],
                      dead_letters=[DeadLetterRow(ts_ms=at, consumer_group="m1flow-reward", source_topic="rollouts",
                                                  service="reward", error="bad frame")],
                      decisions=[adapters.decision_row(control("recalibrate"), 2)]))
    store.add_signals([SignalRow(ts_ms=at, name="genrm/length_corr", value=0.4, version_from=0, version_to=3),
                       SignalRow(ts_ms=at, name="ops/lag", subject="m1flow-reward", value=5),
                       SignalRow(ts_ms=at + 1, name="ops/lag", subject="m1flow-reward", value=7)])
    yield store
    store.close()


def test_every_figure_is_built_from_the_store(filled):
    cfg = MonitorConfig()
    dashboard = Dashboard(filled, cfg, lambda: {"window": 8, "stage": 0})
    data = dashboard.figures.build()
    dashboard.server.server_close()
    figures = data["figures"]
    points = {k: sum(len(t.get("x", [])) for t in f["data"]) for k, f in figures.items()}
    assert points["reward"] == 4 and points["length"] == 4 * 4  # mean, p50, p99, window per version
    assert points["genrm"] == 1 and points["precision"] == 4 and points["lag"] == 2
    skipped = {t["name"]: t["y"] for t in figures["skipped"]["data"]}
    assert skipped == {"scored": [1, 2, 3, 4], "skipped: all_rewards_equal": [2, 3]}  # running counts
    assert data["status"] == {"policy_version": 3, "active_alerts": 0, "window": 8, "stage": 0}
    assert [d["command"] for d in data["decisions"]] == ["recalibrate"]
    assert filled.latest_signals() == {"genrm/length_corr": 0.4, "ops/lag[m1flow-reward]": 7}
    assert filled.dead_letters_since(0) == {"m1flow-reward": 1}
    assert filled.counts_since(0)["rollouts"] == 4


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_server_serves_page_script_and_data(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    dashboard = Dashboard(store, MonitorConfig(dashboard_refresh_s=2.5, run_id="r7"))
    url = dashboard.start()
    try:
        status, page = get(url)
        assert status == 200 and b'src="/static/plotly.min.js"' in page and b"REFRESH_MS = 2500" in page
        assert b"run r7" in page
        status, script = get(url + "static/plotly.min.js")
        assert status == 200 and len(script) > 1_000_000 and b"plotly" in script[:2000].lower()
        status, body = get(url + "api/dashboard")
        assert status == 200 and set(json.loads(body)["figures"]) >= {"reward", "genrm", "lag"}
        assert get(url + "nope")[0] == 404
    finally:
        dashboard.close()
        store.close()


def test_decisions_keep_their_evidence():
    msg = control("set_window")
    msg.set_window.max_new_tokens = 16
    msg.evidence.signals["window/p99_length"] = 15.0
    row = adapters.decision_row(msg, 4)
    assert (row.command, row.max_new_tokens, row.version) == ("set_window", 16, 4)
    assert row.evidence["signals"] == {"window/p99_length": 15.0} and isinstance(row.evidence["version_to"], int)
    assert adapters.command_of(events.Control()) == ""
