"""kill -9 of one of two reward replicas: the restarted process takes its partitions straight back
(static group membership), and the other replica never stops for a rebalance.

Before: a restart joined as a new member; the group rebalanced and waited for the dead member's
session to time out (20 s), so every kill -9 of reward or rollout stopped the whole pipeline.
"""
from __future__ import annotations

from m1flow.bus import Producer
from ops.stack import Stack

from tests.integration.helpers import scored_by_group, wait_for
from tests.integration.test_resilience import send_group


def assignments(proc) -> list[str]:  # noqa: ANN001
    return [line for line in proc.tail(2000).splitlines() if '"assigned [' in line or "assigned [" in line]


def test_a_restarted_replica_rejoins_without_a_rebalance(tmp_path):
    stack = Stack(tmp_path, replicas={"reward": 2})
    try:
        stack.start(with_demo_policy=False, services=("reward",))
        boot = stack.bootstrap
        producer = Producer(boot, "test-static")
        first = [f"before-{i}" for i in range(16)]
        for g in first:
            send_group(producer, g, ["2", "3"])
        wait_for(lambda: all(g in scored_by_group(boot) for g in first), 120, "groups before the kill")
        survivor, victim = stack.get("reward", 0), stack.get("reward", 1)
        before_survivor, before_victim = assignments(survivor), assignments(victim)
        assert len(before_survivor) >= 1 and len(before_victim) >= 1

        victim.kill()  # SIGKILL: it never leaves the group
        victim.proc.wait()
        restarted = stack.restart("reward", 1)
        after = [f"after-{i}" for i in range(16)]
        for g in after:
            send_group(producer, g, ["2", "3"])
        wait_for(lambda: all(g in scored_by_group(boot) for g in after), 120, "groups after the restart")

        assert assignments(survivor) == before_survivor  # the survivor saw no rebalance at all
        partitions = lambda lines: lines[-1].split("owns ")[1]  # noqa: E731 - what it ended up owning
        assert partitions(assignments(restarted)) == partitions(before_victim)  # same partitions back
    finally:
        stack.stop()
