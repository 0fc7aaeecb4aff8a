"""The consumer the stream worker drives, over either Kafka client: kafka-python or confluent-kafka.

Why two: kafka-python (pure Python) is the bus's original client and stays supported, but under
CPU starvation its group coordinator was seen to lose a SyncGroup answer and leave a member joined
to a generation without an assignment, heartbeats off, until the session timed out (2 of 40
trials in `bench/group_join.py`; the stalls CI saw). confluent-kafka wraps librdkafka, the C client
most of the ecosystem runs, which had none in the same runs. Both sit behind one small interface
(partitions as (topic, partition) tuples, offsets as ints), so the worker's guarantees do not
depend on the choice: `ServiceConfig.kafka_client` picks it.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from m1flow.security.config import SecurityConfig, confluent, kafka_python

log = logging.getLogger(__name__)

TP = tuple[str, int]
Client = Literal["kafka-python", "confluent-kafka"]
PAUSE_AFTER_S = 1.0  # a confluent consumer's pause reaches librdkafka once it has lasted this long
OnChange = Callable[[set[TP]], None]


class ClientError(RuntimeError):
    """A broker round trip that failed (commit refused, broker away); the caller retries later."""


class NotAuthorized(ClientError):
    """The broker's ACLs refuse this principal a group or topic it consumes: no retry mends that, so
    poll raises it (the service exits with the reason) rather than waiting for a group it cannot join."""


@dataclass(frozen=True)
class Fetched:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


@dataclass(frozen=True)
class Settings:
    bootstrap: str
    group_id: str
    client_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    max_poll_interval_ms: int
    max_poll_records: int
    max_partition_fetch_bytes: int = 4 * 1024 * 1024
    receive_message_max_bytes: int = 64 * 1024 * 1024
    security: SecurityConfig | None = None  # None: the process's active block


class Consumer(Protocol):
    def partitions_for_topic(self, topic: str) -> set[int]: ...

    def subscribe(self, topics: list[str], on_assigned: OnChange, on_revoked: OnChange) -> None: ...

    def assign(self, offsets: dict[TP, int | None]) -> None:
        """Own exactly these partitions, each from its offset (None: from the beginning)."""

    def poll(self, timeout_ms: int, max_records: int) -> dict[TP, list[Fetched]]:
        """Records fetched since the last poll; ClientError when the client fails a round trip,
        NotAuthorized when the ACLs refuse the group or a topic."""

    def assignment(self) -> set[TP]: ...

    def paused(self) -> set[TP]: ...

    def pause(self, partitions: set[TP]) -> None:
        """Stop fetching these partitions. A poll may still return records of a partition paused a
        moment ago (the confluent client pauses for real only once a pause lasts, see
        `ConfluentConsumer.pause`): the caller queues them like any other."""

    def resume(self, partitions: set[TP]) -> None: ...

    def position(self, partition: TP) -> int: ...

    def end_offsets(self, partitions: set[TP]) -> dict[TP, int]:
        """The next offset to be written, per partition (a broker round trip; ClientError when away)."""

    def watermarks(self, partitions: set[TP]) -> dict[TP, tuple[int, int]]:
        """(first offset still in the log, next offset to be written) per partition (ClientError when away)."""

    def commit(self, offsets: dict[TP, int], wait: bool = True) -> None:
        """Commit; ClientError when the broker refuses or cannot be reached. wait=False sends the
        commit and returns: a failure is logged when the broker answers, and a later commit covers it."""

    def rejoin(self, why: str) -> None:
        """Replace the client with a new one subscribed as this one was (same group, same instance id):
        what it owned is revoked through the callback, and is re-read from the group's commits."""

    def close(self) -> None: ...


def consumer(client: Client, settings: Settings) -> Consumer:
    if client == "confluent-kafka":
        return ConfluentConsumer(settings)
    if client == "kafka-python":
        return KafkaPythonConsumer(settings)
    raise ValueError(f"unknown Kafka client {client!r}; choose kafka-python or confluent-kafka")


# ---------------------------------------------------------------------------------- kafka-python
class KafkaPythonConsumer:
    def __init__(self, s: Settings) -> None:
        self._settings = s
        self._c = self._new(s)
        self._subscription: tuple[list[str], OnChange, OnChange] | None = None

    @staticmethod
    def _new(s: Settings):  # noqa: ANN205 - a kafka.KafkaConsumer, imported lazily
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor

        return KafkaConsumer(
            **kafka_python(s.security),
            bootstrap_servers=s.bootstrap, group_id=s.group_id, client_id=s.client_id,
            group_instance_id=s.group_instance_id, partition_assignment_strategy=(CooperativeStickyAssignor,),
            enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=s.max_poll_records,
            session_timeout_ms=s.session_timeout_ms, heartbeat_interval_ms=1000,
            max_poll_interval_ms=s.max_poll_interval_ms, fetch_max_wait_ms=100, reconnect_backoff_max_ms=2000,
            max_partition_fetch_bytes=s.max_partition_fetch_bytes,
            receive_message_max_bytes=s.receive_message_max_bytes)

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(self._c.partitions_for_topic(topic) or ())

    def subscribe(self, topics: list[str], on_assigned: OnChange, on_revoked: OnChange) -> None:
        from kafka import ConsumerRebalanceListener

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):  # noqa: ANN001 - kafka-python signature
                on_revoked({(tp.topic, tp.partition) for tp in revoked})

            def on_partitions_assigned(self, assigned):  # noqa: ANN001
                on_assigned({(tp.topic, tp.partition) for tp in assigned})

        self._subscription = (topics, on_assigned, on_revoked)
        self._c.subscribe(topics, listener=Listener())

    def assign(self, offsets: dict[TP, int | None]) -> None:
        from kafka.structs import TopicPartition

        parts = {tp: TopicPartition(*tp) for tp in offsets}
        self._c.assign(list(parts.values()))
        for tp, offset in offsets.items():
            if offset is None:
                self._c.seek_to_beginning(parts[tp])
            else:
                self._c.seek(parts[tp], offset)

    def poll(self, timeout_ms: int, max_records: int) -> dict[TP, list[Fetched]]:
        from kafka.errors import AuthorizationError, KafkaError

        try:
            batches = self._c.poll(timeout_ms=timeout_ms, max_records=max_records)
        except AuthorizationError as exc:
            raise NotAuthorized(f"not authorized by the broker's ACLs: {exc}") from exc
        except KafkaError as exc:
            raise ClientError(str(exc)) from exc
        self._unstick_parked_fetches()
        self._unwedge_join()
        return {(tp.topic, tp.partition): [Fetched(r.offset, r.key, r.value, r.timestamp) for r in records]
                for tp, records in batches.items()}

    def _unstick_parked_fetches(self) -> None:
        """Work around a kafka-python 3.0 fetcher bug that stops a partition for good.

        Records fetched for a partition that is then paused are parked (KAFKA-7548) and restored
        on a later poll only while the fetcher's in-line slot is None; but after it hands out the
        last records of a batch the slot keeps the exhausted (falsy) batch object, so parked
        partitions are never restored, and never fetched again either (a partition with parked
        data is not fetched). A consumer pausing busy partitions each step (the worker's backlog)
        stalled on 2 of 4 partitions within 3000 records. Emptying the slot lets the restore run.
        """
        fetcher = getattr(self._c, "_fetcher", None)
        current = getattr(fetcher, "_next_partition_records", None)
        if current is not None and not current:
            fetcher._next_partition_records = None

    def _unwedge_join(self) -> None:
        """Work around a kafka-python 3.0 coordinator bug that leaves a member rebalancing for good.

        Its join loop runs while `need_rejoin()`, and a poll that times out leaves the JoinGroup task in
        flight for the next poll to await. When the rejoin was asked for by a metadata change (the
        assignment's snapshot of the topics against the cluster's), the leader's own assignment updates
        that snapshot mid-join, so `need_rejoin()` turns false, no later poll awaits the task, and the
        code after it (state STABLE, partitions assigned) never runs: seen in stressed runs as a consumer
        of a new topic never assigned, `state=REBALANCING, need_rejoin()=False`. Rebalancing without a
        rejoin to do is only that state: asking for a rejoin lets the next poll finish it.
        """
        coordinator = getattr(self._c, "_coordinator", None)
        if coordinator is not None and coordinator.rebalance_in_progress() and not coordinator.need_rejoin():
            log.warning("kafka-python coordinator rebalancing with no rejoin pending: asking it to rejoin")
            coordinator.request_rejoin()

    def assignment(self) -> set[TP]:
        return {(tp.topic, tp.partition) for tp in self._c.assignment()}

    def paused(self) -> set[TP]:
        return {(tp.topic, tp.partition) for tp in self._c.paused()}

    def pause(self, partitions: set[TP]) -> None:
        from kafka.structs import TopicPartition

        if partitions:
            self._c.pause(*(TopicPartition(*tp) for tp in partitions))

    def resume(self, partitions: set[TP]) -> None:
        from kafka.structs import TopicPartition

        if partitions:
            self._c.resume(*(TopicPartition(*tp) for tp in partitions))

    def position(self, partition: TP) -> int:
        from kafka.structs import TopicPartition

        return self._c.position(TopicPartition(*partition))

    def end_offsets(self, partitions: set[TP]) -> dict[TP, int]:
        return self._list_offsets(self._c.end_offsets, partitions)

    def watermarks(self, partitions: set[TP]) -> dict[TP, tuple[int, int]]:
        low, high = self._list_offsets(self._c.beginning_offsets, partitions), self.end_offsets(partitions)
        return {tp: (low[tp], high[tp]) for tp in partitions}

    @staticmethod
    def _list_offsets(lookup: Callable, partitions: set[TP]) -> dict[TP, int]:
        from kafka.errors import KafkaError
        from kafka.structs import TopicPartition

        try:
            found = lookup([TopicPartition(*tp) for tp in partitions])
        except KafkaError as exc:
            raise ClientError(str(exc)) from exc
        return {(tp.topic, tp.partition): off for tp, off in found.items()}

    def commit(self, offsets: dict[TP, int], wait: bool = True) -> None:
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata, TopicPartition

        marks = {TopicPartition(*tp): OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()}
        try:
            if wait:
                self._c.commit(marks)
            else:
                self._c.commit_async(marks, callback=_log_commit_failure)
        except KafkaError as exc:
            raise ClientError(str(exc)) from exc

    def rejoin(self, why: str) -> None:
        log.warning("kafka consumer %s: starting a new one", why)
        owned = self.assignment()
        try:
            self._c.close(autocommit=False)
        except Exception as exc:  # noqa: BLE001 - a wedged client may refuse even to close
            log.debug("closing the wedged consumer: %s", exc)
        self._c = self._new(self._settings)
        if self._subscription is not None:
            topics, on_assigned, on_revoked = self._subscription
            if owned:
                on_revoked(owned)
            self.subscribe(topics, on_assigned, on_revoked)

    def close(self) -> None:
        self._c.close(autocommit=False)


# ------------------------------------------------------------------------------- confluent-kafka
class ConfluentConsumer:
    def __init__(self, s: Settings) -> None:
        from confluent_kafka import Consumer as RdConsumer

        config = {
            "bootstrap.servers": s.bootstrap, "group.id": s.group_id, "client.id": s.client_id,
            "enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": s.session_timeout_ms, "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": s.max_poll_interval_ms, "partition.assignment.strategy": "cooperative-sticky",
            "fetch.wait.max.ms": 100, "reconnect.backoff.max.ms": 2000,
            "max.partition.fetch.bytes": s.max_partition_fetch_bytes,
            "fetch.max.bytes": s.max_partition_fetch_bytes * 4,
            "receive.message.max.bytes": max(s.receive_message_max_bytes, s.max_partition_fetch_bytes * 4 + 1024),
            "log_level": 3, "on_commit": _log_commit_failure,
            **confluent(s.security),
        }
        if s.group_instance_id:
            config["group.instance.id"] = s.group_instance_id
        self._config = config
        self._c = RdConsumer(config, logger=_RdLogger())
        self._paused: set[TP] = set()  # paused as the caller sees it
        self._pausing: dict[TP, float] = {}  # of those, not yet paused in librdkafka: since when (monotonic)
        self._positions: dict[TP, int] = {}
        self._subscription: tuple | None = None  # (topics, on_assign, on_revoke): to subscribe again
        self._on_revoked: OnChange = lambda gone: None
        self._owned: set[TP] = set()  # as the callbacks said: a fatal consumer may no longer tell

    def partitions_for_topic(self, topic: str) -> set[int]:
        meta = self._c.list_topics(topic, timeout=30).topics.get(topic)
        return set(meta.partitions) if meta is not None and meta.error is None else set()

    def subscribe(self, topics: list[str], on_assigned: OnChange, on_revoked: OnChange) -> None:
        def assigned(_consumer, partitions) -> None:  # noqa: ANN001 - librdkafka callback
            added = {(p.topic, p.partition) for p in partitions}
            self._owned |= added
            on_assigned(added)

        def revoked(_consumer, partitions) -> None:  # noqa: ANN001
            gone = {(p.topic, p.partition) for p in partitions}
            self._paused -= gone
            for tp in gone:
                self._pausing.pop(tp, None)
            self._owned -= gone
            on_revoked(gone)

        self._subscription = (topics, assigned, revoked)
        self._on_revoked = on_revoked
        self._c.subscribe(topics, on_assign=assigned, on_revoke=revoked, on_lost=revoked)

    def rejoin(self, why: str) -> None:
        """Also what a fatal error calls for: it leaves a librdkafka consumer unusable for good. Seen:
        after a broker restart a static member whose JoinGroup answer was lost is "fenced by other
        consumer with same group.instance.id" (itself, under the member id the broker gave it).
        """
        from confluent_kafka import Consumer as RdConsumer

        log.warning("kafka consumer %s: starting a new one", why)
        owned, self._owned = set(self._owned), set()
        try:
            self._c.close()
        except Exception as exc:  # noqa: BLE001 - a fatal consumer may refuse even to close
            log.debug("closing the failed consumer: %s", exc)
        self._c = RdConsumer(self._config, logger=_RdLogger())
        self._paused.clear()
        self._pausing.clear()
        self._positions.clear()
        if owned:
            self._on_revoked(owned)
        if self._subscription is not None:
            topics, assigned, revoked = self._subscription
            self._c.subscribe(topics, on_assign=assigned, on_revoke=revoked, on_lost=revoked)


    def assign(self, offsets: dict[TP, int | None]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        self._c.assign([TopicPartition(t, p, OFFSET_BEGINNING if off is None else off)
                        for (t, p), off in offsets.items()])
        self._owned = set(offsets)

    def poll(self, timeout_ms: int, max_records: int) -> dict[TP, list[Fetched]]:
        out: dict[TP, list[Fetched]] = {}
        from confluent_kafka import KafkaException

        try:
            self._pause_lasting()
            messages = self._fetch(timeout_ms, max_records)
        except KafkaException as exc:
            if _refused(exc.args[0]):
                raise NotAuthorized(f"not authorized by the broker's ACLs: {exc.args[0]}") from exc
            if not _fatal(exc.args[0]):
                raise ClientError(str(exc)) from exc
            self.rejoin(f"hit a fatal error ({exc.args[0]})")
            return out
        for msg in messages:
            if msg.error() is not None:
                if _refused(msg.error()):
                    raise NotAuthorized(f"not authorized by the broker's ACLs: {msg.error()}")
                if _fatal(msg.error()):
                    self.rejoin(f"hit a fatal error ({msg.error()})")
                    return {}
                continue  # transport and partition-EOF events: librdkafka retries by itself
            tp = (msg.topic(), msg.partition())
            _, ts = msg.timestamp()
            out.setdefault(tp, []).append(Fetched(msg.offset(), msg.key(), msg.value(), ts))
            self._positions[tp] = msg.offset() + 1
        return out

    def _fetch(self, timeout_ms: int, max_records: int) -> list:
        """Up to max_records messages, returning as soon as one is there. librdkafka's consume(n, t)
        waits out the whole timeout unless n messages arrive (measured: 1.0 s for a message that came
        after 0.05 s), which put a poll interval of latency on every hop of the pipeline; poll()
        returns with the first message, and consume(n, 0) then takes what has arrived with it."""
        messages = self._c.consume(num_messages=max_records, timeout=0)
        if messages or timeout_ms <= 0:
            return messages
        first = self._c.poll(timeout_ms / 1000)
        if first is None:
            return []
        return [first, *self._c.consume(num_messages=max_records - 1, timeout=0)] if max_records > 1 else [first]

    def assignment(self) -> set[TP]:
        """From the rebalance callbacks and assign(), not librdkafka's assignment(): the worker asks
        every poll, and that call (a lock and a list of new TopicPartition objects) was 11-13% of a
        rollout replica's CPU in py-spy."""
        return set(self._owned)

    def paused(self) -> set[TP]:
        return set(self._paused)

    def pause(self, partitions: set[TP]) -> None:
        """Paused for the caller now; in librdkafka only once the pause has lasted PAUSE_AFTER_S.

        Why: librdkafka's resume wakes its fetcher only at its next timer, about 0.5 s later (measured
        with 2.16: 0.45-0.49 s from resume() to records already on the broker, 0.01-0.02 s without the
        pause), and the worker pauses and resumes partitions all the time (a busy queue, a throttle of
        a fraction of a second): each such pause put half a second on a hop of the pipeline. A poll in
        between may return records of a partition paused a moment ago; the worker's backlog queues them
        like any other (a short pause's worth: librdkafka bounds what it prefetches)."""
        now = time.monotonic()
        for tp in set(partitions) - self._paused:
            self._pausing[tp] = now
            self._paused.add(tp)

    def resume(self, partitions: set[TP]) -> None:
        from confluent_kafka import TopicPartition

        back = set(partitions) & self._paused
        real = [tp for tp in back if self._pausing.pop(tp, None) is None]  # those librdkafka has paused
        if real:
            self._c.resume([TopicPartition(*tp) for tp in real])
        self._paused -= back

    def _pause_lasting(self) -> None:
        """Pause in librdkafka the partitions whose pause has lasted PAUSE_AFTER_S."""
        from confluent_kafka import TopicPartition

        due = [tp for tp, since in self._pausing.items() if time.monotonic() - since >= PAUSE_AFTER_S]
        if due:
            self._c.pause([TopicPartition(*tp) for tp in due])
            for tp in due:
                del self._pausing[tp]

    def position(self, partition: TP) -> int:
        from confluent_kafka import TopicPartition

        known = self._positions.get(partition)
        if known is not None:
            return known
        found = self._c.position([TopicPartition(*partition)])[0].offset
        return max(found, 0)

    def end_offsets(self, partitions: set[TP]) -> dict[TP, int]:
        return {tp: high for tp, (_, high) in self.watermarks(partitions).items()}

    def watermarks(self, partitions: set[TP]) -> dict[TP, tuple[int, int]]:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            marks = {tp: self._c.get_watermark_offsets(TopicPartition(*tp), timeout=10) for tp in partitions}
        except KafkaException as exc:
            raise ClientError(str(exc)) from exc
        if any(mark is None for mark in marks.values()):  # librdkafka's answer to a timeout
            raise ClientError(f"no watermarks within 10s for {sorted(tp for tp, m in marks.items() if m is None)}")
        return marks

    def commit(self, offsets: dict[TP, int], wait: bool = True) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            self._c.commit(offsets=[TopicPartition(t, p, off) for (t, p), off in offsets.items()],
                           asynchronous=not wait)
        except KafkaException as exc:
            raise ClientError(str(exc)) from exc

    def close(self) -> None:
        self._c.close()


def _log_commit_failure(err: Any, partitions: Any) -> None:
    """A commit's answer, as either client calls back: confluent-kafka (error or None, partitions) for
    every commit, kafka-python (offsets, response or exception) for one sent without waiting."""
    failed = err if not isinstance(err, dict) else partitions if isinstance(partitions, Exception) else None
    if failed is not None:
        log.warning("commit failed (the next commit covers its offsets): %s", failed)


def _refused(err) -> bool:  # noqa: ANN001 - a confluent_kafka.KafkaError
    from confluent_kafka import KafkaError

    return err.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                          KafkaError.CLUSTER_AUTHORIZATION_FAILED)


def _fatal(err) -> bool:  # noqa: ANN001 - a confluent_kafka.KafkaError
    from confluent_kafka import KafkaError

    return bool(err.fatal()) or err.code() == KafkaError._FATAL


class _RdLogger:
    """librdkafka's log lines through Python logging (at its level 3: errors only)."""

    def __init__(self) -> None:
        import logging

        self._log = logging.getLogger("kafka.librdkafka")

    def log(self, level: int, fmt: str, *args: object) -> None:  # noqa: ARG002 - logging.Logger signature
        self._log.log(level, fmt, *args)
