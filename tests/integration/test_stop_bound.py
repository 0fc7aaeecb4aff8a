"""A service stops within its grace period even when the broker is away (a pod's SIGKILL comes at
terminationGracePeriodSeconds); what it could not commit is consumed again when the broker returns."""
from __future__ import annotations

import signal
import threading
import time

import pytest

from m1flow.bus import Producer
from m1flow.ops.stack import Stack
from m1flow.runtime.config import ServiceConfig
from m1flow.runtime.stop_bound import EXIT_CODE, StopBound

from tests.integration.helpers import scored_by_group, wait_for
from tests.integration.test_resilience import send_group

GRACE_S = 4.0


def test_the_bound_exits_once_after_its_time():
    codes: list[int] = []
    called = threading.Event()
    bound = StopBound(0.05, exit=lambda code: (codes.append(code), called.set()))
    bound.arm()
    bound.arm()  # a second signal neither restarts nor doubles the clock
    assert called.wait(5)
    time.sleep(0.2)
    assert codes == [EXIT_CODE]


def test_zero_waits_forever_and_the_default_fits_a_pods_grace_period():
    bound = StopBound(0, exit=lambda code: pytest.fail("exited"))
    bound.arm()
    time.sleep(0.1)
    default = ServiceConfig.load([], env={}).stop_grace_s
    assert 0 < default < 30  # Kubernetes' default terminationGracePeriodSeconds
    assert ServiceConfig.load([], env={"M1FLOW_STOP_GRACE_S": "7"}).stop_grace_s == 7


def test_sigterm_with_the_broker_away_exits_within_the_bound(tmp_path):
    stack = Stack(tmp_path, service_args={"reward": ["--stop-grace-s", str(GRACE_S)]})
    try:
        stack.start(with_demo_policy=False, services=("reward",))
        producer = Producer(stack.bootstrap, "test-stop-bound")
        send_group(producer, "before", ["2", "3"])
        wait_for(lambda: "before" in scored_by_group(stack.bootstrap), 120, "a group scored")
        send_group(producer, "in-flight", ["2", "2"])
        producer.close()
        stack.broker.stop()
        reward = stack.get("reward")
        started = time.monotonic()
        reward.kill(signal.SIGTERM)
        code = reward.proc.wait(GRACE_S + 20)
        took = time.monotonic() - started
        assert took < GRACE_S + 8, f"stopped after {took:.1f}s, bound {GRACE_S}s:\n{reward.tail()}"
        assert code in (0, EXIT_CODE), reward.tail()
        # the uncommitted work is not lost: a fresh replica scores it once the broker is back
        stack.procs.clear()
        stack.broker.start()
        stack.start_service("reward")
        wait_for(lambda: "in-flight" in scored_by_group(stack.bootstrap), 180, "the in-flight group rescored")
    finally:
        stack.stop()
