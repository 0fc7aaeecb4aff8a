"""During a broker outage every Kafka client logs a connection error per reconnect attempt: the
log keeps the first and a count, so the real errors around them stay readable."""
from __future__ import annotations

import io
import json
import logging

import pytest

from m1flow.runtime import logs


@pytest.fixture
def root_logging():
    """logs.setup replaces the root logger's handlers and level; put them back afterwards."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level, logging.getLogger("kafka").level
    yield
    root.handlers[:], root.level = saved[0], saved[1]
    logging.getLogger("kafka").setLevel(saved[2])


def test_repeated_kafka_connection_errors_collapse_into_one_line_with_a_count(monkeypatch, root_logging):
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    logs.setup("test", json_lines=True)
    kafka = logging.getLogger("kafka.net.manager")
    ours = logging.getLogger("svc_test")
    for _ in range(50):
        kafka.error("Connection failed: %s", "KafkaConnectionError: 111 ECONNREFUSED")
    ours.error("the real problem")
    ours.error("the real problem")  # our own lines are never collapsed
    lines = [json.loads(line)["msg"] for line in stream.getvalue().splitlines()]
    assert lines.count("Connection failed: KafkaConnectionError: 111 ECONNREFUSED") == 1
    assert lines.count("the real problem") == 2
    assert len(lines) == 3


def test_the_summary_says_how_many_were_suppressed(monkeypatch):
    filt = logs.RepeatFilter(every_s=0.0)
    rec = logging.LogRecord("kafka.x", logging.ERROR, __file__, 1, "Connection failed: %s", ("x",), None)
    assert filt.filter(rec)
    slow = logs.RepeatFilter(every_s=3600)
    assert slow.filter(rec)
    for _ in range(5):
        assert not slow.filter(logging.LogRecord("kafka.x", logging.ERROR, __file__, 1, "Connection failed: %s", ("x",), None))
    slow._last[next(iter(slow._last))] = (-1e9, 5)  # the window has passed
    last = logging.LogRecord("kafka.x", logging.ERROR, __file__, 1, "Connection failed: %s", ("x",), None)
    assert slow.filter(last) and "5 like messages" in last.getMessage()
