"""Follow small state topics (`policy`, `control`) from their beginning without a consumer group.

Every replica must see every policy announcement and control command, so these are read by
assignment, not by a group that would split partitions between replicas. Replaying the whole
topic on start rebuilds the current state (the newest policy, the current window, paused or not);
`catch_up` reads up to the end the topic had when the watcher started, however many polls that
takes, so the state is the newest one and not whatever the first poll happened to return.
"""
from __future__ import annotations

import logging
import time

from google.protobuf.message import Message
from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from m1flow.bus import codec
from m1flow.bus.topics import TopicSpec
from m1flow.security.config import SecurityConfig, kafka_python as kafka_security

log = logging.getLogger(__name__)


class TopicWatcher:
    def __init__(self, bootstrap: str, topics: tuple[TopicSpec, ...], client_id: str,
                 security: SecurityConfig | None = None) -> None:
        self.specs = {t.name: t for t in topics}
        self.consumer = KafkaConsumer(**kafka_security(security), bootstrap_servers=bootstrap, client_id=client_id, group_id=None,
                                      enable_auto_commit=False, fetch_max_wait_ms=50,
                                      reconnect_backoff_max_ms=2000)
        parts = []
        for spec in topics:
            partitions = self.consumer.partitions_for_topic(spec.name) or set(range(spec.partitions))
            parts += [TopicPartition(spec.name, p) for p in sorted(partitions)]
        self.consumer.assign(parts)
        self.consumer.seek_to_beginning(*parts)
        self.parts = parts

    def poll(self, timeout_ms: int = 0) -> list[Message]:
        """Messages that arrived since the last poll, oldest first; undecodable ones are logged and skipped."""
        out: list[Message] = []
        batches = self.consumer.poll(timeout_ms=timeout_ms, max_records=500)
        for tp, records in batches.items():
            for rec in records:
                try:
                    out.append(codec.decode(rec.value, self.specs[tp.topic].value_type))
                except codec.CodecError as exc:
                    log.warning("skipping undecodable %s/%s@%s: %s", tp.topic, tp.partition, rec.offset, exc)
        out.sort(key=lambda m: m.header.created_unix_ms)
        return out

    def catch_up(self, timeout_s: float = 60.0) -> list[Message]:
        """Everything up to the topics' current end, oldest first (the whole history on a first call).

        Raises TimeoutError if the end is not reached in time (broker away): the caller decides
        whether to wait longer; returning a partial history would pick a stale state.
        """
        ends = self.consumer.end_offsets(self.parts)
        deadline = time.monotonic() + timeout_s
        out: list[Message] = []
        while any(self.consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                behind = {f"{tp.topic}/{tp.partition}": end - self.consumer.position(tp) for tp, end in ends.items()}
                raise TimeoutError(f"state topics not read to their end within {timeout_s:.0f}s: {behind}")
            out += self.poll(timeout_ms=200)
        out.sort(key=lambda m: m.header.created_unix_ms)
        return out

    def close(self) -> None:
        self.consumer.close()
