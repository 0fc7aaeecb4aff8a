"""TopicWatcher over the session's real broker, with each Kafka client: the whole history on the
first catch_up (however many polls), nothing twice, new records on poll, undecodable ones skipped,
an empty topic read at once, and no consumer group joined or committed."""
from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from m1flow.bus import Producer, codec
from m1flow.bus.admin import ensure_topics, group_lag
from m1flow.bus.topics import CONTROL
from m1flow.bus.watch import TopicWatcher
from m1flow.contracts import events


@pytest.fixture(params=["kafka-python", "confluent-kafka"])
def client(request) -> str:  # noqa: ANN001
    return request.param


@pytest.fixture
def topic(bootstrap):  # noqa: ANN001
    suffix = f"watch-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, (CONTROL,), suffix=suffix)
    return replace(CONTROL, name=f"{CONTROL.name}.{suffix}")


def command(reason: str) -> events.Control:
    return events.Control(header=codec.header("test"), reason=reason, pause=events.Pause())


def test_catch_up_reads_the_whole_history_then_poll_the_new(bootstrap, topic, client):
    empty = TopicWatcher(bootstrap, (topic,), "test-watch-empty", client=client)
    assert empty.catch_up(timeout_s=30) == []  # an empty topic is read at once, not waited on
    empty.close()
    producer = Producer(bootstrap, "test-watch")
    for i in range(1200):  # more than one poll's 500
        producer.send(topic.name, "command", command(f"c{i}"))
    producer.send_bytes(topic.name, "command", b"not a frame")
    producer.flush()
    group = f"test-watch-{uuid.uuid4().hex[:6]}"
    watcher = TopicWatcher(bootstrap, (topic,), "test-watch", group_id=group, client=client)
    history = watcher.catch_up(timeout_s=60)
    assert [m.reason for m in history] == [f"c{i}" for i in range(1200)]
    assert watcher.catch_up(timeout_s=30) == []  # at the end already: nothing again
    producer.send(topic.name, "command", command("later"))
    producer.flush()
    later = []
    for _ in range(100):
        later += watcher.poll(timeout_ms=200)
        if later:
            break
    assert [m.reason for m in later] == ["later"]
    watcher.close()
    producer.close()
    assert not group_lag(bootstrap, group)  # the group id was never joined nor committed under
