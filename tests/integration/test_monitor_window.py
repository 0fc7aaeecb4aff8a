"""svc_monitor over a real broker: rollouts pushing against the output window move it one stage per
satisfied condition, a collapse pattern raises the alert and holds the stage, and a low
train/inference correlation raises the precision alert."""
from __future__ import annotations

import json
import random

import pytest

from m1flow.bus import Producer, codec
from m1flow.bus.topics import METRICS, PROMPTS, ROLLOUTS
from m1flow.contracts import events
from ops.stack import Stack
from svc_monitor.client import report

from tests.integration.helpers import records, wait_for

STAGES = [8, 12, 16, 24]
PER_WINDOW = 64
MONITOR_ARGS = ["--window", json.dumps({"stages": STAGES, "window_rollouts": PER_WINDOW, "ppl_windows": 2}),
                "--ops", json.dumps({"interval_s": 1.0, "no_progress_s": 3.0}),
                "--precision", json.dumps({"threshold": 0.95})]


class RolloutSource:
    """Stands in for svc_rollout: generates under the window `control` sets, with the lengths asked."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.producer = Producer(bootstrap, "test-rollouts")
        self.window = STAGES[0]
        self.windows_set: list[int] = []
        self.rng = random.Random(0)
        self.sent = 0

    def settle(self) -> None:
        """Wait until the monitor evaluated every window sent, then follow `control` as it stands."""
        want = self.sent // PER_WINDOW
        wait_for(lambda: windows_evaluated(self.bootstrap) >= want, 60, f"the monitor to evaluate {want} windows",
                 0.3)
        self.windows_set = [c["set_window"]["max_new_tokens"] for c in control_log(self.bootstrap)
                            if "set_window" in c]
        self.window = self.windows_set[-1] if self.windows_set else STAGES[0]

    def rollout(self, near: bool, collapse: bool) -> events.Rollout:
        w, rng = self.window, self.rng
        length = rng.randint(w // 2, w) if near else rng.randint(1, w // 3)
        tokens = [rng.randrange(1000) for _ in range(length)]
        finish = events.FINISH_REASON_LENGTH if length == w else events.FINISH_REASON_STOP
        if collapse and rng.random() < 0.5:  # garbled, repetitive tails, cut by the repetition guard
            tokens = tokens[:2] + [7, 8, 9] * ((length - 2) // 3)
            finish = events.FINISH_REASON_REPETITION
        self.sent += 1
        rid = f"r{self.sent}"
        return events.Rollout(header=codec.header("rollout", message_id=rid, policy_version=self.sent // PER_WINDOW),
                              rollout_id=rid, group_id=f"g{self.sent // 8}", index=self.sent % 8, token_ids=tokens,
                              logprobs=[rng.gauss(-1.0, 0.05) for _ in tokens], finish_reason=finish,
                              policy_version=self.sent // PER_WINDOW, max_new_tokens=w,
                              verifier=events.VerifierSpec(kind="arith"))

    def window_of(self, near: bool, collapse: bool = False) -> None:
        for _ in range(PER_WINDOW):
            msg = self.rollout(near, collapse)
            self.producer.send(ROLLOUTS, msg.group_id, msg)
        self.producer.flush()
        self.settle()

    def until_window(self, target: int, near: bool, max_windows: int = 8) -> None:
        for _ in range(max_windows):
            self.window_of(near)
            if self.window == target:
                return
        raise AssertionError(f"window never became {target}; set so far: {self.windows_set}")


def windows_evaluated(bootstrap: str) -> int:
    """Windows of rollouts the monitor evaluated: it reports `window/hit_window` for every one."""
    return sum(1 for r in records(bootstrap, "metrics") if r["value"]["name"] == "monitor/window/hit_window")


def control_log(bootstrap: str) -> list[dict]:
    return [r["value"] for r in records(bootstrap, "control")]


@pytest.fixture(scope="module")
def monitor(tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp("monitor-stack"), service_args={"monitor": MONITOR_ARGS})
    try:
        stack.start(with_demo_policy=False, services=("monitor",))
        yield stack
    finally:
        stack.stop()


def test_window_moves_one_stage_per_satisfied_condition_and_holds_on_collapse(monitor):
    source, address = RolloutSource(monitor.bootstrap), monitor.get("monitor").grpc_address
    source.until_window(12, near=True)  # near the window, perplexity steady: 8 -> 12
    for _ in range(4):  # far from the new window: perplexity is steady but nothing moves
        source.window_of(near=False)
    assert source.windows_set == [12]
    source.until_window(16, near=True)  # the next condition: one more stage
    assert source.windows_set == [12, 16]

    for _ in range(2):  # a healthy baseline at 16, then the collapse pattern, pushing against the window
        source.window_of(near=False)
    for _ in range(5):
        source.window_of(near=True, collapse=True)
    assert any(a.kind == "pattern_collapse" and a.active for a in report(address).alert_log)
    assert source.windows_set == [12, 16]  # held: near and converged, but collapsing
    source.until_window(24, near=True)  # healthy again: the alert resolves and the stage moves on
    assert not any(a.active for a in report(address).alert_log if a.kind == "pattern_collapse")

    commands = [c for c in control_log(monitor.bootstrap) if "set_window" in c]
    assert [c["set_window"]["max_new_tokens"] for c in commands] == [12, 16, 24]
    first = commands[0]["evidence"]
    assert first["rule"] == "window_stage" and first["decided_by"] == "svc_monitor"
    assert first["signals"]["window/p99_length"] >= first["thresholds"]["window/p99_length"] == pytest.approx(0.9 * 8)
    assert first["signals"]["window/perplexity_change"] <= first["thresholds"]["window/perplexity_change"]
    rep = report(address)
    assert rep.window == 24 and rep.stage == 3
    assert [d.max_new_tokens for d in rep.decisions if d.command == "set_window"] == [24, 16, 12]  # newest first
    alerts = [r["value"] for r in records(monitor.bootstrap, "metrics") if r["value"]["name"] == "monitor/alert"
              and r["value"]["labels"]["kind"] == "pattern_collapse"]
    assert [a.get("value", 0.0) for a in alerts] == [1.0, 0.0]  # raised once, resolved once


def test_low_train_inference_correlation_raises_the_precision_alert(monitor):
    producer, address = Producer(monitor.bootstrap, "test-learner"), monitor.get("monitor").grpc_address
    for step, value in enumerate([0.995, 0.993, 0.91]):
        producer.send(METRICS, "learner", events.Metric(header=codec.header("learner"), service="learner",
                                                        name="learner/train_infer_corr", value=value, step=step))
    producer.flush()
    wait_for(lambda: any(a.kind == "precision" and a.active for a in report(address).alert_log), 30,
             "the precision alert")
    (alert,) = [a for a in report(address).alert_log if a.kind == "precision"]
    assert alert.severity == "critical" and alert.evidence.version_to == 2
    assert alert.evidence.signals["learner/train_infer_corr"] == pytest.approx(0.91)
    assert alert.evidence.thresholds["learner/train_infer_corr"] == 0.95


def test_people_steer_through_the_cli_and_the_monitor_follows(monitor, capsys):
    from ops.cli import main

    address = monitor.get("monitor").grpc_address
    base = ["--bootstrap", monitor.bootstrap]
    assert main([*base, "control", "window", "12", "--reason", "back off"]) == 0
    for action in ("recalibrate", "pause", "resume"):
        assert main([*base, "control", action]) == 0
    wait_for(lambda: len([d for d in report(address).decisions if d.evidence.rule == "manual"]) == 4, 30,
             "the monitor to record the commands")
    rep = report(address)
    assert rep.window == 12 and rep.stage == 1  # the next advance starts from the window a person set
    manual = [d for d in rep.decisions if d.evidence.rule == "manual"]
    assert [d.command for d in manual] == ["resume", "pause", "recalibrate", "set_window"]
    assert manual[-1].max_new_tokens == 12 and manual[-1].reason == "back off"
    assert all(d.evidence.decided_by.startswith("cli:") for d in manual)
    assert monitor_state(monitor)["length_bias"]["phase"] == "cooldown"  # a manual recalibration counts

    capsys.readouterr()
    assert main([*base, "report", "--monitor", address]) == 0
    out = capsys.readouterr().out
    assert "output window 12 (stage 1)" in out and "set_window 12 by cli:" in out
    assert "precision/learner" in out and "dashboard http://127.0.0.1:" in out
    with pytest.raises(SystemExit):
        main([*base, "control", "window", "-3"])
    assert "between 1 and" in capsys.readouterr().err


def monitor_state(stack: Stack) -> dict:
    from svc_monitor.controller import STATE_KEY
    from svc_monitor.store import Store

    store = Store(f"sqlite:///{stack.run_dir / 'monitor.db'}")
    try:
        return store.get_state(STATE_KEY)
    finally:
        store.close()


def test_a_consumer_group_with_lag_that_stops_committing_raises_no_progress(monitor):
    from kafka import KafkaConsumer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    address, group = monitor.get("monitor").grpc_address, "m1flow-stuck-test"
    producer = Producer(monitor.bootstrap, "test-prompts")
    for i in range(3):
        producer.send(PROMPTS, f"p{i}", events.Prompt(header=codec.header("test"), prompt_id=f"p{i}"), partition=0)
    producer.flush()
    consumer = KafkaConsumer(bootstrap_servers=monitor.bootstrap, group_id=group, enable_auto_commit=False)
    part = TopicPartition("prompts", 0)

    def commit(offset: int) -> None:
        consumer.commit({part: OffsetAndMetadata(offset, "", -1)})

    try:
        commit(1)  # took one record, then hangs with two waiting
        wait_for(lambda: any(a.kind == "no_progress" and a.subject == group and a.active
                             for a in report(address).alert_log), 30, "the no-progress alert")
        (alert,) = [a for a in report(address).alert_log if a.subject == group]
        assert alert.severity == "critical" and alert.evidence.signals["lag"] >= 2
        assert report(address).signals[f"ops/lag[{group}]"] >= 2
        commit(3)  # catches up
        wait_for(lambda: not any(a.active for a in report(address).alert_log if a.subject == group), 30,
                 "the alert to resolve")
    finally:
        consumer.close()
