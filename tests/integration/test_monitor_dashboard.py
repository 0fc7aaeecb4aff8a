"""The dashboard of a real run in a real browser: the whole loop runs (learner, reward with a GenRM
judge for some prompts, rollout, monitor) while headless Chromium loads the monitor's page; every
plot renders with data (the per-source panels show both sources; the curriculum's panels its mixture
weights, per-source window accuracy and levels; the held-out panel svc_eval's results), keeps refreshing while the run goes on, and the
console stays clean. The
final page is kept as a PNG (run/test-artifacts/dashboard.png, or $M1FLOW_ARTIFACTS)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from ops.browser import (browser_paths, console_errors, headless_chromium, plot_points, refreshes,
                            screenshot_full_page, wait_rendered)
from m1flow.bus import Producer, codec
from m1flow.bus.topics import PROMPTS
from m1flow.contracts import events
from ops.feed import publish
from ops.stack import Stack
from m1flow.tasks.arith import problems
from svc_monitor.client import report

from tests.integration.helpers import wait_for

pytestmark = pytest.mark.skipif(browser_paths() is None,
                                reason="chromium/chromedriver not installed (scripts/monitor_deps.sh installs them)")
ARTIFACTS = Path(os.environ.get("M1FLOW_ARTIFACTS", Path(__file__).resolve().parents[2] / "run" / "test-artifacts"))
GROUP, BATCH = 4, 4
OPEN_SOURCE = "open-judge"  # the arith prompts name none: their task type is their source
SOURCE_TRACES_JS = "return document.getElementById('source_reward').data.map(t => t.name)"
TRACES_JS = "return document.getElementById(arguments[0]).data.map(t => t.name)"
# a schedule over the two sources the run has: one window of arithmetic alone, then the judged
# source ramped in (nothing applies it here, no svc_source runs: the panels show what was decided)
CURRICULUM = {"window_groups": 4, "min_judged": 4, "levels": [{"source": "arith", "band": [0.3, 0.8]}],
              "stages": [{"name": "reasoning", "weights": {"arith": 1, OPEN_SOURCE: 0},
                          "until": [{"signal": "stage_windows", "above": 0}]},
                         {"name": "blend", "weights": {"arith": 1, OPEN_SOURCE: 0.2},
                          "ramp": {"weights": {OPEN_SOURCE: 1}, "windows": 4}}]}
NO_DATA_HERE = {"reasons"}  # verdict reasons come from the swe kind, which this run has none of
SOURCE_TABLE_JS = ("return [...document.querySelectorAll('#sources tr')]"
                   ".map(tr => [...tr.children].map(td => td.textContent))")
SERVICE_ARGS = {
    "learner": ["--batch-groups", str(BATCH)],
    "rollout": ["--max-ahead-versions", "1"],
    "reward": ["--genrm", json.dumps({"judge": "quality", "length_bonus": 0.05, "margin": 0.01})],
    "monitor": ["--dashboard-refresh-s", "1", "--ops", json.dumps({"interval_s": 2.0}),
                "--window", json.dumps({"window_rollouts": 32}), "--length-bias", json.dumps({"window_groups": 2}),
                "--curriculum", json.dumps(CURRICULUM)],
    # the held-out panel: svc_eval on a few arithmetic prompts, every second version
    "eval": ["--eval-sets", json.dumps([{"generator": "arith", "name": "arith", "seed": 99, "prompts": 4, "samples": 2,
                                         "config": {"max_operand": 20}}]), "--every-versions", "2"],
}


def publish_open_prompts(producer: Producer, n: int, seed: int = 7) -> None:
    """Prompts the GenRM judge scores. Their text is arithmetic, the one thing the demo policy writes
    answers of varied length to (the judge here prefers longer ones)."""
    for i, problem in enumerate(problems(seed=seed, n=n, max_operand=20)):
        producer.send(PROMPTS, f"open-{seed}-{i}", events.Prompt(
            header=codec.header("test"), prompt_id=f"open-{seed}-{i}", task_type="open", text=problem.text,
            group_size=GROUP, verifier=events.VerifierSpec(kind="genrm"), source=OPEN_SOURCE, domain="general"))
    producer.flush()


def every_plot_fed(driver, producer: Producer, every_s: float = 30.0):
    """A predicate: every plot has data. While one has none, both sources get more prompts now and
    then, so a slow machine's run does not end before each panel has had its evidence."""
    seeds, last = iter(range(100, 10_000)), [time.monotonic()]

    def check() -> bool:
        if min(n for plot, n in plot_points(driver).items() if plot not in NO_DATA_HERE) > 0:
            return True
        if time.monotonic() - last[0] > every_s:
            seed = next(seeds)
            publish(producer, problems(seed=seed, n=8, max_operand=20), GROUP)
            publish_open_prompts(producer, 8, seed=seed)
            last[0] = time.monotonic()
        return False
    return check


def test_dashboard_of_a_real_run_renders_refreshes_and_stays_clean(tmp_path):
    stack = Stack(tmp_path, service_args=SERVICE_ARGS)
    try:
        stack.start(services=("learner", "reward", "rollout", "eval", "monitor"))
        producer = Producer(stack.bootstrap, "test")
        publish(producer, problems(seed=5, n=24, max_operand=20), GROUP)
        publish_open_prompts(producer, 24)
        publish(producer, problems(seed=6, n=24, max_operand=20), GROUP)
        address = stack.get("monitor").grpc_address
        wait_for(lambda: len(report(address).rows) >= 2, 180, "two policy versions in the monitor")
        url = report(address).dashboard_url
        assert url.startswith("http://127.0.0.1:")

        with headless_chromium() as driver:
            driver.get(url)
            first = wait_rendered(driver)
            seen = refreshes(driver)
            # while the run goes on the page refreshes itself and the plots grow
            wait_for(lambda: refreshes(driver) >= seen + 3 and sum(plot_points(driver).values()) > sum(first.values()),
                     120, "the page to refresh with new data")
            wait_for(every_plot_fed(driver, producer), 240, "data in every plot", detail=lambda: plot_points(driver))
            wait_for(lambda: sorted(driver.execute_script(SOURCE_TRACES_JS)) == ["arith", OPEN_SOURCE], 120,
                     "both sources in the per-source panels")
            wait_for(lambda: sorted(driver.execute_script(TRACES_JS, "mixture")) == ["arith", OPEN_SOURCE], 60,
                     "both sources' weights in the mixture panel")
            curriculum = {panel: sorted(driver.execute_script(TRACES_JS, panel))
                          for panel in ("curriculum_accuracy", "levels")}
            points = plot_points(driver)
            table = driver.execute_script(SOURCE_TABLE_JS)
            path = screenshot_full_page(driver, ARTIFACTS / "dashboard.png")
            errors = console_errors(driver)
        print(f"dashboard screenshot: {path} ({path.stat().st_size} bytes); points per plot: {points}")
        assert errors == []
        assert set(points) == {"reward", "accuracy", "length", "genrm", "collapse", "precision", "throughput", "lag",
                               "skipped", "heldout",
                               "source_reward", "source_accuracy", "source_length", "source_samples_per_min",
                               "mixture", "curriculum_accuracy", "levels", "reasons"}
        assert points["reasons"] == 0  # no kind here gives reasons: the panel is there, empty
        assert curriculum == {"curriculum_accuracy": ["arith"], "levels": ["arith"]}  # the judged source: no verdicts
        stages = [d.mixture.stage for d in report(address, max_events=100).decisions if d.command == "set_mixture"]
        assert stages[-1] == "reasoning" and "blend" in stages  # newest first: the schedule moved on
        # the per-source table: the newest version's rows, each a known source with its own kind
        assert table and all((row[1], row[2]) in {("arith", "arith"), (OPEN_SOURCE, "genrm")} for row in table), table
        assert path.stat().st_size > 20_000  # a real page, not a blank one
    finally:
        stack.stop()
