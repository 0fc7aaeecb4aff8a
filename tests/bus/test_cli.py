"""The CLI against the session's real broker, and the broker lifecycle commands on their own."""
from __future__ import annotations

import pytest

import os
import subprocess
import sys

from m1flow.bus import Producer, codec
from m1flow.bus.topics import METRICS
from m1flow.contracts import events
from ops import ROOT


def m1flow(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "ops", *args], capture_output=True, text=True, cwd=ROOT,
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


@pytest.mark.slow  # every command as a process of its own: not the unit tier (make test-fast)
def test_without_a_broker_every_command_says_what_to_do_in_one_line(tmp_path):
    for args in (["status"], ["topics", "list"], ["dlq"], ["feed", "--n", "1"]):
        out = subprocess.run([sys.executable, "-m", "ops", "--run-dir", str(tmp_path), *args],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert out.returncode == 2, (args, out.stderr)
        assert "Traceback" not in out.stderr
        lines = [line for line in out.stderr.splitlines() if line.startswith("m1flow: error:")]
        assert len(lines) == 1 and "m1flow up" in lines[0], out.stderr
    unreachable = subprocess.run([sys.executable, "-m", "ops", "--bootstrap", "127.0.0.1:1", "status"],
                                 capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert unreachable.returncode == 2 and "Traceback" not in unreachable.stderr
    assert "cannot reach Kafka at 127.0.0.1:1" in unreachable.stderr


def test_dlq_names_the_consumer_group_of_each_letter(bootstrap):
    from m1flow.bus.topics import DLQ

    producer = Producer(bootstrap, "cli-dlq")
    for group in ("m1flow-learner", "m1flow-monitor"):  # one bad record, rejected by two groups
        letter = events.DeadLetter(header=codec.header(group, message_id=f"dlq:{group}:scored/0@7"),
                                   source_topic="scored", partition=0, offset=7, error="undecodable: bad magic",
                                   service=group.split("-")[1], consumer_group=group)
        producer.send(DLQ, "scored", letter)
    producer.flush()
    listing = m1flow("--bootstrap", bootstrap, "dlq").splitlines()
    rows = [line for line in listing if line.startswith("scored/0@7")]
    assert {row.split()[1] for row in rows} == {"m1flow-learner", "m1flow-monitor"}
    only = m1flow("--bootstrap", bootstrap, "dlq", "--group", "m1flow-monitor").splitlines()
    assert [row.split()[1] for row in only if row.startswith("scored/0@7")] == ["m1flow-monitor"]


def test_feeding_the_same_seed_twice_gives_fresh_prompt_ids(bootstrap):
    first = m1flow("--bootstrap", bootstrap, "feed", "--n", "2", "--seed", "5")
    second = m1flow("--bootstrap", bootstrap, "feed", "--n", "2", "--seed", "5")
    assert first.split("(")[1] != second.split("(")[1]


def test_the_cli_answers_as_python_m_ops_as_python_m_m1flow_and_as_bin_m1flow():
    """`python -m ops` is the CLI; `python -m m1flow` (older scripts and images) and `bin/m1flow` hand
    over to it, so all three print the same help."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    helps = [subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
             for command in ([sys.executable, "-m", "ops", "--help"], [sys.executable, "-m", "m1flow", "--help"],
                             [str(ROOT / "bin" / "m1flow"), "--help"])]
    assert [h.returncode for h in helps] == [0, 0, 0], [h.stderr for h in helps]
    assert helps[0].stdout.startswith("usage: m1flow") and helps[0].stdout == helps[1].stdout == helps[2].stdout
