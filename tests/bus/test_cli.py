"""The CLI against the session's real broker, and the broker lifecycle commands on their own."""
from __future__ import annotations

import subprocess
import sys

from m1flow.bus import Producer, codec
from m1flow.bus.topics import METRICS
from m1flow.contracts import events
from m1flow.launcher import ROOT


def m1flow(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "m1flow", *args], capture_output=True, text=True, cwd=ROOT,
                         timeout=180)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_topics_dump_and_status(bootstrap):
    producer = Producer(bootstrap, "cli-test")
    producer.send(METRICS, "x", events.Metric(header=codec.header("x"), service="x", name="n", value=2.5))
    producer.send_bytes(METRICS, "x", b"garbage")
    producer.flush()
    listing = m1flow("--bootstrap", bootstrap, "topics", "list")
    assert "rollouts" in listing and "ScoredGroup" in listing
    dump = m1flow("--bootstrap", bootstrap, "topics", "dump", "--topic", "metrics").splitlines()
    assert any('"value": 2.5' in line for line in dump)
    assert any("bad magic" in line for line in dump)
    assert "lag" in m1flow("--bootstrap", bootstrap, "status")


def test_kafka_start_status_stop(tmp_path):
    run = ["--run-dir", str(tmp_path)]
    address = m1flow(*run, "kafka", "start").strip()
    assert address.startswith("127.0.0.1:")
    assert m1flow(*run, "kafka", "status").startswith("running")
    assert m1flow(*run, "kafka", "start").strip() == address  # idempotent: finds the running node
    m1flow(*run, "kafka", "stop")
    assert m1flow(*run, "kafka", "status").startswith("stopped")
