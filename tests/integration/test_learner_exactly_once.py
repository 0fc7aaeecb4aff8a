"""SIGKILL the learner at random points, restart it each time: every trainable scored group is applied
in exactly one step (the others are skipped, as selection says), the batches are those m1flow.rl's
fill_batches gives for the topic's order (the last, partial one flushed once the input is idle), and
the final weights equal those of an uninterrupted run on the same input."""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from m1flow.bus import Producer, codec
from m1flow.bus.lag import GroupLag
from m1flow.bus.topics import SCORED
from m1flow.contracts import events
from ops.kafka import Broker
from m1flow.bus.admin import ensure_topics
from ops.launcher import launch
from ops.topics_io import read_range
from m1flow.chat import prompt_ids
from m1flow.checkpoint import WEIGHTS_FILE, latest, load_policy, load_state
from m1flow.model import sample
from m1flow.rl.config import AlgorithmConfig
from m1flow.rl.filling import fill_batches
from m1flow.sampling import generator
from m1flow.status import Status
from m1flow.tasks.arith import parse_answer, problems
from ops.warmstart import warm_started_policy
from tests.integration.helpers import wait_for

GROUPS, BATCH = 80, 4
# Every sample comes from policy 0; no staleness limit, so what is trained depends on rewards alone.
ALGORITHM = {"max_staleness": 1000}


def scored_groups(policy) -> list[events.ScoredGroup]:
    """Real samples of the warm-started policy, scored like the reward service would."""
    model, tok = load_policy(policy)
    out = []
    for i, p in enumerate(problems(seed=42, n=GROUPS, max_operand=12)):
        ids = prompt_ids(tok, p.text)
        comps = sample(model, ids, n=4, max_new_tokens=6, eos_id=tok.eos_token_id, generator=generator(i))
        g = events.ScoredGroup(header=codec.header("test", message_id=f"s{i}"), group_id=f"g{i}", group_size=4)
        for j, c in enumerate(comps):
            reward = float(parse_answer(tok.decode(c.tokens, skip_special_tokens=True)) == int(p.answer))
            g.samples.add(index=j, prompt_token_ids=ids, token_ids=c.tokens, logprobs=c.logprobs,
                          reward=reward, status=Status.OK, policy_version=0, max_new_tokens=6)
        out.append(g)
    return out


def expected_batches(groups: list[events.ScoredGroup]) -> list[list[str]]:
    return [[s.group_id for s in b] for b in fill_batches(groups, AlgorithmConfig(**ALGORITHM), BATCH)]


@pytest.fixture
def filled_broker(tmp_path):
    """A fresh broker whose `scored` holds GROUPS real groups; yields (bootstrap, policy dir, batches)."""
    broker = Broker(tmp_path / "kafka")
    bootstrap = broker.start()
    try:
        ensure_topics(bootstrap)
        policy = warm_started_policy(tmp_path / "policy0")
        producer = Producer(bootstrap, "test")
        groups = scored_groups(policy)
        for g in groups:
            producer.send(SCORED, g.group_id, g)
        producer.flush()
        yield bootstrap, policy, expected_batches(groups)
    finally:
        broker.stop()


def checkpoints(run_dir) -> Path:
    return run_dir / "learner" / "checkpoints"


def reached_version(run_dir) -> int:
    """The policy version of the newest complete checkpoint (0 before the first)."""
    found = latest(checkpoints(run_dir))
    return load_state(found).version if found else 0


def final_checkpoint(run_dir, version: int | None = None) -> tuple[dict, dict]:
    last = latest(checkpoints(run_dir)) if version is None else checkpoints(run_dir) / f"v{version:06d}"
    return load_file(last / WEIGHTS_FILE), asdict(load_state(last))


def learner_args(policy, group: str, minibatches: int = 4, **train) -> list[str]:
    return ["--init-checkpoint", str(policy), "--batch-groups", str(BATCH), "--group-id", group,
            "--keep-checkpoints", "100", "--batch-timeout-s", "1", "--algorithm", json.dumps(ALGORITHM),
            "--train", json.dumps({"lr": 3e-4, "minibatches": minibatches, **train})]


def run_until_done(proc_factory, run_dir, steps: int, timeout: float = 300) -> None:
    proc = proc_factory()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if reached_version(run_dir) >= steps:
                return
            time.sleep(0.5)
        raise AssertionError(f"learner did not finish:\n{proc.tail()}")
    finally:
        proc.stop()


def test_sigkilled_learner_applies_each_group_once_and_matches_uninterrupted_run(tmp_path, filled_broker):
    bootstrap, policy, batches = filled_broker
    steps = len(batches)
    assert sum(map(len, batches)) < GROUPS  # skipped groups (the last batch is flushed short when their count allows)
    calm = tmp_path / "calm"
    run_until_done(lambda: launch("learner", calm, bootstrap, learner_args(policy, "learner-calm")), calm, steps)

    crashy = tmp_path / "crashy"
    rng = random.Random(7)
    partial = []
    for _ in range(4):
        before = reached_version(crashy)
        proc = launch("learner", crashy, bootstrap, learner_args(policy, "learner-crashy"), replica=1)
        # Kill once this run has trained (a fixed sleep once killed every run before its first step on a
        # loaded machine), at a random moment of a later step: mid-run, whatever the machine's speed.
        wait_for(lambda: reached_version(crashy) > before, 180, "a step of the restarted learner",
                 interval=0.05, detail=proc.tail)
        time.sleep(rng.uniform(0.0, 0.5))
        proc.kill()  # SIGKILL: no shutdown path runs
        proc.proc.wait()
        partial.append(reached_version(crashy))
    run_until_done(lambda: launch("learner", crashy, bootstrap, learner_args(policy, "learner-crashy"),
                                  replica=1), crashy, steps)
    print("versions after each kill:", partial)
    assert any(0 < v < steps for v in partial), partial  # killed mid-run, not before or after

    calm_weights, calm_state = final_checkpoint(calm)
    crashy_weights, crashy_state = final_checkpoint(crashy)
    assert calm_state["applied_groups"] == batches  # each trainable group once, in fill_batches' batches
    assert crashy_state["applied_groups"] == batches
    for state in (calm_state, crashy_state):  # and every other group skipped once: all accounted for
        consumed = [gid for step in state["applied_groups"] + state["skipped_groups"] for gid in step]
        assert sorted(consumed) == sorted(f"g{i}" for i in range(GROUPS))
    assert calm_weights.keys() == crashy_weights.keys()
    for name in calm_weights:
        assert torch.equal(calm_weights[name], crashy_weights[name]), name

    # each announcement carries the offsets its step commits (svc_rollout's backpressure reads the lag
    # as at least those): the newest version's are its checkpoint's, and the group has committed them
    announced = [r["value"] for r in read_range(bootstrap, "policy") if "/calm/" in r["value"].get("checkpoint_uri", "")]
    newest = max(announced, key=lambda v: int(v.get("version", 0)))
    offsets = {key: int(off) for key, off in newest.get("input_offsets", {}).items()}
    assert offsets and offsets == calm_state["offsets"], (newest, calm_state["offsets"])
    lag = GroupLag(bootstrap, "test-positions")
    try:
        committed = lag.positions("learner-calm", SCORED.name) or {}
    finally:
        lag.close()
    assert all(committed[key][0] >= off for key, off in offsets.items()), (committed, offsets)


def test_torchrun_learner_with_two_ranks_matches_one_process(tmp_path, filled_broker):
    """`torchrun --nproc-per-node 2 -m svc_learner`: rank 0 consumes and broadcasts, both ranks
    train (DDP over gloo); same groups per step, and after 2 steps x 2 updates the weights agree
    with the single-process learner's (one update within 1e-6 and the exact gradients are checked
    in tests/learner/test_learner_distributed.py)."""
    from ops.launcher import torchrun

    bootstrap, policy, _ = filled_broker
    # AdamW with eps 1e-15 takes a sign-like step, so a parameter whose true gradient is ~0 would
    # move +lr in one run and -lr in the other when float summation order differs (one process vs
    # an all-reduce of two). A larger eps keeps such float noise from being amplified into whole
    # steps: with 1e-8, one lm_head weight (a gradient that is a near-cancelling sum) still ended
    # 1.5e-5 apart; with 1e-6 what is left after 4 updates is below 1% of the distance a weight can
    # move (measured: at most 7.8e-7 of 1.9M weights).
    steps, lr = 2, 3e-4
    train = {"lr": lr, "minibatches": 2, "adam_eps": 1e-6}
    tol = 0.01 * lr * steps * train["minibatches"]
    one, two = tmp_path / "one", tmp_path / "two"
    run_until_done(lambda: launch("learner", one, bootstrap, learner_args(policy, "one", **train)), one, steps)
    run_until_done(lambda: launch("learner", two, bootstrap, learner_args(policy, "two", **train),
                                  entry=torchrun("learner", 2)), two, steps)
    w1, s1 = final_checkpoint(one, steps)
    w2, s2 = final_checkpoint(two, steps)
    start = load_file(policy / WEIGHTS_FILE)
    assert s1["applied_groups"] == s2["applied_groups"] and s2["version"] == steps
    assert w1.keys() == w2.keys()
    moved = sum(int((w1[name] != start[name]).sum()) for name in w1)
    assert moved > 0.5 * sum(w.numel() for w in w1.values())  # the updates did train the model
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], rtol=0, atol=tol, msg=lambda m, name=name: f"{name}: {m}")


def test_a_killed_torchrun_learner_leaves_no_rank_running(tmp_path, filled_broker):
    """torchrun starts each rank in a session of its own, so a SIGKILL of the launcher's process group
    never reached them: a follower rank, its leader gone, waited for it for good (one was found 55 min
    after its test). The launcher kills what the service started outside its group as well."""
    import psutil

    from ops.launcher import torchrun

    bootstrap, policy, _ = filled_broker
    proc = launch("learner", tmp_path / "killed", bootstrap, learner_args(policy, "killed"), entry=torchrun("learner", 2))
    try:
        ranks = [p for p in psutil.Process(proc.proc.pid).children(recursive=True) if "svc_learner" in " ".join(p.cmdline())]
        assert len(ranks) == 2 and all(os.getsid(p.pid) != os.getsid(proc.proc.pid) for p in ranks)
    finally:
        proc.kill()
        proc.proc.wait(30)
    _, alive = psutil.wait_procs(ranks, timeout=10)
    assert not alive, [p.pid for p in alive]
