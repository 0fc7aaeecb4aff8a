"""The bus producer over each Kafka client, on the session's real broker: flush counts what it
acknowledged, a key lands on the same partition whichever client wrote it (librdkafka is told
Java's murmur2), the framed value reads back, and a broker that never answers fails the flush."""
from __future__ import annotations

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
    records = read(bootstrap, topic, 2 * len(keys))
    assert len(records) == 2 * len(keys)
    where: dict[bytes, set[int]] = {}
    writers: dict[bytes, set[str]] = {}
    for r in records:
        message = codec.decode(r.value, events.Control)
        where.setdefault(r.key, set()).add(r.partition)
        writers.setdefault(r.key, set()).add(message.reason.split("|")[0])
    assert all(len(p) == 1 for p in where.values()), where  # the same partition from both clients
    assert all(w == {"kafka-python", "confluent-kafka"} for w in writers.values())
    assert len({p for ps in where.values() for p in ps}) > 1  # keys do spread over partitions


def test_confluent_flush_raises_when_nothing_is_acknowledged():
    producer = Producer("127.0.0.1:1", "test-away", client="confluent-kafka")
    producer.send("control", "k", events.Control(header=codec.header("test"), reason="x"))
    with pytest.raises(ProduceError) as err:
        producer.flush(timeout=1.0)
    assert isinstance(err.value, KafkaError) and "not acknowledged" in str(err.value)
    producer._impl._producer.purge()  # nothing left to wait for when it is collected
