"""The consume -> handle -> produce -> acknowledge -> commit loop every service runs.

The order inside one cycle is the guarantee: outputs are flushed (acknowledged by the broker)
before the input offsets are committed, and only offsets below the oldest record a handler still
holds are committed. A crash therefore replays, never skips. A record that cannot be decoded or
handled goes to `dlq` with the reason and the loop goes on.
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from typing import Protocol

from google.protobuf.message import Message
from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition

from m1flow.bus import codec
from m1flow.bus.dedupe import SeenIds
from m1flow.bus.offsets import OffsetTracker
from m1flow.bus.producer import Producer
from m1flow.bus.records import Record
from m1flow.bus.topics import DLQ, METRICS, TopicSpec, spec
from m1flow.contracts import events

log = logging.getLogger(__name__)


def _key(record: Record) -> tuple[str, int, int]:
    return record.topic, record.partition, record.offset


class Context:
    """What a handler may do: emit events, hold records until their outputs exist, report metrics."""

    def __init__(self, worker: "StreamWorker") -> None:
        self._worker = worker
        self.producer: Producer = worker.producer
        self.service = worker.service
        self.group_id = worker.group_id
        self._held: set[tuple[str, int, int]] = set()

    def emit(self, topic: TopicSpec | str, key: str | bytes | None, message: Message) -> None:
        self.producer.send(topic, key, message)

    def hold(self, record: Record) -> None:
        """Keep `record` uncommitted after handle() returns, until release()."""
        self._held.add(_key(record))

    def holds(self, record: Record) -> bool:
        return _key(record) in self._held

    def drop_hold(self, record: Record) -> None:
        """Forget a hold without committing (the record is dead-lettered instead)."""
        self._held.discard(_key(record))

    def release(self, records: list[Record]) -> None:
        """The outputs of these records have been emitted: they may be committed after the next flush."""
        for rec in records:
            self._held.discard(_key(rec))
            self._worker.tracker.done(rec.topic, rec.partition, rec.offset)

    def metric(self, name: str, value: float, step: int = 0, **labels: str) -> None:
        msg = events.Metric(header=codec.header(self.service), service=self.service, name=name,
                            value=float(value), step=step, labels=labels)
        self.producer.send(METRICS, self.service, msg)

    def dead_letter(self, record: Record, error: str) -> None:
        self._worker.dead_letter(record, error)

    def lag(self) -> int:
        """Records between this consumer's position and the end of its input (see StreamWorker.lag)."""
        return self._worker.lag()


class Handler(Protocol):
    """topics: what to consume. A handler may set `dead_letter_errors` to the exception types that
    mean "this message is bad" (default: any Exception); anything else propagates and stops the
    service, which then resumes from its committed offsets instead of discarding good input."""

    topics: tuple[TopicSpec, ...]

    def handle(self, message: Message, record: Record, ctx: Context) -> None: ...

    def tick(self, ctx: Context) -> None: ...

    def on_revoked(self, partitions: set[tuple[str, int]]) -> None: ...


class HandlerBase:
    """Defaults for handlers with no periodic work and no per-partition state."""

    def tick(self, ctx: Context) -> None:
        pass

    def on_revoked(self, partitions: set[tuple[str, int]]) -> None:
        pass


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, worker: "StreamWorker") -> None:
        self.worker = worker

    def on_partitions_revoked(self, revoked):  # noqa: ANN001 - kafka-python signature
        self.worker._on_revoked({(tp.topic, tp.partition) for tp in revoked})

    def on_partitions_assigned(self, assigned):  # noqa: ANN001
        log.info("assigned %s", sorted(f"{tp.topic}/{tp.partition}" for tp in assigned))


class StreamWorker:
    def __init__(self, bootstrap: str, group_id: str, handler: Handler, service: str,
                 producer: Producer | None = None, poll_ms: int = 200, max_records: int = 256,
                 client_id: str | None = None, session_timeout_ms: int = 20_000,
                 start_offsets: dict[str, int] | None = None,
                 stop_offsets: dict[str, int] | None = None, output_suffix: str = "") -> None:
        """start_offsets: None to join the group and resume from its commits; a dict
        ("topic/partition" -> offset, missing ones from the beginning) to own every partition and
        resume from positions the caller stored itself (the learner keeps them in its checkpoint).
        stop_offsets: replay mode; records at or past these offsets are left alone, and
        `finished` turns true once every listed partition got there with nothing in flight."""
        self.stop_offsets = stop_offsets
        self.group_id = group_id
        self.handler = handler
        self.service = service
        self.poll_ms = poll_ms
        self.max_records = max_records
        self.producer = producer or Producer(bootstrap, client_id or service, suffix=output_suffix)
        self.tracker = OffsetTracker()
        self.seen = SeenIds()
        self.stats = {"handled": 0, "dead_lettered": 0, "duplicates": 0, "commits": 0}
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group_id, client_id=client_id or service,
            enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=max_records,
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=1000,
            max_poll_interval_ms=600_000, fetch_max_wait_ms=100, reconnect_backoff_max_ms=2000,
            max_partition_fetch_bytes=4 * 1024 * 1024, receive_message_max_bytes=64 * 1024 * 1024)
        for topic in handler.topics:  # know the partitions before joining, or the first assignment is empty
            self.consumer.partitions_for_topic(topic.name)
        if start_offsets is None:
            self.consumer.subscribe([t.name for t in handler.topics], listener=_Rebalance(self))
        else:
            self._assign(start_offsets)
        self.ctx = Context(self)
        self._last_committed: dict[tuple[str, int], int] = {}

    def _assign(self, start_offsets: dict[str, int]) -> None:
        parts = [TopicPartition(t.name, p) for t in self.handler.topics for p in
                 sorted(self.consumer.partitions_for_topic(t.name) or range(t.partitions))]
        self.consumer.assign(parts)
        for tp in parts:
            offset = start_offsets.get(f"{tp.topic}/{tp.partition}")
            if offset is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, offset)

    # ------------------------------------------------------------------ loop
    def run(self, stop: threading.Event) -> None:
        """Step until stopped or, replaying, until the range is done."""
        while not stop.is_set():
            self.step()
            if self.finished:
                log.info("replay range done")
                return

    def step(self) -> int:
        """One cycle: poll, handle, tick, flush, commit. Returns the number of records polled."""
        batches = self.consumer.poll(timeout_ms=self.poll_ms, max_records=self.max_records)
        if not batches and not self.consumer.assignment():
            time.sleep(self.poll_ms / 1000)  # poll returns at once without partitions: don't spin
        count = 0
        for tp, raw_records in batches.items():
            end = self._stop_at(tp.topic, tp.partition)
            for raw in raw_records:
                if raw.offset >= end:
                    self.consumer.pause(tp)
                    break
                count += 1
                self._process(Record(tp.topic, tp.partition, raw.offset, raw.key, raw.value,
                                     raw.timestamp))
        self.handler.tick(self.ctx)
        self.flush_and_commit()
        return count

    def lag(self) -> int:
        """Records left to read on the assigned partitions, up to their end (replay: their stop offsets).

        Asks the broker for the end offsets (KafkaError when it cannot be reached); 0 means caught up.
        """
        parts = list(self.consumer.assignment())
        if not parts:
            return 0
        ends = self.consumer.end_offsets(parts)
        return sum(max(0, min(ends[tp], self._stop_at(tp.topic, tp.partition)) - self.consumer.position(tp))
                   for tp in parts)

    def _stop_at(self, topic: str, partition: int) -> float:
        if self.stop_offsets is None:
            return float("inf")
        return self.stop_offsets.get(f"{topic}/{partition}", 0)

    @property
    def finished(self) -> bool:
        """Replay mode: every partition reached its stop offset and all outputs are committed."""
        if self.stop_offsets is None or self.tracker.in_flight():
            return False
        for key, end in self.stop_offsets.items():
            topic, part = key.rsplit("/", 1)
            if end > 0 and self.consumer.position(TopicPartition(topic, int(part))) < end:
                return False
        return True

    def _process(self, record: Record) -> None:
        self.tracker.track(record.topic, record.partition, record.offset)
        try:
            message = codec.decode(record.value, spec(record.topic).value_type)
        except codec.CodecError as exc:
            self.dead_letter(record, f"undecodable: {exc}")
            return
        message_id = message.header.message_id if message.HasField("header") else ""
        seen_key = f"{record.topic}:{message_id}" if message_id else ""
        if self.seen.seen(seen_key):
            self.stats["duplicates"] += 1
            self.tracker.done(record.topic, record.partition, record.offset)
            return
        try:
            self.handler.handle(message, record, self.ctx)
            self.stats["handled"] += 1
        except getattr(self.handler, "dead_letter_errors", Exception) as exc:  # bad message: park it, go on
            log.warning("handler failed on %s: %s", record.position, exc)
            self.seen.forget(seen_key)  # a bad copy (say, a truncated one) must not hide a good one
            self.ctx.drop_hold(record)
            self.dead_letter(record, f"processing failed: {exc!r}\n{traceback.format_exc(limit=3)}")
            return
        if not self.ctx.holds(record):
            self.tracker.done(record.topic, record.partition, record.offset)

    def dead_letter(self, record: Record, error: str) -> None:
        letter = events.DeadLetter(
            header=codec.header(self.service), source_topic=record.topic,
            partition=record.partition, offset=record.offset, key=record.key or b"",
            value=record.value or b"", error=error[:4000], service=self.service,
            consumer_group=self.group_id)
        self.producer.send(DLQ, record.topic, letter)
        self.stats["dead_lettered"] += 1
        self.tracker.done(record.topic, record.partition, record.offset)
        log.warning("dead-lettered %s: %s", record.position, error.splitlines()[0])

    def flush_and_commit(self) -> None:
        """Acknowledge all outputs, then commit what the tracker allows."""
        self.producer.flush()
        offsets = {tp: off for tp, off in self.tracker.committable().items() if self._last_committed.get(tp) != off}
        if not offsets:
            return
        try:
            self.consumer.commit({TopicPartition(t, p): OffsetAndMetadata(off, "", -1)
                                  for (t, p), off in offsets.items()})
            self._last_committed.update(offsets)
            self.stats["commits"] += 1
        except KafkaError as exc:  # broker away or group rebalancing: a later cycle commits
            log.warning("commit failed, will retry: %s", exc)

    def _on_revoked(self, partitions: set[tuple[str, int]]) -> None:
        """Forget the state of partitions handed to another member.

        No commit here: the callback runs inside poll(), where calling back into the consumer is
        not safe. Offsets left uncommitted are re-read by the next owner (at-least-once; consumers
        dedupe), and everything already committable was committed at the end of the last step.
        """
        self.handler.on_revoked(partitions)
        self.tracker.forget(partitions)
        for tp in partitions:
            self._last_committed.pop(tp, None)

    def close(self) -> None:
        """Flush outputs, commit what may be committed, and leave the group (hands partitions back)."""
        try:
            self.flush_and_commit()
        finally:
            self.consumer.close(autocommit=False)
            self.producer.close()
