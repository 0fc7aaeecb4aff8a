"""The curriculum closed over the real broker, both ends real: svc_monitor decides from the groups
scored on `scored`, svc_source applies its SetMixtures. The test plays the rollout and reward
services: it answers every prompt the source publishes with a ScoredGroup of the accuracy it
chose for the prompt's source and commits the rollout group's offsets so the source's lead moves.
The reasoning stage ends on a plateau and the judged source starts being drawn under a new mixture
version; a source above its band goes up a level and its prompts are drawn at that level."""
from __future__ import annotations

import json


from m1flow.bus import Producer, codec
from m1flow.bus.topics import SCORED
from m1flow.contracts import events
from ops.stack import Stack
from ops.topics_io import read_range
from m1flow.status import Status

from tests.integration.helpers import commit_end, wait_for

ROLLOUT_GROUP = "curriculum-test-rollout"
# Samples per group: the plateau is decided with its sampling error (svc_monitor/rules/trend.py), so a
# flat accuracy must rest on enough verdicts a window (4 groups x 128) for its bound to clear 0.05.
SIZE = 128
SOURCES = [{"generator": "arith", "name": "easy", "size": 2000, "seed": 1, "weight": 1.0, "level": 1},
           {"generator": "arith", "name": "judged", "size": 2000, "seed": 2, "weight": 0.0}]
CURRICULUM = {"window_groups": 4, "min_judged": 16,
              "stages": [{"name": "reasoning", "weights": {"easy": 1, "judged": 0},
                          "until": [{"signal": "accuracy_gain", "below": 0.05, "windows": 2}]},
                         {"name": "blend", "weights": {"easy": 1, "judged": 1}}],
              "levels": [{"source": "easy", "band": [0.2, 0.9], "max_level": 3, "consecutive": 2,
                          "cooldown_windows": 0}]}


class Loop:
    """Answers the source's prompts as svc_rollout + svc_reward would, with chosen accuracies."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.producer = Producer(bootstrap, "test-reward")
        self.answered: set[str] = set()
        self.prompts: list[dict] = []
        self.correct = {"easy": SIZE // 2, "judged": SIZE // 2}  # of SIZE, per source

    def step(self) -> None:
        for rec in read_range(self.bootstrap, "prompts"):
            value = rec["value"]
            if value["prompt_id"] in self.answered:
                continue
            self.answered.add(value["prompt_id"])
            self.prompts.append(value)
            source = value["origin"]["source"]
            g = events.ScoredGroup(header=codec.header("reward"), group_id=f"g-{len(self.answered)}",
                                   prompt_id=value["prompt_id"], task_type="arith", group_size=SIZE,
                                   verifier_kind="arith", source=source, domain="reasoning")
            for i in range(SIZE):
                ok = i < self.correct[source]
                g.samples.add(index=i, reward=float(ok), correct=ok, token_ids=[1], logprobs=[-0.1],
                              policy_version=0, status=Status.OK)
            self.producer.send(SCORED, g.group_id, g)
        self.producer.flush()
        commit_end(self.bootstrap, ROLLOUT_GROUP)

    def until(self, predicate, timeout: float, what: str) -> None:  # noqa: ANN001
        wait_for(lambda: (self.step(), predicate())[1], timeout, what, interval=0.5)


def mixtures(bootstrap: str) -> list[dict]:
    return [r["value"] for r in read_range(bootstrap, "control") if "set_mixture" in r["value"]]


def test_the_source_draws_what_the_monitors_curriculum_decides(tmp_path):
    config = tmp_path / "source.json"
    config.write_text(json.dumps({"sources": SOURCES, "lead_steps": 1, "batch_groups": 8, "publish_batch": 4,
                                  "rollout_group": ROLLOUT_GROUP, "lag_refresh_s": 0.2}))
    stack = Stack(tmp_path, service_args={"monitor": ["--curriculum", json.dumps(CURRICULUM), "--dashboard-port", "-1"],
                                          "source": ["--config", str(config)]})
    try:
        stack.start(with_demo_policy=False, services=("monitor", "source"))
        loop = Loop(stack.bootstrap)
        loop.until(lambda: any(m["set_mixture"]["stage"] == "blend" for m in mixtures(stack.bootstrap)), 90,
                   "the plateau to end the reasoning stage")
        loop.until(lambda: any(p["origin"]["source"] == "judged" for p in loop.prompts), 60,
                   "the source to draw the judged source")
        versions = {p["origin"]["source"]: int(p["origin"].get("mixture_version", 0)) for p in loop.prompts}
        assert versions["judged"] >= 2  # the config's mixture is 0, the schedule's start 1, the blend 2
        assert all(p["origin"]["source"] == "easy" for p in loop.prompts
                   if int(p["origin"].get("mixture_version", 0)) < 2)

        loop.correct["easy"] = SIZE  # too easy now: above its band for two windows, up one level
        loop.until(lambda: any(m["set_mixture"]["levels"].get("easy") == 2 for m in mixtures(stack.bootstrap)), 90,
                   "the level rule to move easy up")
        # still too easy at level 2, it may go on up to 3 before the source's next draws: either is drawn
        loop.until(lambda: any(p["prompt_id"].endswith(("@L2", "@L3")) for p in loop.prompts), 60,
                   "prompts of easy drawn at level 2 or above")
        level = next(m for m in mixtures(stack.bootstrap) if m["set_mixture"]["levels"].get("easy") == 2)
        assert level["evidence"]["rule"] == "curriculum_level" and level["set_mixture"]["stage"] == "blend"
        refused = [r for r in read_range(stack.bootstrap, "metrics")
                   if r["value"].get("name") == "source/mixture_refused"]
        assert refused == []  # every command the monitor sent was one the source could apply
        states = [r["value"] for r in read_range(stack.bootstrap, "source_state") if r["value"].get("stage")]
        assert states and states[-1]["stage"] == "blend" and states[-1]["levels"]["easy"] >= 2  # still too easy: it may go on up
    finally:
        stack.stop()
