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
from collections import deque
from collections.abc import Callable
from typing import Protocol

from google.protobuf.message import Message
from kafka import KafkaAdminClient
from kafka.admin import MemberToRemove

from m1flow.bus import codec
from m1flow.bus.backlog import Backlog
from m1flow.bus.clients import TP, Client, ClientError, Consumer, Settings, consumer
from m1flow.bus.dedupe import SeenIds
from m1flow.bus.letters import reason
from m1flow.bus.liveness import Health, Liveness, LivenessConfig
from m1flow.bus.offsets import OffsetTracker
from m1flow.bus.producer import Producer
from m1flow.bus.records import Record
from m1flow.bus.topics import DLQ, METRICS, TopicSpec, spec
from m1flow.contracts import events
from m1flow.security.config import kafka_python as kafka_security

log = logging.getLogger(__name__)
POLL_MS = 200  # how long a step's poll waits for records when no partition has a backlog (set_pace)


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
            self._worker._tracker.done(rec.topic, rec.partition, rec.offset)

    def metric(self, name: str, value: float, step: int = 0, **labels: str) -> None:
        msg = events.Metric(header=codec.header(self.service), service=self.service, name=name,
                            value=float(value), step=step, labels=labels)
        self.producer.send(METRICS, self.service, msg)

    def dead_letter(self, record: Record, error: str) -> None:
        self._worker.dead_letter(record, error)

    def lag(self) -> int:
        """Records between this consumer's position and the end of its input (see StreamWorker.lag)."""
        return self._worker.lag()

    def committable(self) -> dict[str, int]:
        """The offsets a commit would store now (see StreamWorker.committable)."""
        return self._worker.committable()


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


class StreamWorker:
    """The loop of one consumer: poll, handle in turn, tick, flush, commit (see the module).

    start_offsets: None to join the group and resume from its commits; a dict
    ("topic/partition" -> offset, missing ones from the beginning) to own every partition and
    resume from positions the caller stored itself (the learner keeps them in its checkpoint).
    stop_offsets: replay mode; records at or past these offsets are left alone, and
    `finished` turns true once every listed partition got there with nothing in flight.
    static_member: join with group.instance.id = client id (KIP-345), so a replica restarted
    after a crash takes its partitions back at once instead of after the session timeout, and
    the rest of the group never stops for it.
    on_health: called whenever the liveness watchdog changes its verdict (see liveness.py).
    client: which Kafka client consumes (m1flow/bus/clients.py).
    commit_wait: whether a step waits for its commit. A handler that keeps its offsets in its own
    checkpoint and resumes from them (start_offsets: the learner) commits only for the lag readers
    upstream, so it need not wait for the broker's answer; outputs are still acknowledged first.
    """

    def __init__(self, bootstrap: str, group_id: str, handler: Handler, service: str,
                 producer: Producer | None = None, poll_ms: int = POLL_MS, max_records: int = 256,
                 client_id: str | None = None, session_timeout_ms: int = 20_000,
                 start_offsets: dict[str, int] | None = None,
                 stop_offsets: dict[str, int] | None = None, output_suffix: str = "",
                 static_member: bool = True, liveness: LivenessConfig | None = None,
                 on_health: Callable[[Health], None] = lambda h: None, client: Client = "confluent-kafka",
                 commit_wait: bool = True) -> None:
        self.bootstrap = bootstrap
        self.commit_wait = commit_wait
        self.stop_offsets = stop_offsets
        self.group_id = group_id
        self.handler = handler
        self.service = service
        self._poll_ms = poll_ms
        self._max_records = max_records
        # records taken per poll: enough that the partitions' backlogs fill and can be served in turn
        self.poll_records = max(max_records, 64)
        self.client_id = client_id or service
        # the outputs go through the same client as the inputs: kafka-python's sender thread and
        # flush were a third of a rollout replica's CPU in py-spy (bench/pipeline.py)
        self.producer = producer or Producer(bootstrap, self.client_id, suffix=output_suffix, client=client)
        self._tracker = OffsetTracker()
        self.seen = SeenIds()
        self.stats = {"handled": 0, "dead_lettered": 0, "duplicates": 0, "commits": 0}
        self.static_member = static_member and start_offsets is None
        self.liveness = Liveness(bootstrap, group_id, liveness or LivenessConfig(), on_health,
                                 member=self.client_id if self.static_member else None,
                                 assigned_mode=start_offsets is not None)
        self._events: deque[tuple[str, set[tuple[str, int]]]] = deque()
        self._throttled = False
        self.consumer = _consumer(client, bootstrap, group_id, self.client_id, self.static_member,
                                  session_timeout_ms, self.poll_records)
        self.backlog = Backlog(self.consumer, self.poll_records, stop_offsets)
        for topic in handler.topics:  # know the partitions before joining, or the first assignment is empty
            self.consumer.partitions_for_topic(topic.name)
        if start_offsets is None:
            self.consumer.subscribe([t.name for t in handler.topics], on_assigned=self._assigned_event,
                                    on_revoked=self._revoked_event)
        else:
            self.liveness.assigned(assign_all(self.consumer, handler.topics, start_offsets))
        self.ctx = Context(self)
        self.dispatch = Dispatch(self)
        self._last_committed: dict[tuple[str, int], int] = {}
        self.liveness.start()
        if start_offsets is not None:
            self.liveness.mark_ready()

    def _assigned_event(self, partitions: set[TP]) -> None:
        """Runs inside poll(), on the client's thread: record it; the loop applies it."""
        self._events.append(("assigned", partitions))

    def _revoked_event(self, partitions: set[TP]) -> None:
        self._events.append(("revoked", partitions))
        self.liveness.revoked(partitions)

    # ------------------------------------------------------------------ loop
    def run(self, stop: threading.Event, before_step: Callable[[], None] = lambda: None) -> None:
        """Step until stopped or, replaying, until the range is done; `before_step` lets a service set
        its pace or throttle from its own state before each step."""
        while not stop.is_set():
            before_step()
            self.step()
            if self.finished:
                log.info("replay range done")
                return

    def step(self) -> int:
        """One cycle: poll, handle (round-robin over partitions), tick, flush, commit.
        Returns the number of records handled."""
        if self.liveness.rejoin_due():
            waited = self.liveness.config.join_after_s
            log.warning("no partition assignment for %.0fs after a revocation: starting a new consumer", waited)
            self.consumer.rejoin(f"no assignment for {waited:.0f}s")
        self.backlog.fill(self._throttled, self._poll_ms, self._apply_rebalance)
        count = 0
        while count < self._max_records and not self._throttled and (record := self.backlog.next()) is not None:
            self.dispatch(record)
            count += 1
        self.handler.tick(self.ctx)
        self.flush_and_commit()
        self.liveness.handled(count)
        self.liveness.owns(self.consumer.assignment())
        self.liveness.stepped(self._tracker.read_positions())
        return count

    def set_pace(self, max_records: int | None = None, poll_ms: int | None = None) -> None:
        """How many records a step handles at most, and how long its poll waits when no partition
        has a backlog (0: a handler with work of its own steps without waiting on Kafka)."""
        if max_records is not None:
            if max_records < 1:
                raise ValueError(f"max_records must be at least 1, got {max_records}")
            self._max_records = max_records
        if poll_ms is not None:
            if poll_ms < 0:
                raise ValueError(f"poll_ms must be at least 0, got {poll_ms}")
            self._poll_ms = poll_ms

    def committable(self) -> dict[str, int]:
        """The offsets a commit would store now, "topic/partition" -> offset (the form start_offsets
        takes): below every record still held, so a checkpoint that keeps them resumes exactly."""
        return {f"{topic}/{partition}": off for (topic, partition), off in self._tracker.committable().items()}

    def throttle(self, paused: bool) -> None:
        """Stop taking new records (backpressure, a pause command) without leaving the group."""
        if paused != self._throttled:
            self._throttled = paused
            self.liveness.throttled(paused)

    def _apply_rebalance(self) -> None:
        """Apply the assignment changes kafka-python reported during the last poll, in order."""
        while self._events:
            kind, partitions = self._events.popleft()
            if kind == "revoked":
                self._on_revoked(partitions)
            else:
                owned = self.consumer.assignment()
                self.liveness.assigned(owned)
                self.liveness.mark_ready()
                # cooperative rebalancing reports what was added (often nothing): log what it owns too
                log.info("assigned %s, owns %s", sorted(f"{t}/{p}" for t, p in partitions),
                         sorted(f"{t}/{p}" for t, p in owned))

    def lag(self) -> int:
        """Records left to handle on the owned partitions, up to their end (replay: their stop
        offsets): the ones not yet read and the ones read into the backlog but not yet handled.

        Asks the broker for the end offsets (ClientError when it cannot be reached); 0: caught up.
        """
        return self.backlog.lag()

    @property
    def finished(self) -> bool:
        """Replay mode: every partition reached its stop offset and all outputs are committed."""
        return not self._tracker.in_flight() and self.backlog.reached_stop()

    def dead_letter(self, record: Record, error: str) -> None:
        self.dispatch.dead_letter(record, error)

    def flush_and_commit(self, wait: bool | None = None) -> None:
        """Acknowledge all outputs, then commit what the tracker allows (waiting for the answer unless
        commit_wait says not to)."""
        self.producer.flush()
        offsets = {tp: off for tp, off in self._tracker.committable().items() if self._last_committed.get(tp) != off}
        if not offsets:
            return
        try:
            self.consumer.commit(offsets, wait=self.commit_wait if wait is None else wait)
            self._last_committed.update(offsets)
            self.stats["commits"] += 1
        except ClientError as exc:  # broker away or group rebalancing: a later cycle commits
            log.warning("commit failed, will retry: %s", exc)

    def _on_revoked(self, partitions: set[tuple[str, int]]) -> None:
        """Forget the state of partitions handed to another member.

        No commit here: everything committable was committed at the end of the last step, and
        offsets left uncommitted are re-read by the next owner (at-least-once; consumers dedupe).
        """
        self.handler.on_revoked(partitions)
        self._tracker.forget(partitions)
        for tp in partitions:
            self._last_committed.pop(tp, None)
        self.backlog.forget(partitions)

    def close(self) -> None:
        """Flush outputs, commit what may be committed, and hand the partitions back at once.

        A static member's close does not leave the group (that is the point of static membership:
        a crashed replica's restart takes its partitions straight back), so a graceful stop
        removes the member explicitly; the others take its partitions now, not after the timeout.
        """
        self.liveness.close()
        try:
            self.flush_and_commit(wait=True)
        finally:
            self.consumer.close()
            self.producer.close()
            if self.static_member:
                _leave_static(self.bootstrap, self.group_id, self.client_id)


class Dispatch:
    """One record through the handler: decoded, deduped by message id, handled (and held, if the handler
    says so) or dead-lettered with the reason; the offset tracker is told when it is done."""

    def __init__(self, worker: "StreamWorker") -> None:
        self.handler, self.ctx, self.tracker, self.seen = worker.handler, worker.ctx, worker._tracker, worker.seen
        self.producer, self.stats = worker.producer, worker.stats
        self.service, self.group_id = worker.service, worker.group_id

    def __call__(self, record: Record) -> None:
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
            log.warning("handler failed on %s: %s", record.position, exc, exc_info=True)  # the detail: here
            self.seen.forget(seen_key)  # a bad copy (say, a truncated one) must not hide a good one
            self.ctx.drop_hold(record)
            self.dead_letter(record, f"processing failed: {exc!r}")
            return
        if not self.ctx.holds(record):
            self.tracker.done(record.topic, record.partition, record.offset)

    def dead_letter(self, record: Record, error: str) -> None:
        self.producer.send(DLQ, record.topic, letter_for(record, error, self.service, self.group_id))
        self.stats["dead_lettered"] += 1
        self.tracker.done(record.topic, record.partition, record.offset)
        log.warning("dead-lettered %s: %s", record.position, error.splitlines()[0])


def assign_all(consumer: Consumer, topics: tuple[TopicSpec, ...], start_offsets: dict[str, int]) -> set[TP]:
    """Own every partition of `topics` from the given offsets (missing ones from the beginning); they
    become the group's commits too, which then say where this consumer really resumes."""
    parts = [(t.name, p) for t in topics for p in sorted(consumer.partitions_for_topic(t.name) or range(t.partitions))]
    consumer.assign({tp: start_offsets.get(f"{tp[0]}/{tp[1]}") for tp in parts})
    if start_offsets:
        try:
            consumer.commit({(key.rsplit("/", 1)[0], int(key.rsplit("/", 1)[1])): off
                             for key, off in start_offsets.items()})
        except ClientError as exc:
            log.warning("could not record the start offsets as the group's commits: %s", exc)
    return set(parts)


# max_poll_interval_ms is also how long the coordinator holds a rebalance open for a member that does
# not rejoin (and, + 5 s, how long a JoinGroup may wait for its answer): 10 minutes, the libraries'
# default, is how long a wedged member could stop its whole group. It bounds how long a commit can be
# refused as "rebalance in progress" too.
REBALANCE_TIMEOUT_MS = 120_000


def _consumer(client: Client, bootstrap: str, group_id: str, client_id: str, static_member: bool,
              session_timeout_ms: int, poll_records: int) -> Consumer:
    return consumer(client, Settings(
        bootstrap=bootstrap, group_id=group_id, client_id=client_id,
        group_instance_id=client_id if static_member else None,
        session_timeout_ms=session_timeout_ms, max_poll_interval_ms=REBALANCE_TIMEOUT_MS,
        max_poll_records=poll_records))


def letter_for(record: Record, error: str, service: str, group_id: str) -> events.DeadLetter:
    """One letter per record and consumer group: a redelivery after a crash dedupes, and the letters
    of two groups that both reject a record say which group each came from."""
    return events.DeadLetter(
        header=codec.header(service, message_id=f"dlq:{group_id}:{record.position}"), source_topic=record.topic,
        partition=record.partition, offset=record.offset, key=record.key or b"", value=record.value or b"",
        error=reason(error), service=service, consumer_group=group_id)


def _leave_static(bootstrap: str, group_id: str, instance_id: str) -> None:
    try:
        admin = KafkaAdminClient(**kafka_security(), bootstrap_servers=bootstrap, client_id=f"{instance_id}-leave",
                                 request_timeout_ms=10_000)
        try:
            admin.remove_group_members(group_id, [MemberToRemove(group_instance_id=instance_id)])
        finally:
            admin.close()
    except Exception as exc:  # noqa: BLE001 - best effort: the session timeout frees them anyway
        log.warning("could not leave group %s as %s (its partitions move after the session timeout): %r",
                    group_id, instance_id, exc)
