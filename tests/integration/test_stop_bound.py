"""A service stops within its grace period even when the broker is away (a pod's SIGKILL comes at
terminationGracePeriodSeconds); what it could not commit is consumed again when the broker returns."""
from __future__ import annotations

import io
import logging
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from m1flow.bus import Producer
from ops.stack import Stack
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


def test_the_bound_exits_while_a_logging_handler_is_stuck():
    handler = logging.StreamHandler(io.StringIO())
    logger = logging.getLogger("m1flow.runtime.stop_bound")
    logger.addHandler(handler)
    handler.acquire()  # a thread stuck mid-write holds the handler's lock
    try:
        called = threading.Event()
        StopBound(0.05, exit=lambda code: called.set()).arm()
        assert called.wait(10), "the exit waited on the log line"
    finally:
        handler.release()
        logger.removeHandler(handler)


def test_the_signal_arms_the_bound_while_the_main_thread_is_blocked_in_c():
    """The CI failure this mends: the main thread sat in librdkafka's synchronous commit, where Python
    cannot run a signal handler, so the clock started only when the call returned. libc's system()
    blocks the same way (it retries its wait on EINTR): the bound must still exit at its time."""
    script = textwrap.dedent("""
        import ctypes, os, signal, threading
        from m1flow.runtime.stop_bound import StopBound
        stop = threading.Event()
        StopBound(0.5).install(stop.set)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        ctypes.CDLL(None).system(b"exec sleep 20 >/dev/null 2>&1")  # not holding our pipes open
        os._exit(0 if stop.is_set() else 1)
    """)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], timeout=60, capture_output=True, text=True)
    took = time.monotonic() - started
    assert proc.returncode == EXIT_CODE, proc.stderr
    assert took < 15, f"exited after {took:.1f}s: the bound waited for the main thread"


def test_a_forked_childs_signal_does_not_stop_the_parent():
    """The wakeup socket is inherited by fork: a child's own SIGTERM must stay the child's."""
    script = textwrap.dedent("""
        import os, signal, threading, time
        from m1flow.runtime.stop_bound import StopBound
        stop = threading.Event()
        StopBound(0).install(stop.set)
        pid = os.fork()
        if pid == 0:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)
            os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.5)
        os._exit(1 if stop.is_set() else 0)
    """)
    proc = subprocess.run([sys.executable, "-c", script], timeout=60, capture_output=True, text=True)
    assert proc.returncode == 0, f"the child's SIGTERM stopped the parent: {proc.stderr}"


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
