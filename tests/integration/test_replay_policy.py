"""Which policy a learner or rollout replay starts from, read from a range of real topics, and the
clear refusal when that checkpoint is gone."""
from __future__ import annotations

import time

import pytest

from m1flow.bus import Producer, codec
from m1flow.bus.topics import PROMPTS, ROLLOUTS, SCORED
from m1flow.contracts import events
from m1flow.checkpoint import LEARNER_CHECKPOINTS, WEIGHTS_FILE, version_dir
from ops.replay import ReplayError, learner_args, rollout_args
from m1flow.status import Status


def _checkpoint(run_dir, version):
    path = version_dir(run_dir / LEARNER_CHECKPOINTS, version)
    path.mkdir(parents=True)
    (path / WEIGHTS_FILE).write_bytes(b"weights")
    return path


def _now() -> str:
    return f"ms:{int(time.time() * 1000)}"


def test_a_learner_replay_starts_from_the_first_surviving_version_of_its_range(bootstrap, tmp_path):
    start = _now()
    producer = Producer(bootstrap, "test")
    for gid, version in (("r1", 4), ("r2", 5), ("r3", 5)):
        g = events.ScoredGroup(header=codec.header("test"), group_id=f"replay-{gid}-{start}")
        g.samples.add(status=Status.OK, policy_version=version - 1)
        g.samples.add(status=Status.OK, policy_version=version)
        producer.send(SCORED, g.group_id, g)
    producer.flush()
    with pytest.raises(ReplayError, match=r"\(v4, v5\).*available: none.*--init-checkpoint"):
        learner_args(bootstrap, tmp_path, "scored", "grp", start, None, [])
    five = _checkpoint(tmp_path, 5)
    args = learner_args(bootstrap, tmp_path, "scored", "grp", start, None, [])
    assert args == ["--checkpoint-dir", str(tmp_path / "replays" / "grp" / "learner"), "--init-checkpoint", str(five)]
    four = _checkpoint(tmp_path, 4)
    assert learner_args(bootstrap, tmp_path, "scored", "grp", start, None, [])[-1] == str(four)
    explicit = learner_args(bootstrap, tmp_path, "scored", "grp", start, None, ["--init-checkpoint", "x"])
    assert explicit == ["--checkpoint-dir", str(tmp_path / "replays" / "grp" / "learner")]


def test_a_rollout_replay_pins_the_version_its_rollouts_carried_or_refuses(bootstrap, tmp_path):
    start = _now()
    producer = Producer(bootstrap, "test")
    pid = f"replay-prompt-{start}"
    producer.send(PROMPTS, pid, events.Prompt(header=codec.header("test"), prompt_id=pid, text="1+1="))
    producer.send(ROLLOUTS, f"{pid}/g", events.Rollout(header=codec.header("test"), prompt_id=pid,
                                                        group_id=f"{pid}/g", policy_version=7))
    producer.flush()
    with pytest.raises(ReplayError, match="policy v7, which sampled the original rollouts of this range, no longer"):
        rollout_args(bootstrap, tmp_path, "prompts", start, None, [])
    seven = _checkpoint(tmp_path, 7)
    assert rollout_args(bootstrap, tmp_path, "prompts", start, None, []) == [
        "--pinned-policy", seven.resolve().as_uri(), "--pinned-policy-version", "7"]
    with pytest.raises(ReplayError, match="replays `prompts`"):
        rollout_args(bootstrap, tmp_path, "rollouts", start, None, [])
