"""The liveness verdict on synthetic timelines (the watchdog thread that feeds it is exercised over
a real broker in test_worker_broker.py)."""
from __future__ import annotations

import time

from m1flow.bus.liveness import Liveness, LivenessConfig

CFG = LivenessConfig(check_every_s=1, join_after_s=30, stall_after_s=60, broker_down_after_s=20)


def fresh(assigned_mode: bool = False) -> tuple[Liveness, float]:
    live = Liveness("127.0.0.1:1", "g", CFG, assigned_mode=assigned_mode)
    return live, time.monotonic()


def test_joining_is_not_ready_and_too_long_a_join_is_unhealthy():
    live, now = fresh()
    assert live.verdict(0, now).reason == "joining the consumer group"
    assert "no partition assignment for" in live.verdict(0, now + 31).reason


def test_assigned_consumer_with_lag_and_no_progress_is_stalled_unless_throttled():
    live, now = fresh()
    live.assigned({("rollouts", 0)})
    assert live.verdict(5, now + 10).healthy
    later = time.monotonic() + 61
    live._step_at = later - 1  # the loop keeps stepping, but handles nothing
    verdict = live.verdict(5, later)
    assert not verdict.healthy and verdict.reason.startswith("stalled: 5 records behind")
    assert live.verdict(0, later).healthy  # nothing to do is not a stall
    live.throttled(True)  # backpressure: waiting is the job
    assert live.verdict(5, later).healthy


def test_a_step_that_never_returns_is_stuck():
    live, now = fresh(assigned_mode=True)
    assert "loop stuck" in live.verdict(0, now + 61).reason


def test_broker_away_long_enough_is_unhealthy():
    live, now = fresh(assigned_mode=True)
    live._broker_ok_at = now
    assert live.verdict(None, now + 5).healthy
    assert live.verdict(None, now + 21).reason.startswith("broker unreachable")


def test_a_replica_that_keeps_partitions_after_a_cooperative_revocation_stays_an_owner():
    """A second replica joins: the first gives up half its partitions and keeps the rest; kafka-python
    then reports no assignment for it (nothing was added), so it must not wait for one."""
    live, now = fresh()
    live.assigned({("rollouts", p) for p in range(4)})
    live.revoked({("rollouts", 2), ("rollouts", 3)})
    assert live.verdict(0, now + 31).healthy
    live.revoked({("rollouts", 0), ("rollouts", 1)})  # everything gone: now it waits for an assignment
    assert "no partition assignment for" in live.verdict(0, time.monotonic() + 31).reason


def test_an_assignment_the_client_reports_counts_even_without_a_callback():
    live, now = fresh()
    live.owns(set())  # nothing yet: still joining
    assert live.verdict(0, now + 1).reason == "joining the consumer group"
    live.owns({("rollouts", 1)})
    assert live.verdict(0, now + 1).healthy


class Describes:
    """A stand-in for the admin client's describe_groups answer."""

    def __init__(self, state: str, instances: list[str], partitions: list[int] = ()) -> None:
        assignment = {"assigned_partitions": [{"topic": "rollouts", "partitions": list(partitions)}], "user_data": ""}
        self.answer = {"g": {"group_state": state, "members": [{"group_instance_id": i, "member_assignment": assignment}
                                                                for i in instances]}}

    def describe_groups(self, group_ids):  # noqa: ANN001
        return self.answer


def test_a_member_of_a_stable_group_that_owns_nothing_is_idle_not_stuck():
    live = Liveness("127.0.0.1:1", "g", CFG, member="rollout-3")
    live._waiting_since = time.monotonic() - 31
    live._check_membership(Describes("PreparingRebalance", ["rollout-3"]))
    assert "no partition assignment" in live.verdict(0).reason  # a rebalance that never ends is stuck
    live._check_membership(Describes("Stable", ["rollout-1", "rollout-2"]))
    assert "no partition assignment" in live.verdict(0).reason  # not in the group at all
    # listed with partitions its client does not know of: the broker's view and the client's differ (a
    # static member's client out of the group without a LeaveGroup is listed so): wedged, not idle
    live._check_membership(Describes("Stable", ["rollout-1", "rollout-3"], partitions=[0, 1]))
    assert "no partition assignment" in live.verdict(0).reason
    live._check_membership(Describes("Stable", ["rollout-1", "rollout-3"]))
    assert live.verdict(0).healthy  # in the group, with nothing assigned: an idle replica


def test_a_member_that_lost_its_partitions_is_told_to_rejoin_once_per_window():
    live, now = fresh()
    live._waiting_since = now - 100  # never assigned: a slow first join is not a wedge
    assert not live.rejoin_due(now)
    live.assigned({("rollouts", 0)})
    live.revoked({("rollouts", 0)})
    start = live._waiting_since
    live._broker_ok_at = start + 30
    assert not live.rejoin_due(start + 29)
    assert live.rejoin_due(start + 31) and live.rejoins == 1
    assert not live.rejoin_due(start + 40)  # the new consumer gets a full window of its own
    assert live.rejoin_due(start + 62) is False  # the broker has not answered for 32 s: a new client would wait too
    live._broker_ok_at = start + 60
    assert live.rejoin_due(start + 62) and live.rejoins == 2
    live.assigned({("rollouts", 0)})
    assert not live.rejoin_due(start + 200)
