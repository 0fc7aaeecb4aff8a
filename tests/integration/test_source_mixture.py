"""The source's mixture over the real broker: a SetMixture on `control` takes effect within one
learner step, is stamped on every prompt, survives a restart without being applied twice, is refused
with a metric when it names an unknown source, and a replay draws under the original run's versions."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from m1flow.bus import Producer, codec
from m1flow.bus.topics import CONTROL
from m1flow.contracts import events
from ops.launcher import launch
from ops.topics_io import read_range
from tests.integration.helpers import commit_end, wait_for
from tests.integration.test_source import metric, source_config

pytestmark = pytest.mark.kafka

LIMIT = 8  # lead_steps 1 x batch_groups 8: the prompts a learner step takes


def drawn(bootstrap: str, topic: str, stream: str) -> list[tuple[int, str, int, str]]:
    """(draw, source, mixture version, prompt id) of `stream`'s prompts, by draw."""
    out = {}
    for rec in read_range(bootstrap, topic):
        origin = rec.get("value", {}).get("origin", {})
        if origin.get("stream") == stream:
            out[int(origin.get("draw", 0))] = (int(origin.get("draw", 0)), origin["source"],
                                               int(origin.get("mixture_version", 0)), rec["value"]["prompt_id"])
    return [out[d] for d in sorted(out)]


def send_mixture(bootstrap: str, run: str, weights: dict, levels: dict | None = None) -> str:
    msg = events.Control(header=codec.header("test", run_id=run), reason="test",
                         set_mixture=events.SetMixture(weights=weights, levels=levels or {}, stage="s1"),
                         evidence=events.Evidence(rule="manual", decided_by="test"))
    producer = Producer(bootstrap, "test-mixture")
    try:
        producer.send(CONTROL, "set_mixture", msg)
        producer.flush()
    finally:
        producer.close()
    return msg.header.message_id


def test_a_mixture_change_lands_within_a_step_survives_a_restart_and_replays(tmp_path, bootstrap):
    run, group = f"mix-{uuid.uuid4().hex[:6]}", f"mixroll-{uuid.uuid4().hex[:6]}"
    stream = f"{run}/m1flow-source"
    sources = [{"generator": "arith", "name": "easy", "size": 50, "seed": 1, "weight": 1.0},
               {"generator": "arith", "name": "hard", "size": 50, "seed": 2, "weight": 0.0, "level": 1}]
    args = source_config(tmp_path, sources, max_epochs=1, lead_steps=1, batch_groups=LIMIT, rollout_group=group,
                         lag_refresh_s=0.2, publish_batch=4)
    proc = launch("source", tmp_path, bootstrap, args, run_id=run)
    try:
        the_mixture_lands_within_a_step(proc, bootstrap, run, stream, group)
        an_unknown_source_is_refused_with_a_metric(proc, bootstrap, run)
    finally:
        proc.stop()

    again = launch("source", tmp_path, bootstrap, args, run_id=run)  # resumes under v1, applies nothing twice
    try:
        commit_end(bootstrap, group)
        wait_for(lambda: len(drawn(bootstrap, "prompts", stream)) >= 3 * LIMIT, 60, "a step after the restart")
        assert "m1flow_source_mixture_version 1.0" in metric(again, "m1flow_source_mixture_version")
    finally:
        again.stop()
    original = drawn(bootstrap, "prompts", stream)
    assert [d[0] for d in original] == list(range(len(original)))  # no draw lost or repeated
    assert {(d[1], d[2]) for d in original[LIMIT:]} == {("hard", 1)}

    a_replay_draws_the_same_under_the_original_versions(tmp_path, bootstrap, run, stream, sources, original)


def the_mixture_lands_within_a_step(proc: Any, bootstrap: str, run: str, stream: str, group: str) -> None:
    wait_for(lambda: "held: lead full" in proc.tail(), 60, "the first lead")
    # sent is not yet acknowledged (batches are in flight while the next is drawn): wait to read them
    wait_for(lambda: len(drawn(bootstrap, "prompts", stream)) >= LIMIT, 30, "the first lead on the broker",
             interval=0.2)
    first = drawn(bootstrap, "prompts", stream)
    assert [(d[1], d[2]) for d in first] == [("easy", 0)] * LIMIT  # weight 0: never drawn
    send_mixture(bootstrap, run, {"easy": 0.0, "hard": 1.0}, {"hard": 3})
    wait_for(lambda: "mixture v1" in proc.tail(50), 30, "the mixture applied")
    commit_end(bootstrap, group)
    wait_for(lambda: len(drawn(bootstrap, "prompts", stream)) >= 2 * LIMIT, 30, "a step under the new mixture")
    second = drawn(bootstrap, "prompts", stream)[LIMIT:]
    # nothing more of the old mixture after the command: the lead it had was one step
    assert {(d[1], d[2]) for d in second} == {("hard", 1)}
    assert all(d[3].endswith("@L3") for d in second)  # the run-time level names the task


def an_unknown_source_is_refused_with_a_metric(proc: Any, bootstrap: str, run: str) -> None:
    send_mixture(bootstrap, run, {"nope": 1.0})
    wait_for(lambda: 'reason="unknown_source"' in metric(proc, "m1flow_source_mixture_refused_total"), 30,
             "the refusal counted")
    events_ = [r.get("value") or {} for r in read_range(bootstrap, "metrics")]  # other tests leave garbage there
    refusals = [v for v in events_ if v.get("name") == "source/mixture_refused"
                and v.get("header", {}).get("trace", {}).get("run_id") == run]
    assert len(refusals) == 1 and "nope" in refusals[0]["labels"]["why"]
    assert "m1flow_source_mixture_version 1.0" in metric(proc, "m1flow_source_mixture_version")


def a_replay_draws_the_same_under_the_original_versions(tmp_path: Path, bootstrap: str, run: str, stream: str,
                                                        sources: list[dict], original: list) -> None:
    suffix = f"mixreplay{uuid.uuid4().hex[:6]}"
    replay_args = source_config(tmp_path, sources, max_epochs=1, lead_steps=0, output_suffix=suffix)
    replay = launch("source", tmp_path / "replay", bootstrap, replay_args, run_id=run)
    try:
        wait_for(lambda: "every source left has weight 0" in replay.tail(), 60, "the replay to draw everything")
    finally:
        replay.stop()
    replayed = drawn(bootstrap, f"prompts.{suffix}", stream)
    assert replayed[:len(original)] == original  # the same prompts, sources and versions, in the same order
    assert len(replayed) == LIMIT + 50  # easy until the switch, then all of hard; easy's weight 0 after


def scored_group(prompt: dict, correct: list[bool], run: str) -> events.ScoredGroup:
    return events.ScoredGroup(header=codec.header("test-reward", run_id=run), group_id=f"g-{uuid.uuid4().hex[:8]}",
                              prompt_id=prompt["prompt_id"], source=prompt["origin"]["source"],
                              samples=[events.ScoredSample(correct=c, reward=float(c)) for c in correct])


class Answers:
    """The reward service and the rollout group, by hand: each new prompt of `stream` scored (easy all
    correct, mixed half right) on `scored`, and the rollout group's commits moved to the end."""

    def __init__(self, bootstrap: str, stream: str, run: str, group: str, producer: Producer) -> None:
        self.bootstrap, self.stream, self.run, self.group, self.producer = bootstrap, stream, run, group, producer
        self.answered: set[str] = set()

    def __call__(self) -> None:
        from m1flow.bus.topics import SCORED

        for rec in read_range(self.bootstrap, "prompts"):
            value = rec.get("value", {})
            if value.get("origin", {}).get("stream") == self.stream and value["header"]["message_id"] not in self.answered:
                self.answered.add(value["header"]["message_id"])
                easy = value["origin"]["source"] == "easy"
                self.producer.send(SCORED, value["prompt_id"],
                                   scored_group(value, [True] * 4 if easy else [True, False] * 2, self.run))
        self.producer.flush()
        commit_end(self.bootstrap, self.group)


def test_the_online_filter_retires_a_too_easy_source_and_keeps_it_retired_after_a_restart(tmp_path, bootstrap):
    """Scores come back on `scored` (written here as the reward service would): every group of `easy`
    all correct, `mixed` half right. Each easy row retires when its first group comes back, so the next
    epochs draw only `mixed`; the retired set is on `source_state`, so a restarted source keeps it."""
    run, group = f"filt-{uuid.uuid4().hex[:6]}", f"filtroll-{uuid.uuid4().hex[:6]}"
    stream = f"{run}/m1flow-source"
    sources = [{"generator": "arith", "name": "easy", "size": 12, "seed": 1},
               {"generator": "arith", "name": "mixed", "size": 12, "seed": 2}]
    args = source_config(tmp_path, sources, max_epochs=4, lead_steps=1, batch_groups=LIMIT, rollout_group=group,
                         lag_refresh_s=0.2, publish_batch=4, group_size=4,
                         filter={"enabled": True, "save_every_s": 0.5, "min_samples": 4})
    producer = Producer(bootstrap, "test-scores")
    answer_and_consume = Answers(bootstrap, stream, run, group, producer)
    proc = launch("source", tmp_path, bootstrap, args, run_id=run)
    try:
        def progressed(n: int) -> bool:
            answer_and_consume()
            return len(drawn(bootstrap, "prompts", stream)) >= n
        wait_for(lambda: progressed(30), 90, "thirty prompts, scored as they come", interval=0.5)
        wait_for(lambda: 'kind="easy",source="easy"} 12.0' in metric(proc, "m1flow_source_retired_rows"), 30,
                 "every easy row retired")
    finally:
        proc.stop()
    first = drawn(bootstrap, "prompts", stream)
    easy_rows = [d for d in first if d[1] == "easy"]
    assert len({d[3] for d in easy_rows}) == 12
    # retired after its first group: a row drawn again only while its score was in flight (the lead)
    assert len(easy_rows) <= 12 + LIMIT

    again = launch("source", tmp_path, bootstrap, args, run_id=run)
    try:
        wait_for(lambda: (answer_and_consume(), "every source exhausted" in again.tail())[1], 90,
                 "the rest of mixed's epochs", interval=0.5)
    finally:
        again.stop()
        producer.close()
    rows = drawn(bootstrap, "prompts", stream)
    assert [d[1] for d in rows].count("easy") == len(easy_rows)  # the restart kept them retired
    assert [d[1] for d in rows].count("mixed") == 4 * 12  # mixed never left its band: every epoch drawn
