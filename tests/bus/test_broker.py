"""The local broker's start-up and stop: liveness from the child it owns, nothing left behind by a
failed start, and a broker that must move to new ports keeps its data."""
from __future__ import annotations

import socket

import psutil
import pytest
from kafka import KafkaProducer

from m1flow.bus.admin import end_offsets, ensure_topics
from ops.kafka import Broker, BrokerError

pytestmark = pytest.mark.slow  # brokers of its own: not the unit tier (make test-fast)


def java_children_of(pid: int) -> bool:
    try:
        return psutil.Process(pid).is_running() and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_start_trusts_its_own_child_not_a_command_line_read(tmp_path, monkeypatch):
    """Under load the child can still look like its Python parent (not yet exec'd) when start-up
    checks on it; a command-line match then said 'exited' and left the JVM running as an orphan."""
    monkeypatch.setattr(psutil.Process, "cmdline", lambda self: ["python", "-m", "pytest"])
    broker = Broker(tmp_path)
    try:
        bootstrap = broker.start()
        assert broker.running() and bootstrap == broker.bootstrap
        pid = broker.state().pid
        assert Broker(tmp_path).running()  # another handle finds it by pid and create time
    finally:
        broker.stop()
    assert not java_children_of(pid)
    assert not Broker(tmp_path).running()


def test_a_failed_start_leaves_nothing_running(tmp_path, monkeypatch):
    def never_ready(self, timeout):  # noqa: ANN001
        raise BrokerError("not ready (simulated)")

    monkeypatch.setattr(Broker, "wait_ready", never_ready)
    broker = Broker(tmp_path)
    with pytest.raises(BrokerError, match="simulated"):
        broker.start()
    pid = broker.state().pid
    assert pid and not java_children_of(pid)


def test_a_taken_port_moves_the_broker_and_keeps_its_data(tmp_path):
    broker = Broker(tmp_path)
    blocker = socket.socket()
    try:
        bootstrap = broker.start()
        ensure_topics(bootstrap)
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        for _ in range(5):
            producer.send("prompts", b"kept", partition=0)
        producer.flush()
        producer.close()
        old_port = broker.state().port
        broker.stop()
        blocker.bind(("127.0.0.1", old_port))
        blocker.listen()
        moved = broker.start()
        assert broker.state().port != old_port
        assert end_offsets(moved, "prompts")[0] == 5  # never wipe a broker's data silently
    finally:
        blocker.close()
        broker.stop()


@pytest.fixture
def busy_cpus():
    """Busy loops on more processes than there are cores: a newcomer's loaded machine."""
    import os
    import subprocess
    import sys

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 2))]
    yield
    for hog in hogs:
        hog.kill()
        hog.wait()


def test_the_broker_starts_and_stops_cleanly_on_a_starved_machine(tmp_path, busy_cpus):
    broker = Broker(tmp_path)
    try:
        bootstrap = broker.start()
        ensure_topics(bootstrap)
        assert broker.running()
    finally:
        broker.stop()
    pid = broker.state().pid
    assert not java_children_of(pid)
