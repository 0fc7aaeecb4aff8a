"""A static member fenced out of its group (librdkafka: a fatal error, the consumer unusable for good)
starts a new consumer under the same instance id and reads again.

Seen in `test_broker_outage_of_ten_seconds`: after the broker's restart the rollout's consumer was
"fenced by other consumer with same group.instance.id" (itself, under a member id whose JoinGroup
answer it never got) and stayed out of its group, reading nothing, until the test gave up.
"""
from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer as RdConsumer

from m1flow.bus import Producer, codec
from m1flow.bus.clients import ConfluentConsumer, Settings
from m1flow.contracts import events
from tests.bus.test_worker_broker import fresh_topic


def poll_until(consumer: ConfluentConsumer, want: int, timeout_s: float) -> int:
    got, deadline = 0, time.monotonic() + timeout_s
    while got < want and time.monotonic() < deadline:
        got += sum(len(r) for r in consumer.poll(timeout_ms=200, max_records=100).values())
    return got


def test_a_fenced_static_member_comes_back_under_its_instance_id(bootstrap):
    topic = fresh_topic(bootstrap, f"fenced-{uuid.uuid4().hex[:8]}", partitions=2)
    group, instance = f"g-{uuid.uuid4().hex[:8]}", "replica-0"
    producer = Producer(bootstrap, "test-fenced")
    for i in range(10):
        producer.send(topic, f"k{i}", events.Control(header=codec.header("t"), reason=f"r{i}"))
    producer.flush()
    revoked: list[set] = []
    ours = ConfluentConsumer(Settings(bootstrap, group, "ours", instance, 10_000, 60_000, 100))
    ours.subscribe([topic.name], on_assigned=lambda parts: None, on_revoked=revoked.append)
    try:
        assert poll_until(ours, 10, 60) == 10
        # another member joins under the same instance id: the broker fences ours
        rival = RdConsumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
                            "session.timeout.ms": 10_000, "auto.offset.reset": "earliest",
                            "partition.assignment.strategy": "cooperative-sticky"})
        rival.subscribe([topic.name])
        deadline = time.monotonic() + 60
        while not rival.assignment() and time.monotonic() < deadline:
            rival.poll(0.2)
        assert rival.assignment(), "the rival never joined"
        rival.close()
        for i in range(10, 15):
            producer.send(topic, f"k{i}", events.Control(header=codec.header("t"), reason=f"r{i}"))
        producer.flush()
        # ours sees the fatal fence, starts over under the same instance id and reads the group's
        # uncommitted records again (nothing was committed: all 15)
        assert poll_until(ours, 15, 90) >= 5
        assert revoked and ours.assignment() == {(topic.name, 0), (topic.name, 1)}
    finally:
        ours.close()
        producer.close()
