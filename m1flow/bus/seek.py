"""Finding a few records in a large topic without reading it: only the partition a key lives on
(`partition_for`, the producers' murmur2), only the offsets a time range spans (the broker's
`offsets_for_times` index), and keys and raw bytes compared before any value is decoded.

`m1flow trace` and the replay comparison read through this; so does the monitor's per-group page.
librdkafka (confluent-kafka) does the fetching: 1.75M records read and their keys compared in 16 s
here, where kafka-python read and decoded 200k in 29 s (bench/README.md, bench/trace.py).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kafka.partitioner.default import murmur2

from m1flow.security.config import SecurityConfig, confluent

Match = Callable[[bytes | None, bytes | None], bool]  # (key, value) as stored, before decoding
BATCH = 10_000  # records per consume call
FIRST_CHUNK, MAX_CHUNK = 2048, 1 << 20  # a backward search reads chunks growing 4x from the end


def _refused(err: Any) -> bool:  # a confluent_kafka.KafkaError
    from confluent_kafka import KafkaError

    return err.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)


def partition_for(key: str | bytes, partitions: int) -> int:
    """The partition a keyed record lands on: Java's default partitioner (murmur2 of the key bytes,
    made positive, modulo the count), which both of m1flow's producer clients use (bus/producer.py)."""
    data = key.encode() if isinstance(key, str) else key
    return (murmur2(data) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True)
class Found:
    """One stored record, as the broker holds it (value still framed)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None

    @property
    def position(self) -> str:
        """topic/partition@offset, as logs and ScoredGroup.source_offsets name a record."""
        return f"{self.topic}/{self.partition}@{self.offset}"


def key_is(key: str | bytes) -> Match:
    """A match on the record key alone (the cheapest test: no value is touched)."""
    want = key.encode() if isinstance(key, str) else key
    return lambda k, _v: k == want


class PartitionReader:
    """Reads offset ranges of single partitions with a group-less consumer (it never joins or commits
    a group, so reading needs no group ACL). `records_read` counts what came over the wire."""

    def __init__(self, bootstrap: str, security: SecurityConfig | None = None, client_id: str = "m1flow-seek",
                 timeout_s: float = 30.0) -> None:
        from confluent_kafka import Consumer

        self.timeout_s = timeout_s
        self.records_read = 0
        self._config: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"{client_id}-unused",
            "enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": True,
            "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 8 * 1024 * 1024,
            "receive.message.max.bytes": 80 * 1024 * 1024, "fetch.wait.max.ms": 50, "log_level": 3,
            **confluent(security)}
        self._c = Consumer(self._config)
        self._counts: dict[str, int] = {}

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> PartitionReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def partitions(self, topic: str) -> int:
        """How many partitions `topic` has; 0 when it does not exist. PermissionError when this
        principal may not read it (the broker's ACLs)."""
        if topic not in self._counts:
            meta = self._c.list_topics(topic, timeout=self.timeout_s).topics.get(topic)
            if meta is not None and meta.error is not None and _refused(meta.error):
                raise PermissionError(f"not authorized to read {topic}: {meta.error}")
            ok = meta is not None and meta.error is None
            self._counts[topic] = len(meta.partitions) if ok else 0
        return self._counts[topic]

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(first, end) offsets of the partition: [first, end) is what it holds."""
        from confluent_kafka import TopicPartition

        marks = self._c.get_watermark_offsets(TopicPartition(topic, partition), timeout=self.timeout_s)
        if marks is None:
            raise TimeoutError(f"no offsets for {topic}/{partition} within {self.timeout_s:.0f}s: is the broker up?")
        return marks

    def offset_at(self, topic: str, partition: int, ts_ms: int) -> int:
        """The first offset whose timestamp is at or after ts_ms (the partition's end if none is)."""
        from confluent_kafka import TopicPartition

        found = self._c.offsets_for_times([TopicPartition(topic, partition, max(0, int(ts_ms)))],
                                          timeout=self.timeout_s)[0]
        if found.error is not None:
            raise RuntimeError(f"offsets_for_times on {topic}/{partition}: {found.error}")
        return found.offset if found.offset >= 0 else self.watermarks(topic, partition)[1]

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        """The offset consumer group `group` has committed on the partition (None: nothing). Asks
        the group's coordinator only; this reader never joins the group."""
        from confluent_kafka import Consumer, TopicPartition

        asking = Consumer({**self._config, "group.id": group})
        try:
            [found] = asking.committed([TopicPartition(topic, partition)], timeout=self.timeout_s)
        finally:
            asking.close()
        return found.offset if found.offset >= 0 else None

    def span(self, topic: str, partition: int, from_ms: int | None, to_ms: int | None) -> tuple[int, int]:
        """[start, stop) offsets of a time range (None: the partition's first or end offset)."""
        low, high = self.watermarks(topic, partition)
        start = low if from_ms is None else max(low, self.offset_at(topic, partition, from_ms))
        stop = high if to_ms is None else min(high, self.offset_at(topic, partition, to_ms))
        return start, max(start, stop)

    def read(self, topic: str, partition: int, start: int, stop: int) -> Iterator[Found]:
        """Every record of [start, stop), in offset order (compacted-away offsets are skipped)."""
        from confluent_kafka import KafkaError, TopicPartition

        if start >= stop:
            return
        self._c.assign([TopicPartition(topic, partition, start)])
        try:
            next_offset, idle_since = start, time.monotonic()
            while next_offset < stop:
                messages = self._c.consume(num_messages=min(BATCH, stop - next_offset), timeout=1.0)
                if not messages:
                    if time.monotonic() - idle_since > self.timeout_s:
                        raise TimeoutError(f"no records from {topic}/{partition} at offset {next_offset} "
                                           f"within {self.timeout_s:.0f}s: is the broker up?")
                    continue
                idle_since = time.monotonic()
                for msg in messages:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            return
                        if _refused(err):
                            raise PermissionError(f"not authorized to read {topic}: {err}")
                        raise RuntimeError(f"reading {topic}/{partition}: {err}")
                    offset = msg.offset()
                    if offset < next_offset:
                        continue  # fetched before this assignment
                    if offset >= stop:
                        return
                    self.records_read += 1
                    next_offset = offset + 1
                    yield Found(topic, partition, offset, msg.timestamp()[1], msg.key(), msg.value())
        finally:
            self._c.unassign()

    def scan(self, topic: str, partition: int, start: int, stop: int, match: Match) -> Iterator[Found]:
        """The records of [start, stop) that `match` accepts."""
        for rec in self.read(topic, partition, start, stop):
            if match(rec.key, rec.value):
                yield rec

    def newest(self, topic: str, partition: int, match: Match, start: int | None = None,
               stop: int | None = None) -> Found | None:
        """The last record of [start, stop) that `match` accepts, searched from the end backwards in
        chunks growing 4x: an id near the end costs one small read, an old one at most the range."""
        low, high = self.watermarks(topic, partition)
        floor = low if start is None else max(low, start)
        hi = high if stop is None else min(high, stop)
        size = FIRST_CHUNK
        while hi > floor:
            lo = max(floor, hi - size)
            found = None
            for rec in self.scan(topic, partition, lo, hi, match):
                found = rec
            if found is not None:
                return found
            hi, size = lo, min(size * 4, MAX_CHUNK)
        return None
