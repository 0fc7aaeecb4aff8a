"""A consumer that was healthy and has stayed unhealthy exits (compose then restarts it); one that
never was healthy (starting, or an idle extra replica) is left alone. The decision on a timeline;
the exit itself is os._exit from the watchdog's own thread."""
from __future__ import annotations

import threading

from m1flow.bus.liveness import Health
from m1flow.runtime.config import ServiceConfig
from m1flow.runtime.stuck_exit import EXIT_CODE, StuckExit

OK, STUCK = Health(True, "ok"), Health(False, "loop stuck: no step completed for 61s")


def watch(verdicts: list[Health], after_s: float = 120) -> StuckExit:
    return StuckExit(lambda: verdicts[0], after_s, exit=lambda code: None)


def test_healthy_then_stuck_long_enough_exits():
    verdicts = [OK]
    fence = watch(verdicts)
    assert not fence.check(0)
    verdicts[0] = STUCK
    assert not fence.check(10) and not fence.check(129)
    assert fence.check(130)


def test_recovering_in_time_resets_the_clock():
    verdicts = [OK]
    fence = watch(verdicts)
    fence.check(0)
    verdicts[0] = STUCK
    fence.check(10)
    verdicts[0] = OK
    fence.check(100)
    verdicts[0] = STUCK
    assert not fence.check(200) and fence.check(320)


def test_never_healthy_never_exits():
    fence = watch([Health(False, "joining the consumer group")])
    assert not any(fence.check(t) for t in (0, 500, 5000))


def test_the_watchdog_thread_calls_exit_with_its_code():
    called = threading.Event()
    codes: list[int] = []
    fence = StuckExit(lambda: STUCK, 0.0, exit=lambda code: (codes.append(code), called.set()))
    fence.was_healthy = True
    fence.start(every_s=0.01)
    assert called.wait(10) and codes == [EXIT_CODE]


def test_off_by_default_and_set_from_the_environment():
    assert ServiceConfig.load([], env={}).exit_unhealthy_after_s == 0
    assert ServiceConfig.load([], env={"M1FLOW_EXIT_UNHEALTHY_AFTER_S": "120"}).exit_unhealthy_after_s == 120
