"""The bus producer over each Kafka client, on the session's real broker: flush counts what it
acknowledged, a key lands on the same partition whichever client wrote it (librdkafka is told
Java's murmur2), the framed value reads back, and a broker that never answers fails the flush."""
from __future__ import annotations

import gc
import time

import pytest
from kafka import KafkaConsumer
from kafka.admin import NewTopic
from kafka.errors import KafkaError

from m1flow.bus import Producer, codec
from m1flow.bus.admin import admin_client
from m1flow.bus.producer import ProduceError
from m1flow.contracts import events


@pytest.fixture(scope="module")
def topic(bootstrap) -> str:  # noqa: ANN001
    name = f"producer-clients-{time.time_ns()}"
    admin = admin_client(bootstrap)
    admin.create_topics([NewTopic(name, num_partitions=4, replication_factor=1)])
    admin.close()
    return name


def read(bootstrap: str, topic: str, n: int) -> list:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10_000)
    out = []
    for record in consumer:
        out.append(record)
        if len(out) >= n:
            break
    consumer.close()
    return out


def test_both_clients_put_a_key_on_one_partition_and_flush_counts_the_acks(bootstrap, topic):
    keys = [f"k{i}" for i in range(40)]
    for client in ("kafka-python", "confluent-kafka"):
        producer = Producer(bootstrap, f"test-{client}", client=client)
        for key in keys:
            producer.send(topic, key, events.Control(header=codec.header("test"), reason=f"{client}|{key}"))
        assert producer.flush() == len(keys)
        assert producer.flush() == 0
        producer.close()
    batched = Producer(bootstrap, "test-batch", client="confluent-kafka")  # send_many: librdkafka's produce_batch
    outcomes: list = []
    batched.send_many([(topic, key, codec.encode(events.Control(header=codec.header("test"), reason=f"batch|{key}")))
                       for key in keys], outcomes.append)
    batched.flush()
    assert outcomes == [None] * len(keys)
    batched.close()
    records = read(bootstrap, topic, 3 * len(keys))
    assert len(records) == 3 * len(keys)
    where: dict[bytes, set[int]] = {}
    writers: dict[bytes, set[str]] = {}
    for r in records:
        message = codec.decode(r.value, events.Control)
        where.setdefault(r.key, set()).add(r.partition)
        writers.setdefault(r.key, set()).add(message.reason.split("|")[0])
    assert all(len(p) == 1 for p in where.values()), where  # the same partition from both clients
    assert all(w == {"kafka-python", "confluent-kafka", "batch"} for w in writers.values())
    assert len({p for ps in where.values() for p in ps}) > 1  # keys do spread over partitions


def test_confluent_flush_raises_when_nothing_is_acknowledged():
    producer = Producer("127.0.0.1:1", "test-away", client="confluent-kafka")
    producer.send("control", "k", events.Control(header=codec.header("test"), reason="x"))
    with pytest.raises(ProduceError) as err:
        producer.flush(timeout=1.0)
    assert isinstance(err.value, KafkaError) and "not acknowledged" in str(err.value)
    producer._impl._producer.purge()  # nothing left to wait for when it is destroyed
    producer._impl._producer.poll(0)
    del err, producer  # the traceback held it in a cycle: its broker thread retried 127.0.0.1:1 all session
    gc.collect()


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_delivery_reports_arrive_on_the_callers_thread_once_per_record(bootstrap, topic, client):
    import threading

    producer = Producer(bootstrap, f"test-dr-{client}", client=client)
    outcomes: list[tuple[Exception | None, str]] = []
    report = lambda error: outcomes.append((error, threading.current_thread().name))  # noqa: E731
    value = codec.encode(events.Control(header=codec.header("test"), reason="dr"))
    producer.send_many([(topic, f"m{i}", value) for i in range(30)], report)
    for i in range(10):
        producer.send_bytes(topic, f"b{i}", value, on_delivery=report)
    deadline = time.monotonic() + 30
    while len(outcomes) < 40 and time.monotonic() < deadline:
        producer.poll(0.1)
    assert len(outcomes) == 40 and all(error is None for error, _ in outcomes)
    assert {name for _, name in outcomes} == {threading.current_thread().name}
    assert producer.flush() == 0  # records sent with on_delivery are reported to it, not counted here
    producer.close()


def test_a_record_that_is_not_delivered_is_reported_as_an_error():
    producer = Producer("127.0.0.1:1", "test-dr-away", client="confluent-kafka")
    outcomes: list = []
    producer.send_bytes("control", "k", b"x", on_delivery=outcomes.append)
    producer._impl._producer.purge()  # librdkafka reports a purged record as failed
    producer.poll(1.0)
    assert len(outcomes) == 1 and isinstance(outcomes[0], ProduceError)


def test_send_many_sends_again_what_a_full_queue_refused(bootstrap, topic):
    """produce_batch enqueues what fits and marks the rest; those go again once reports free room,
    so each record is reported exactly once and none is lost."""
    from confluent_kafka import Producer as RdProducer

    producer = Producer(bootstrap, "test-full", client="confluent-kafka")
    producer._impl._producer = RdProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                           "queue.buffering.max.messages": 8})  # room for 8 of the 50
    outcomes: list = []
    producer.send_many([(topic, f"full{i}", b"v%d" % i) for i in range(50)], outcomes.append)
    producer.flush()
    assert len(outcomes) == 50 and all(error is None for error in outcomes)
    values = {r.value for r in read(bootstrap, topic, 10_000) if r.key and r.key.startswith(b"full")}
    assert values == {b"v%d" % i for i in range(50)}
    producer.close()


def value_for(key: bytes, size: int) -> int:
    """The value length that makes the record's batch `size` bytes."""
    from m1flow.bus.limits import record_size

    value = size - record_size(key, 0)
    while record_size(key, value) > size:
        value -= 1
    return value


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_a_record_over_the_bus_limit_is_refused_before_sending_by_its_place(bootstrap, topic, client):
    """send_many reports a record over m1flow.bus.limits as RecordRefused with its place in the list
    and delivers the others; send_bytes without a callback raises it. Neither client sees the record."""
    from m1flow.bus.limits import MESSAGE_MAX_BYTES
    from m1flow.bus.producer import RecordRefused

    huge = b"h" * MESSAGE_MAX_BYTES
    producer = Producer(bootstrap, f"test-over-{client}", client=client)
    outcomes: list = []
    producer.send_many([(topic, f"over-{client}-a", b"a"), (topic, "huge", huge), (topic, f"over-{client}-b", b"b")],
                       outcomes.append)
    producer.flush()
    assert len(outcomes) == 3 and [e.index for e in outcomes if e is not None] == [1]
    refused = next(e for e in outcomes if e is not None)
    assert isinstance(refused, RecordRefused) and refused.code == "too_large" and "record too large" in refused.reason
    with pytest.raises(RecordRefused, match="record too large"):
        producer.send_bytes(topic, "huge", huge)
    producer.close()
    keys = {r.key for r in read(bootstrap, topic, 10_000) if r.key and r.key.startswith(b"over-")}
    assert {f"over-{client}-a".encode(), f"over-{client}-b".encode()} <= keys


def test_a_record_the_broker_refuses_is_reported_refused_by_its_place_and_the_rest_delivered(bootstrap):
    """On a topic whose limit is lower than the bus's (max.message.bytes, above batch.size so a record
    over it travels alone), the broker takes a record whose batch is exactly the limit and refuses
    one a byte over (m1flow.bus.limits.record_size is the broker's count): librdkafka's report is
    found in the list (RecordRefused with its index), the records around it are delivered.
    (kafka-python's idempotent producer fails every record in flight after such a refusal: its later
    reports are never taken for refusals, m1flow/bus/producer.py.)"""
    from m1flow.bus.limits import record_size
    from m1flow.bus.producer import RecordRefused

    limit = 1_200_000
    name = f"refusing-{time.time_ns()}"
    admin = admin_client(bootstrap)
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1,
                                  topic_configs={"max.message.bytes": str(limit)})])
    admin.close()
    fits, over = b"y" * value_for(b"fit", limit), b"z" * (value_for(b"big", limit) + 1)
    assert record_size(b"fit", len(fits)) == limit and record_size(b"big", len(over)) == limit + 1
    records = [(name, "a", b"a"), (name, "fit", fits), (name, "b", b"b"), (name, "big", over), (name, "c", b"c")]
    producer = Producer(bootstrap, "test-refused", client="confluent-kafka")
    outcomes: list = []
    producer.send_many(records, outcomes.append)
    producer.flush()
    assert len(outcomes) == 5 and [(e.index, e.code) for e in outcomes if e is not None] == [(3, "too_large")]
    assert all(isinstance(e, RecordRefused) for e in outcomes if e is not None)
    producer.close()
    assert sorted(r.key for r in read(bootstrap, name, 4)) == [b"a", b"b", b"c", b"fit"]
