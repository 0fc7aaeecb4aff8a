"""The learner process over a real broker: groups with nothing to teach are skipped and never make a
version, a group cut short is dead-lettered without counting as applied (its whole copy still
trains), an idle input flushes a partial batch, and a `scored` topic written with schema 1 (the
fixture of tests/rl/test_legacy.py, raw bytes as that version wrote them) trains. The learner is
configured by a YAML file with nested blocks (`algorithm:`, `train:`). A replay of the range then
trains again what the live learner trained, from the version that produced it, in its own directory,
and its comparison with the live run (`--compare`) finds nothing that differs."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors.torch import load_file

from m1flow.bus import Producer
from m1flow.bus.admin import ensure_topics
from m1flow.bus.topics import SCORED
from m1flow.checkpoint import WEIGHTS_FILE, latest, load_state
from ops.cli import main
from m1flow.contracts import events
from ops.kafka import Broker
from ops.launcher import launch
from m1flow.status import Status
from ops.warmstart import warm_started_policy
from tests.integration.helpers import policy_versions, records, wait_for
from tests.integration.test_learner_exactly_once import checkpoints, reached_version
from tests.rl.test_legacy import V1_DROPPED, v1_groups, v1_records

TIMEOUT_S = 1.5


def v2_group(gid: str, rewards: list[float], template: events.ScoredGroup) -> events.ScoredGroup:
    """A schema-2 group of real samples (the fixture's tokens) with the given rewards."""
    g = events.ScoredGroup(header=events.Header(schema_version=2, message_id=f"scored:{gid}"), group_id=gid,
                           group_size=len(rewards))
    for i, reward in enumerate(rewards):
        s = g.samples.add()
        s.CopyFrom(template.samples[i])
        s.ClearField("legacy_status")
        s.index, s.reward, s.status, s.rollout_id = i, reward, Status.OK, f"{gid}/{i}"
    return g


def learner_config(tmp_path) -> Path:
    """A YAML file with nested blocks (`algorithm:`, `train:`)."""
    config = tmp_path / "learner.yaml"
    config.write_text(yaml.safe_dump({
        "batch_groups": 3, "batch_timeout_s": TIMEOUT_S, "keep_checkpoints": 100, "group_id": "selection",
        "algorithm": {"advantage": "grpo", "policy_loss": "cispo", "max_staleness": 100,
                      "shaping": {"format_reward": 0.1}},
        "train": {"lr": 1e-4, "minibatches": 2}}))
    return config


def test_learner_skips_flushes_and_trains_schema_1_topics(tmp_path, capsys):
    template = v1_groups()[0]
    flat = [v2_group(f"flat{i}", [float(i % 2)] * 4, template) for i in range(5)]
    whole = v2_group("late", [1.0, 0.0, 0.0, 1.0], template)
    cut = events.ScoredGroup()
    cut.CopyFrom(whole)
    del cut.samples[2:]  # a record cut to half its samples, same message id, not marked incomplete
    config = learner_config(tmp_path)
    broker = Broker(tmp_path / "kafka")
    bootstrap = broker.start()
    proc = None
    try:
        ensure_topics(bootstrap)
        policy = warm_started_policy(tmp_path / "policy0")
        producer = Producer(bootstrap, "test")
        for g in [*flat, cut]:
            producer.send(SCORED, g.group_id, g)
        producer.flush()
        proc = launch("learner", tmp_path, bootstrap, ["--config", str(config), "--init-checkpoint", str(policy)])
        the_cut_group_is_dead_lettered_and_nothing_trains(bootstrap, tmp_path, proc)
        state = the_schema_1_groups_train_and_the_whole_copy_too(producer, bootstrap, tmp_path, flat, whole, proc)
        a_trace_reads_each_groups_fate_back(bootstrap, capsys)
        proc.stop()
        a_replay_of_the_range_makes_the_same_versions(tmp_path, bootstrap, config, len(flat), state, capsys)
    finally:
        if proc is not None:
            proc.stop()
        broker.stop()


def the_cut_group_is_dead_lettered_and_nothing_trains(bootstrap: str, tmp_path: Path, proc: Any) -> None:
    def letters() -> list[dict]:
        return [r["value"] for r in records(bootstrap, "dlq")]
    wait_for(lambda: letters(), 120, "the cut-short group dead-lettered")
    [letter] = letters()
    assert letter["source_topic"] == "scored" and "2 of group_size 4 samples" in letter["error"]
    time.sleep(3 * TIMEOUT_S)  # idle and caught up, nothing trainable: no step, no version
    assert policy_versions(bootstrap) == [0] and reached_version(tmp_path) == 0, proc.tail()


def the_schema_1_groups_train_and_the_whole_copy_too(producer: Producer, bootstrap: str, tmp_path: Path,
                                                     flat: list, whole: events.ScoredGroup, proc: Any) -> Any:
    """Schema 1 as written then (8 trainable of 12) trains in three steps, the last one flushed; the
    whole copy of the cut group trains; every skip is counted by its reason. Returns the last state."""
    for key, value in v1_records():
        producer.send_bytes(SCORED, key, value)
    producer.flush()
    wait_for(lambda: reached_version(tmp_path) >= 3, 180, "three steps on the schema-1 groups")
    trainable = [g.group_id for g in v1_groups() if g.group_id not in V1_DROPPED]
    state = load_state(latest(checkpoints(tmp_path)))
    assert state.applied_groups == [trainable[:3], trainable[3:6], trainable[6:]]  # the last one flushed
    skipped = [gid for step in state.skipped_groups for gid in step]
    assert skipped == [g.group_id for g in flat] + sorted(V1_DROPPED)  # consumed and accounted for

    producer.send(SCORED, whole.group_id, whole)  # the whole copy of the cut group trains
    producer.flush()
    wait_for(lambda: reached_version(tmp_path) >= 4, 120, "the whole copy trained")
    time.sleep(3 * TIMEOUT_S)
    state = load_state(latest(checkpoints(tmp_path)))
    assert state.version == 4 and state.applied_groups[-1] == ["late"], proc.tail()
    assert sorted(set(policy_versions(bootstrap))) == [0, 1, 2, 3, 4]

    skips = [m for m in (r["value"] for r in records(bootstrap, "metrics"))
             if m.get("name") == "learner/groups_skipped"]
    by_reason = {m["labels"]["reason"]: m["value"] for m in skips}
    assert by_reason == {"all_rewards_equal": 5 + 3, "too_few_usable": 1}, by_reason  # 5 flat, 3+1 of schema 1
    return state


def a_trace_reads_each_groups_fate_back(bootstrap: str, capsys: Any) -> None:
    """`m1flow trace` of groups written straight to `scored` (no prompt, no rollouts): the learner's
    per-group metrics say which step trained one and why another was skipped."""
    def story(gid: str) -> dict:
        capsys.readouterr()
        assert main(["--bootstrap", bootstrap, "trace", gid, "--json"]) == 0
        return json.loads(capsys.readouterr().out)
    late, flat = story("late"), story("flat0")
    assert (late["learner"]["status"], late["learner"]["version"]) == ("trained", 4)
    assert late["scored"]["at"]["topic"] == "scored" and late["prompt"] is None
    assert (flat["learner"]["status"], flat["learner"]["reason"]) == ("skipped", "all_rewards_equal")


def a_replay_of_the_range_makes_the_same_versions(tmp_path: Path, bootstrap: str, config: Path, flat: int,
                                                  state: Any, capsys: Any) -> None:
    """A replay of the range before "late" starts from the live v0 (the version that produced the
    range), writes only its own checkpoints and makes the live run's v1..v3 again."""
    live = sorted((p.name, p.stat().st_mtime) for p in checkpoints(tmp_path).iterdir())
    end = flat + 1 + len(v1_records())  # "late" sits at this offset
    code = main(["--run-dir", str(tmp_path), "--bootstrap", bootstrap, "replay", "--topic", "scored",
                 "--from", "0", "--to", str(end), "--group", "replay-l", "--service", "learner", "--compare",
                 "--json", "--", "--config", str(config)])
    out = capsys.readouterr().out
    assert code == 0, out  # --compare: v0..v3 match the live run's, loss by loss and weights by weights
    compared = json.loads(out[out.index("\n{") + 1:])
    assert compared["versions"] == [0, 1, 2, 3] and compared["first"] is None
    assert [(s["weights"], s["loss_replay"] is not None) for s in compared["steps"]] == [
        ("equal", False), ("equal", True), ("equal", True), ("equal", True)]
    assert sorted((p.name, p.stat().st_mtime) for p in checkpoints(tmp_path).iterdir()) == live
    replayed = tmp_path / "replays" / "replay-l" / "learner"
    assert sorted(p.name for p in replayed.glob("v*")) == [f"v{v:06d}" for v in range(4)]
    assert load_state(replayed / "v000003").applied_groups == state.applied_groups[:3]
    for name, value in load_file(checkpoints(tmp_path) / "v000003" / WEIGHTS_FILE).items():
        assert torch.equal(load_file(replayed / "v000003" / WEIGHTS_FILE)[name], value), name
    assert [v for v in policy_versions(bootstrap, "policy.replay-l")] == [0, 1, 2, 3]
