"""svc_monitor's curriculum over a real broker: real ScoredGroups on `scored` move the schedule (the
reasoning stage ends when accuracy plateaus, the blend's ramp raises the GenRM source's weight, a
source above its band goes up a level), each step a SetMixture with its evidence on `control`; a
restarted monitor continues from its stored stage, ramp position and levels; a person's
`m1flow control mixture` becomes the mixture the ramp goes on from."""
from __future__ import annotations

import json

import pytest

from m1flow.bus import Producer, codec
from m1flow.bus.topics import SCORED
from m1flow.contracts import events
from ops.stack import Stack
from m1flow.status import Status
from svc_monitor.client import report

from tests.integration.helpers import records, wait_for

# Samples per group; two groups per source per window: 2048 verdicts each, so that a flat accuracy is
# known to +-0.011 and the plateau rule (the upper 95% bound of the slope over 3 windows below 0.02)
# can tell it from noise: with 16 verdicts a window it rightly never would (tests/monitor/test_curriculum.py).
SIZE = 1024
CURRICULUM = {
    "window_groups": 4, "min_judged": 16,
    "stages": [{"name": "reasoning", "weights": {"arith": 1, "rg:basic_arithmetic": 1, "chat": 0},
                "until": [{"signal": "accuracy_gain", "below": 0.02, "windows": 2}]},
               {"name": "blend", "weights": {"arith": 1, "rg:basic_arithmetic": 1, "chat": 0.25},
                "ramp": {"weights": {"chat": 1}, "windows": 3}}],
    "levels": [{"source": "arith", "band": [0.3, 0.8], "min_level": 1, "max_level": 4, "consecutive": 2,
                "cooldown_windows": 0}],
}
MONITOR_ARGS = ["--curriculum", json.dumps(CURRICULUM), "--dashboard-port", "-1"]


def mixtures(bootstrap: str) -> list[dict]:
    return [r["value"] for r in records(bootstrap, "control") if "set_mixture" in r["value"]]


def windows_evaluated(bootstrap: str) -> int:
    """The monitor reports the stage in force for every window it evaluated."""
    return sum(1 for r in records(bootstrap, "metrics") if r["value"]["name"] == "monitor/curriculum/stage")


class Scorer:
    """Stands in for svc_reward: writes ScoredGroups whose verdicts give each source the accuracy asked."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.producer = Producer(bootstrap, "test-reward")
        self.sent = 0
        self.windows = 0

    def group(self, source: str, correct: int, version: int) -> events.ScoredGroup:
        self.sent += 1
        gid = f"g{self.sent}"
        g = events.ScoredGroup(header=codec.header("reward", message_id=f"scored-{gid}", policy_version=version),
                               group_id=gid, prompt_id=f"p{self.sent}", task_type="arith", group_size=SIZE,
                               verifier_kind="arith", source=source, domain="reasoning")
        for i in range(SIZE):
            g.samples.add(rollout_id=f"{gid}-{i}", index=i, reward=float(i < correct), correct=i < correct,
                          token_ids=[1, 2, 3], logprobs=[-0.1] * 3, policy_version=version, status=Status.OK)
        return g

    def window(self, arith: int, rg: int) -> None:
        """One window: two groups per source with `arith` / `rg` eighths of their samples correct;
        waits until evaluated."""
        for source, eighths in (("arith", arith), ("rg:basic_arithmetic", rg)) * 2:
            msg = self.group(source, eighths * SIZE // 8, version=self.windows)
            self.producer.send(SCORED, msg.group_id, msg)
        self.producer.flush()
        self.windows += 1
        want = self.windows
        wait_for(lambda: windows_evaluated(self.bootstrap) >= want, 60, f"the monitor to evaluate window {want}", 0.3)


@pytest.fixture(scope="module")
def monitor(tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp("curriculum-stack"), service_args={"monitor": MONITOR_ARGS})
    try:
        stack.start(with_demo_policy=False, services=("monitor",))
        yield stack
    finally:
        stack.stop()


def test_the_schedule_advances_on_real_groups_and_a_restarted_monitor_continues_it(monitor, capsys):
    bootstrap = monitor.bootstrap
    wait_for(lambda: len(mixtures(bootstrap)) == 1, 30, "the schedule's first mixture")
    (start,) = mixtures(bootstrap)
    assert start["set_mixture"]["stage"] == "reasoning" and start["evidence"]["rule"] == "curriculum_stage"
    assert start["set_mixture"]["weights"] == {"arith": 1, "rg:basic_arithmetic": 1, "chat": 0}
    assert start["set_mixture"]["levels"] == {"arith": 1} and start["evidence"]["decided_by"] == "svc_monitor"

    scorer = Scorer(bootstrap)
    scorer.window(2, 4)  # accuracy 0.25 / 0.5
    scorer.window(4, 4)  # arith +0.25: still learning; rg flat once
    scorer.window(4, 4)  # flat: arith once, rg twice
    assert len(mixtures(bootstrap)) == 1
    scorer.window(4, 4)  # arith flat twice too: the plateau ends the stage
    blend = mixtures(bootstrap)[-1]
    assert blend["set_mixture"]["stage"] == "blend" and blend["set_mixture"]["weights"]["chat"] == 0.25
    evidence = blend["evidence"]
    assert evidence["rule"] == "curriculum_stage" and evidence["windows"] == 2
    assert evidence["signals"]["accuracy_gain[arith] windows"] == 2
    assert evidence["thresholds"]["accuracy_gain[arith]<"] == 0.02
    assert evidence["signals"]["accuracy[rg:basic_arithmetic]"] == 0.5
    assert (int(evidence["version_from"]), int(evidence["version_to"])) == (3, 3)

    monitor.restart("monitor")  # continues from its stored stage and ramp position: no new start, no stage 0
    scorer.window(7, 4)  # ramp 1/3; arith above its band once
    scorer.window(7, 4)  # ramp 2/3; arith above twice: level 2
    steps = mixtures(bootstrap)[2:]
    assert [(m["evidence"]["rule"], m["set_mixture"]["weights"]["chat"], m["set_mixture"]["levels"]["arith"])
            for m in steps] == [("curriculum_ramp", 0.5, 1), ("curriculum_ramp", 0.75, 1), ("curriculum_level", 0.75, 2)]
    assert all(m["set_mixture"]["stage"] == "blend" for m in steps)
    level = steps[-1]["evidence"]
    assert level["signals"]["accuracy[arith]"] == 0.875 and level["thresholds"]["accuracy[arith]>"] == 0.8

    a_person_s_mixture_is_the_one_in_force_and_reported(monitor, scorer, capsys)


def a_person_s_mixture_is_the_one_in_force_and_reported(monitor: Stack, scorer: Scorer, capsys) -> None:
    """`m1flow control mixture` mid-ramp: the monitor takes it as the mixture in force and ramps on
    from it; `m1flow report` shows the curriculum and the decisions."""
    from ops.cli import main

    bootstrap, address = monitor.bootstrap, monitor.get("monitor").grpc_address
    base = ["--bootstrap", bootstrap]
    assert main([*base, "control", "mixture", "--weight", "chat=0.2", "--stage", "blend", "--reason", "go slower"]) == 0
    wait_for(lambda: report(address).curriculum.weights["chat"] == pytest.approx(0.2), 30,
             "the monitor to take the manual mixture as the one in force")
    rep = report(address)
    assert [d.evidence.rule for d in rep.decisions if d.command == "set_mixture"][0] == "manual"
    assert rep.curriculum.stage == "blend" and rep.curriculum.weights["chat"] == pytest.approx(0.2)
    assert rep.curriculum.levels["arith"] == 2 and rep.curriculum.windows == 6
    scorer.window(4, 4)  # the ramp goes on from the person's 0.2
    assert mixtures(bootstrap)[-1]["set_mixture"]["weights"]["chat"] == pytest.approx(0.2 + 0.8 / 3, abs=1e-6)

    capsys.readouterr()
    assert main([*base, "report", "--monitor", address]) == 0
    out = capsys.readouterr().out
    assert "curriculum: stage blend (2 of 2, 3 windows in it), 7 windows in all" in out
    assert "set_mixture (stage blend: chat=0.2) by cli:" in out and "(manual): go slower" in out
    assert "(curriculum_level, v5-5): arith accuracy 0.875 above 0.8 for 2 window(s): level 1 -> 2" in out
