"""The one way m1flow writes to Kafka: idempotent, acks=all, framed protobuf values, over either
client (kafka-python or confluent-kafka, as m1flow/bus/clients.py says why two).

Both clients give the same guarantees: idempotent, acks=all, the same retry and delivery timeouts,
keyed records on the partition Java's murmur2 picks (librdkafka is told `murmur2_random`, so a key
lands on the same partition whichever client wrote it), and `flush()` that returns only when every
record sent since the last flush is acknowledged and raises if any failed. confluent-kafka
(librdkafka) costs a few microseconds a record where kafka-python's pure-Python batching costs
tens; the prompt source, which publishes per row, uses it (bench/source.py).

A record is held to the bus's size limit (m1flow.bus.limits) here, before either client sees it, and
a refusal (that, or the broker's for a record too large or invalid) is a RecordRefused naming the
record: its sender dead-letters it and goes on, where sending it again would fail forever.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message
from kafka import KafkaProducer
from kafka.errors import KafkaError

from m1flow.bus import codec
from m1flow.bus.clients import Client
from m1flow.bus.limits import CLIENT_SLACK, KEY_BOUND, MESSAGE_MAX_BYTES, VALUE_BOUND, oversize
from m1flow.bus.topics import TopicSpec, suffixed
from m1flow.security.config import SecurityConfig
from m1flow.security.config import confluent as confluent_security
from m1flow.security.config import kafka_python as kafka_security


class ProduceError(KafkaError):
    """A record confluent-kafka could not deliver (or not within the flush's timeout). A KafkaError,
    so the callers that retry on a broker away catch it whichever client wrote. A report of one of
    send_many's records names it: `index` is its place in the list (None elsewhere)."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class RecordRefused(ProduceError):
    """A record refused for what it is (too large for the bus, or invalid), by the broker or before
    sending: sending it again cannot deliver it, so its sender dead-letters it and goes on. `code`
    says why in a word ("too_large", "invalid_record"), `reason` in a line."""

    def __init__(self, topic: str, code: str, reason: str, index: int | None = None) -> None:
        super().__init__(f"{topic}: refused ({code}): {reason}", index)
        self.topic, self.code, self.reason = topic, code, reason


# Kafka error codes that refuse a record for its content. Errors that are not the record's fault stay
# retried even when final for one attempt (a delivery timeout, an unknown topic, a missing ACL, a skewed
# clock's INVALID_TIMESTAMP): dead-lettering on them would send every record of the stream to `dlq`.
REFUSALS = {10: "too_large", 87: "invalid_record"}  # MESSAGE_TOO_LARGE, INVALID_RECORD


def refusal(topic: str, code: int | None, reason: str, index: int | None = None) -> ProduceError:
    """A client's failure report as the error a sender acts on: RecordRefused for a record the broker
    will never take (REFUSALS), a plain ProduceError (send it again) for the rest."""
    if code in REFUSALS:
        return RecordRefused(topic, REFUSALS[code], reason, index)
    return ProduceError(f"{topic}: {reason}", index)


def _key(key: str | bytes | None) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    return key.encode()


Delivered = Callable[["Exception | None"], None]  # a record's outcome: None when acknowledged
Outgoing = tuple[str, "str | bytes | None", bytes]  # send_many's (topic, key, value)


class Producer:
    """Idempotent producer. `flush()` raises if any send since the last flush failed.

    Consumers call flush() before they commit input offsets: that ordering is what makes
    "commit only after the outputs are acknowledged" true. A sender that must not wait a round
    trip per batch (the prompt source) passes `on_delivery` instead and learns each record's
    outcome from `poll()` or `flush()`, always on its own thread, whichever client writes.

    A record over the bus's size limit (m1flow.bus.limits) is refused here, before either client
    sees it: `send` raises RecordRefused, a record with `on_delivery` is reported refused. The
    broker's own refusals (a topic with a lower limit, an invalid record) come as RecordRefused too.
    """

    def __init__(self, bootstrap: str, client_id: str, linger_ms: int = 5, suffix: str = "",
                 security: SecurityConfig | None = None, client: Client = "kafka-python") -> None:
        self.suffix = suffix
        self.client = client
        self._pending: list[Any] = []
        self._outcomes: deque[tuple[Delivered, Exception | None]] = deque()  # served by poll(): kafka-python's
        # reports, and either client's records refused before sending
        self._impl: _Confluent | None = None
        if client == "confluent-kafka":
            self._impl = _Confluent(bootstrap, client_id, linger_ms, security)
            return
        self._producer = KafkaProducer(**kafka_security(security),
            bootstrap_servers=bootstrap, client_id=client_id, acks="all", enable_idempotence=True,
            linger_ms=linger_ms, max_request_size=MESSAGE_MAX_BYTES + CLIENT_SLACK, batch_size=1024 * 1024,
            delivery_timeout_ms=180_000, request_timeout_ms=30_000, retry_backoff_ms=200,
            reconnect_backoff_max_ms=2000)

    def send(self, topic: TopicSpec | str, key: str | bytes | None, message: Message,
             partition: int | None = None) -> Any:
        return self.send_bytes(topic, key, codec.encode(message), partition=partition)

    def send_bytes(self, topic: TopicSpec | str, key: str | bytes | None, value: bytes,
                   partition: int | None = None, on_delivery: Delivered | None = None) -> Any:
        """kafka-python: the record's future; confluent-kafka: None (its outcome is flush()'s).
        on_delivery(error or None) runs inside a later poll() or flush() of this thread; a record
        sent with it is not counted by flush(), which still waits for it. A record too large for the
        bus raises RecordRefused (with on_delivery: is reported so) and is not sent."""
        name = suffixed(topic if isinstance(topic, str) else topic.name, self.suffix)
        why = oversize(key, value)
        if why is not None:
            refused = RecordRefused(name, "too_large", why)
            if on_delivery is None:
                raise refused
            self._outcomes.append((on_delivery, refused))
            return None
        if self._impl is not None:
            self._impl.send(name, _key(key), value, partition, on_delivery)
            return None
        if on_delivery is None:
            future = self._producer.send(name, key=_key(key), value=value, partition=partition)
            self._pending.append(future)
            return future
        return self._send_reported(name, key, value, partition, on_delivery, None)

    def _send_reported(self, name: str, key: str | bytes | None, value: bytes, partition: int | None,
                       on_delivery: Delivered, index: int | None) -> Any:
        """kafka-python: send one record whose outcome goes to on_delivery (queued for this thread's
        poll(): the I/O thread completes the future). Its own checks before sending refuse as
        `refusal` says; a failure reported later is never taken for a refusal: kafka-python (3.0)
        turns an idempotent producer's refused batch into a fatal state that fails every record in
        flight with that same error, innocent ones too (the bus's limit keeps sizes from getting there)."""
        outcomes = self._outcomes
        try:
            future = self._producer.send(name, key=_key(key), value=value, partition=partition)
        except KafkaError as exc:  # refused by the client's own checks, before sending
            outcomes.append((on_delivery, refusal(name, getattr(exc, "errno", None), str(exc), index)))
            return None
        future.add_callback(lambda _: outcomes.append((on_delivery, None)))
        future.add_errback(lambda exc: outcomes.append((on_delivery, ProduceError(f"{name}: {exc}", index))))
        return future

    def send_many(self, records: list[Outgoing], on_delivery: Delivered) -> None:
        """send_bytes of each (topic, key, value), one on_delivery for all (the source's batches); a
        failure's error names its record (`.index`, its place in `records`)."""
        refused = self._refuse_oversize(records, on_delivery)
        sendable = [i for i in range(len(records)) if i not in refused] if refused else range(len(records))
        if self._impl is not None:
            self._impl.send_many(records, sendable, on_delivery, self.suffix)
            return
        for index in sendable:
            topic, key, value = records[index]
            self._send_reported(suffixed(topic, self.suffix), key, value, None, on_delivery, index)

    def _refuse_oversize(self, records: list[Outgoing], on_delivery: Delivered) -> set[int]:
        """The places of the records over the bus's limit, each reported refused: two comparisons a
        record, the exact size only for those near the limit."""
        near = [i for i, (_, key, value) in enumerate(records)
                if len(value) > VALUE_BOUND or (key is not None and len(key) > KEY_BOUND)]
        refused = set()
        for index in near:
            topic, key, value = records[index]
            why = oversize(key, value)
            if why is not None:
                refused.add(index)
                refused_here = RecordRefused(suffixed(topic, self.suffix), "too_large", why, index)
                self._outcomes.append((on_delivery, refused_here))
        return refused

    def poll(self, timeout: float = 0.0) -> None:
        """Serve the delivery outcomes that arrived (waiting up to `timeout` seconds for one)."""
        if self._impl is not None:
            self._impl.poll(0.0 if self._outcomes else timeout)
        else:
            deadline = time.monotonic() + timeout
            while not self._outcomes and time.monotonic() < deadline:
                time.sleep(0.001)
        self._serve()

    def _serve(self) -> None:
        """Run the queued outcomes' callbacks (kafka-python's reports, the refusals made here)."""
        while self._outcomes:
            callback, error = self._outcomes.popleft()
            callback(error)

    def flush(self, timeout: float | None = 120.0) -> int:
        """Wait until every record sent so far is acknowledged; return how many were."""
        if self._impl is not None:
            try:
                return self._impl.flush(timeout)
            finally:
                self._serve()  # the refusals made here, before sending
        self._producer.flush(timeout=timeout)
        self.poll()
        pending, self._pending = self._pending, []
        for future in pending:
            future.get(timeout=0)  # re-raises the send's error, if it had one
        return len(pending)

    def close(self, timeout: float = 30.0) -> None:
        try:
            self.flush(timeout)
        finally:
            if self._impl is not None:
                self._impl.close()
            else:
                self._producer.close(timeout=timeout)


class _Confluent:
    """librdkafka's producer with kafka-python's settings; delivery reports counted per flush."""

    def __init__(self, bootstrap: str, client_id: str, linger_ms: int, security: SecurityConfig | None = None) -> None:
        from confluent_kafka import Producer as RdProducer

        self._producer = RdProducer({**confluent_security(security),
            "bootstrap.servers": bootstrap, "client.id": client_id, "acks": "all", "enable.idempotence": True,
            "linger.ms": linger_ms, "message.max.bytes": MESSAGE_MAX_BYTES + CLIENT_SLACK, "batch.size": 1024 * 1024,
            "delivery.timeout.ms": 180_000, "request.timeout.ms": 30_000, "retry.backoff.ms": 200,
            "reconnect.backoff.max.ms": 2000, "partitioner": "murmur2_random"})
        self._sent = 0
        self._calls = 0
        self._unflushed = False  # anything produced since the last flush (a flush of nothing is skipped)
        self._tracked: _Tracked | None = None
        self._failed: list[str] = []

    def _report(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failed.append(f"{msg.topic()}: {err}")

    def send(self, topic: str, key: bytes | None, value: bytes, partition: int | None,
             on_delivery: Delivered | None = None) -> None:
        extra = {} if partition is None else {"partition": partition}
        if on_delivery is None:
            report = self._report
        elif self._tracked is not None and self._tracked.callback is on_delivery:  # a batch's records share one
            report = self._tracked
        else:
            report = self._tracked = _Tracked(on_delivery)
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=report, **extra)
                break
            except BufferError:  # the local queue is full: serve delivery reports, then try again
                self._producer.poll(0.1)
        if on_delivery is None:
            self._sent += 1
        self._calls += 1
        self._unflushed = True
        if self._calls & 63 == 0:  # serve reports now and then, not a C call per record
            self._producer.poll(0)

    def send_many(self, records: list[Outgoing], sendable: "range | list[int]", on_delivery: Delivered,
                  suffix: str = "") -> None:
        """One `produce_batch` per topic of the records at `sendable`: librdkafka enqueues the list in
        one C call and runs the partitioner (murmur2) per key, as produce() does; about half the CPU a
        record of a produce() call with a delivery callback of its own (bench/source.py). A record the
        queue had no room for comes back marked and is sent again, after the reports that free the room."""
        report = _Tracked(on_delivery, records)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for index in sendable:  # str keys go as they are: librdkafka takes their UTF-8
            topic, key, value = records[index]
            messages = by_topic.get(topic)
            if messages is None:
                messages = by_topic[topic] = []
            messages.append({"value": value, "key": key})
        for topic, messages in by_topic.items():
            self._produce_batch(suffixed(topic, suffix), messages, report)
        self._unflushed = True
        self._producer.poll(0)

    def _produce_batch(self, topic: str, messages: list[dict[str, Any]], report: "_Tracked") -> None:
        """produce_batch until every message is enqueued or refused (reported, naming its record)."""
        while messages:
            if self._producer.produce_batch(topic, messages, on_delivery=report) == len(messages):
                break
            retry = []
            for message in messages:
                error = message.pop("_error", None)
                if error is None:
                    continue
                if error.code() == _QUEUE_FULL:
                    retry.append(message)
                else:  # never enqueued: no report will come for it
                    index = report.index_of(_key(message["key"]), message["value"])
                    report.callback(refusal(topic, error.code(), str(error), index))
            if retry:
                self._producer.poll(0.1)
            messages = retry

    def poll(self, timeout: float) -> None:
        self._producer.poll(timeout)

    def flush(self, timeout: float | None) -> int:
        if not self._unflushed and not self._failed:  # a consumer flushes every cycle: most have sent nothing
            return 0  # (librdkafka's flush of an empty queue was 13% of a rollout replica's CPU)
        left = self._producer.flush(-1 if timeout is None else timeout)
        self._unflushed = bool(left)
        sent, failed = self._sent, self._failed
        self._sent, self._failed = 0, []
        if failed:
            raise ProduceError(f"{len(failed)} of {sent} records not delivered; first: {failed[0]}")
        if left:
            raise ProduceError(f"{left} of {sent} records not acknowledged within {timeout} s")
        return sent

    def close(self) -> None:
        self._producer.flush(0)


def _queue_full_code() -> int:
    from confluent_kafka import KafkaError as RdKafkaError

    return RdKafkaError._QUEUE_FULL


_QUEUE_FULL = _queue_full_code()


class _Tracked:
    """librdkafka's (err, msg) report as the caller's on_delivery(error or None). A failed record of
    a send_many is found in its list by key and value (reports carry no index; only failures pay)."""
    __slots__ = ("callback", "records", "by_key", "named")

    def __init__(self, callback: Delivered, records: list[Outgoing] | None = None) -> None:
        self.callback, self.records = callback, records
        self.by_key: dict[bytes | None, list[int]] | None = None  # built on the first failure
        self.named: set[int] = set()  # records already reported failed (two records alike: one each)

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self.callback(None)
            return
        self.callback(refusal(msg.topic(), err.code(), str(err), self.index_of(msg.key(), msg.value())))

    def index_of(self, key: bytes | None, value: bytes | None) -> int | None:
        """The place in send_many's list of the first record not yet named with this key and value."""
        if self.records is None:
            return None
        if self.by_key is None:
            self.by_key = {}
            for index, (_, k, _) in enumerate(self.records):
                self.by_key.setdefault(_key(k), []).append(index)
        for index in self.by_key.get(key, ()):
            if index not in self.named and self.records[index][2] == value:
                self.named.add(index)
                return index
        return None
