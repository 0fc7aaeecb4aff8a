"""svc_rollout finds the newest policy however long `policy` is, and no load failure kills it.

Before: the service took the newest announcement of its first poll (at most 500 records), so once
`policy` held more, every restart picked a rotated-away checkpoint and crashed, forever.
"""
from __future__ import annotations

from pathlib import Path

from m1flow.bus import Producer, codec
from m1flow.bus.topics import POLICY, PROMPTS, policy_key
from m1flow.contracts import events
from m1flow.checkpoint import uri_for, weights_sha256
from m1flow.tasks.arith import problems
from ops.feed import arith_prompt
from ops.stack import Stack
from ops.warmstart import warm_started_policy

from tests.integration.helpers import records, wait_for


def announce(producer: Producer, version: int, directory: Path, sha: str = "") -> None:
    msg = events.PolicyVersion(header=codec.header("test", policy_version=version), version=version,
                               checkpoint_uri=uri_for(directory), sha256=sha)
    producer.send(POLICY, policy_key(msg), msg)


def loaded(stack: Stack, version: int) -> bool:
    return f"loaded policy version {version} " in stack.get("rollout").tail(400)


def test_rollout_starts_on_the_newest_of_many_announcements_and_survives_bad_ones(tmp_path):
    policy = warm_started_policy(tmp_path / "policy0")
    sha = weights_sha256(policy)
    stack = Stack(tmp_path / "run")
    try:
        stack.start_broker()
        producer = Producer(stack.bootstrap, "test-policy")
        for version in range(1, 1201):  # rotated away long ago: only the newest exists
            announce(producer, version, tmp_path / f"gone-v{version}")
        announce(producer, 1201, policy, sha)
        producer.flush()
        rollout = stack.start_service("rollout")
        assert loaded(stack, 1201)
        assert "gone-v" not in rollout.tail(400)  # it never even tried a stale one

        announce(producer, 1202, tmp_path / "missing")  # a failed load must not kill the service
        announce(producer, 1203, policy, "0" * 64)  # nor a checksum mismatch
        producer.flush()
        wait_for(lambda: "policy v1203" in rollout.tail(400), 60, "the bad announcements tried")
        assert rollout.alive()
        announce(producer, 1204, policy, sha)
        producer.flush()
        wait_for(lambda: loaded(stack, 1204), 60, "the next good policy loaded")
        assert rollout.alive()

        # A prompt on the topic asks only what the replica's ceilings allow (a forged one asked a
        # billion tokens per sample); over them it goes to dlq with the knob named, and sampling goes on.
        greedy, crowd, fair = (arith_prompt(p, 2) for p in problems(7, 3))
        greedy.max_new_tokens = 10**9
        crowd.group_size = 10**6
        for prompt in (greedy, crowd, fair):
            producer.send(PROMPTS, prompt.prompt_id, prompt)
        producer.flush()
        wait_for(lambda: len(records(stack.bootstrap, "dlq")) >= 2, 60, "both greedy prompts dead-lettered")
        letters = " ".join(str(r["value"]) for r in records(stack.bootstrap, "dlq"))
        assert "(max_window)" in letters and "(max_group_size)" in letters
        wait_for(lambda: {r["value"]["prompt_id"] for r in records(stack.bootstrap, "rollouts")} == {fair.prompt_id},
                 120, "the fair prompt sampled")
        assert rollout.alive()
    finally:
        stack.stop()
