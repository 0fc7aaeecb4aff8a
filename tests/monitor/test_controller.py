"""Windows cut from the store, and the rules' state across a restart of the monitor."""
from __future__ import annotations

import random

from svc_monitor.config import LengthBiasConfig, MonitorConfig
from svc_monitor.controller import Controller
from svc_monitor.schema import GenRMSampleRow, GroupRow
from svc_monitor.store import Batch, ScoredGroupRows, Store, now_ms

from tests.monitor.test_rules import genrm_window


def store_windows(store: Store, biased: str, first_version: int = 0) -> None:
    """One stored window of 4 GenRM groups per character of `biased` ('b' biased, 'f' fair)."""
    rng = random.Random(first_version)
    for i, c in enumerate(biased):
        rows = genrm_window(rng, c == "b", first_version + i, groups=4)
        groups: dict[str, list] = {}
        for row in rows:
            row.ts_ms = now_ms()
            groups.setdefault(row.group_id, []).append(row)
        store.write(Batch(groups=[ScoredGroupRows(GroupRow(group_id=g, policy_version=r[0].policy_version, samples=8,
                                                           reward_sum=0.0, correct=0, judged=0, length_sum=0,
                                                           kind="open", ts_ms=now_ms()), r)
                                  for g, r in groups.items()]))


def test_restart_resumes_windows_and_hysteresis_and_replays_what_was_not_saved(tmp_path):
    cfg = MonitorConfig(length_bias=LengthBiasConfig(window_groups=4, consecutive=2))
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    store_windows(store, "fb")
    first = Controller(store, cfg)
    assert first.evaluate().commands == []
    first.save()  # one biased window counted, published, saved

    store_windows(store, "b", first_version=2)
    crashed = Controller(store, cfg)  # restarted: continues the streak from the saved state
    assert crashed.length_bias.state.streak == 1
    (command,) = crashed.evaluate().commands
    assert command.command == "recalibrate" and command.evidence.version_to == 2
    # ... and dies before its command is published and its state saved: the next one decides again
    again = Controller(store, cfg)
    assert [c.command for c in again.evaluate().commands] == ["recalibrate"]
    again.save()
    resumed = Controller(store, cfg)
    assert resumed.length_bias.state.phase == "cooldown" and resumed.evaluate().commands == []
    assert resumed.cursors["genrm"] == store.last_id(GenRMSampleRow)
    store.close()


def test_stale_evidence_is_recorded_but_not_acted_on(tmp_path):
    cfg = MonitorConfig(length_bias=LengthBiasConfig(window_groups=4, consecutive=2), act_within_s=60)
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    store_windows(store, "bbb")
    with store.engine.begin() as conn:  # as if replayed from a topic written two hours ago
        conn.exec_driver_sql("UPDATE genrm_samples SET ts_ms = ts_ms - 7200000")
    out = Controller(store, cfg).evaluate()
    assert out.commands == [] and len([s for s in out.signals if s.name == "genrm/length_corr"]) == 3
    store.close()


def test_the_learners_mismatch_metrics_steer_the_correction_and_a_persons_command_resets_the_rule(tmp_path):
    from svc_monitor.actuator import control_message
    from svc_monitor.adapters import decision_row
    from svc_monitor.config import MismatchConfig
    from svc_monitor.schema import MetricRow

    cfg = MonitorConfig(mismatch=MismatchConfig(enabled=True, tighten_after=2))
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")

    def learner_steps(first: int, corr: float, kl: float, n: int) -> None:
        store.write(Batch(metrics=[MetricRow(service="learner", name=name, step=first + i, value=v, ts_ms=now_ms())
                                   for i in range(n) for name, v in (("learner/train_infer_corr", corr),
                                                                     ("learner/train_infer_k3", kl))]))

    learner_steps(0, 0.99, 0.001, 3)
    store.write(Batch(metrics=[MetricRow(service="learner", name="learner/loss", step=3, value=1.0, ts_ms=now_ms())]))
    learner_steps(3, 0.80, 0.05, 2)
    controller = Controller(store, cfg)
    (command,) = controller.evaluate().commands
    assert (command.command, command.scale, command.evidence.version_to) == ("set_correction", 0.5, 4)
    msg = control_message(command, "monitor", "run")
    assert msg.set_correction.scale == 0.5 and msg.evidence.rule == "mismatch"
    row = decision_row(msg, 4)
    assert row.command == "set_correction" and row.weights == {"scale": 0.5}
    controller.save()

    resumed = Controller(store, cfg)
    assert resumed.mismatch.state.scale == 0.5 and resumed.evaluate().commands == []
    person = decision_row(control_message(command.__class__("set_correction", "by hand", command.evidence, scale=1.0),
                                          "person", "run"), 5)
    resumed.seen([person])
    assert resumed.mismatch.state.scale == 1.0
    store.close()


def test_a_persons_correction_command_is_a_set_correction_and_nonsense_is_refused():
    import argparse

    import pytest

    from ops.control_cli import control_command, correction_scale
    from svc_monitor.adapters import decision_row

    msg = control_command("correction", "by hand", user="test", scale=0.25)
    assert msg.WhichOneof("command") == "set_correction" and decision_row(msg, 0).weights == {"scale": 0.25}
    for bad in ("0", "-1", "tight"):
        with pytest.raises(argparse.ArgumentTypeError, match="correction scale"):
            correction_scale(bad)
