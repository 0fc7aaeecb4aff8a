"""Both consumers' poll over the real broker: it returns as soon as a record is there, not after its
timeout, and still hands over every record that arrived together (up to max_records).

librdkafka's consume(n, timeout) waits out the whole timeout unless n records come: with the
pipeline's 200 ms polls that put up to 200 ms on every hop (prompt -> rollout -> score -> learner
batch), seen as learner waits in multiples of 0.2 s in bench/pipeline.py."""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from m1flow.bus import Producer, codec
from m1flow.bus.clients import Settings, consumer
from m1flow.contracts import events
from tests.bus.test_worker_broker import fresh_topic


def group_state(reader) -> str:
    """What kafka-python's coordinator believes, for a join that never ends in an assignment."""
    inner = getattr(reader, "_c", None)
    coordinator = getattr(inner, "_coordinator", None)
    if coordinator is None:
        return "(no kafka-python coordinator)"
    fields = ("state", "_generation", "_assignment_snapshot", "_metadata_snapshot", "_joined_subscription",
              "rejoin_needed", "_join_task", "coordinator_id")
    seen = {name: getattr(coordinator, name, "?") for name in fields}
    try:
        seen["need_rejoin()"] = coordinator.need_rejoin()
        seen["coordinator_unknown()"] = coordinator.coordinator_unknown()
    except Exception as exc:  # noqa: BLE001 - a diagnostic, never the failure itself
        seen["error"] = repr(exc)
    return ", ".join(f"{k}={v!r}" for k, v in seen.items())


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_poll_returns_with_the_first_record_and_takes_what_came_with_it(bootstrap, client):
    topic = fresh_topic(bootstrap, f"poll-{uuid.uuid4().hex[:8]}", partitions=1)
    producer = Producer(bootstrap, "test-poll")
    reader = consumer(client, Settings(bootstrap, f"g-{uuid.uuid4().hex[:8]}", "poll", None, 10_000, 60_000, 100))
    reader.subscribe([topic.name], on_assigned=lambda parts: None, on_revoked=lambda parts: None)

    def send(n: int) -> None:
        for i in range(n):
            producer.send(topic, f"k{i}", events.Control(header=codec.header("t"), reason=f"r{i}"))
        producer.flush()

    try:
        deadline = time.monotonic() + 60  # joined and assigned (an empty topic: nothing to read yet)
        while not reader.assignment() and time.monotonic() < deadline:
            reader.poll(200, 100)
        assert reader.assignment(), f"never assigned: {group_state(reader)}"
        send(5)  # five together, before the poll: one poll hands over all of them
        got, deadline = 0, time.monotonic() + 30
        while got < 5 and time.monotonic() < deadline:
            got += sum(len(r) for r in reader.poll(10_000, 100).values())
        assert got == 5
        waits = []
        for _ in range(3):  # one record 0.1 s into a 20 s poll: back with it, not after 20 s
            timer = threading.Timer(0.1, send, args=(1,))
            timer.start()
            started, got = time.monotonic(), 0
            while not got and time.monotonic() - started < 30:  # a poll may also return empty early
                got = sum(len(r) for r in reader.poll(20_000, 100).values())
            waits.append(time.monotonic() - started)
            timer.join()
            assert got == 1
        assert max(waits) < 10, waits  # far below the timeout, with room for a loaded machine
    finally:
        reader.close()
        producer.close()


def test_kafka_python_member_left_rebalancing_with_no_rejoin_pending_rejoins(bootstrap):
    """kafka-python 3.0 can leave a member REBALANCING with need_rejoin() false (a rejoin asked for by
    a metadata change, whose snapshot the leader's own assignment then updated mid-join): no later poll
    finishes the join, so the member is never assigned and every commit is refused as a rebalance.
    The wrapper's poll asks for the rejoin; here the state is set as the stressed runs found it."""
    from kafka.coordinator.base import MemberState

    topic = fresh_topic(bootstrap, f"poll-wedge-{uuid.uuid4().hex[:8]}", partitions=1)
    reader = consumer("kafka-python", Settings(bootstrap, f"g-{uuid.uuid4().hex[:8]}", "wedge", None,
                                               10_000, 60_000, 100))
    reader.subscribe([topic.name], on_assigned=lambda parts: None, on_revoked=lambda parts: None)
    try:
        deadline = time.monotonic() + 60
        while not reader.assignment() and time.monotonic() < deadline:
            reader.poll(200, 100)
        coordinator = reader._c._coordinator
        assert reader.assignment() and coordinator.state is MemberState.STABLE, group_state(reader)
        with coordinator._lock:  # what a lost join completion leaves behind
            coordinator.state = MemberState.REBALANCING
            coordinator.rejoin_needed = False
            coordinator._join_task = None
        assert not coordinator.need_rejoin()
        deadline = time.monotonic() + 60
        while coordinator.state is not MemberState.STABLE and time.monotonic() < deadline:
            reader.poll(200, 100)
        assert coordinator.state is MemberState.STABLE and reader.assignment() == {(topic.name, 0)}, group_state(reader)
    finally:
        reader.close()


def test_confluent_pause_reaches_librdkafka_only_once_it_lasts(bootstrap):
    """librdkafka fetches a resumed partition only at its next timer (~0.5 s, bench/pause_resume.py), so
    the wrapper pauses in librdkafka only a pause that lasts PAUSE_AFTER_S. A short pause: records come
    with the next polls and none is lost. A lasting one: nothing is handed over until resumed, then
    every record once, in order."""
    from m1flow.bus.clients import PAUSE_AFTER_S

    topic = fresh_topic(bootstrap, f"pause-{uuid.uuid4().hex[:8]}", partitions=1)
    tp = (topic.name, 0)
    producer = Producer(bootstrap, "test-pause")
    reader = consumer("confluent-kafka", Settings(bootstrap, f"g-{uuid.uuid4().hex[:8]}", "pause", None,
                                                  10_000, 60_000, 100))
    reader.subscribe([topic.name], on_assigned=lambda parts: None, on_revoked=lambda parts: None)

    def send(tag: str, n: int) -> None:
        for i in range(n):
            producer.send(topic, f"{tag}{i}", events.Control(header=codec.header("t"), reason=f"{tag}{i}"))
        producer.flush()

    def take(n: int, within_s: float) -> list[str]:
        keys, deadline = [], time.monotonic() + within_s
        while len(keys) < n and time.monotonic() < deadline:
            keys += [r.key.decode() for recs in reader.poll(100, 100).values() for r in recs]
        return keys

    try:
        deadline = time.monotonic() + 60
        while not reader.assignment() and time.monotonic() < deadline:
            reader.poll(200, 100)
        assert reader.assignment() == {tp}, f"never assigned: {group_state(reader)}"
        reader.pause({tp})  # short: resumed before it lasts
        send("a", 3)
        assert reader.paused() == {tp} and tp in reader._pausing  # not yet paused in librdkafka
        reader.resume({tp})
        assert take(3, 30) == ["a0", "a1", "a2"] and not reader.paused()
        reader.pause({tp})  # lasting: polled past PAUSE_AFTER_S, then records arrive
        stop = time.monotonic() + PAUSE_AFTER_S + 0.5
        early = []
        while time.monotonic() < stop:
            early += [r.key.decode() for recs in reader.poll(100, 100).values() for r in recs]
        assert not early and tp not in reader._pausing and reader.paused() == {tp}
        send("b", 3)
        assert take(3, 2.0) == []  # paused in librdkafka: nothing handed over
        reader.resume({tp})
        assert take(3, 30) == ["b0", "b1", "b2"]
        assert take(1, 1.0) == []  # each once
    finally:
        reader.close()
        producer.close()
