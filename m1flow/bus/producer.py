"""The one way m1flow writes to Kafka: idempotent, acks=all, framed protobuf values."""
from __future__ import annotations

from kafka import KafkaProducer
from kafka.producer.future import FutureRecordMetadata
from google.protobuf.message import Message

from m1flow.bus import codec
from m1flow.bus.topics import TopicSpec, suffixed
from m1flow.security.config import SecurityConfig, kafka_python as kafka_security


def _key(key: str | bytes | None) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    return key.encode()


class Producer:
    """Idempotent producer. `flush()` raises if any send since the last flush failed.

    Consumers call flush() before they commit input offsets: that ordering is what makes
    "commit only after the outputs are acknowledged" true.
    """

    def __init__(self, bootstrap: str, client_id: str, linger_ms: int = 5, suffix: str = "",
                 security: SecurityConfig | None = None) -> None:
        self.suffix = suffix
        self._producer = KafkaProducer(**kafka_security(security),
            bootstrap_servers=bootstrap, client_id=client_id, acks="all", enable_idempotence=True,
            linger_ms=linger_ms, max_request_size=16 * 1024 * 1024, batch_size=1024 * 1024,
            delivery_timeout_ms=180_000, request_timeout_ms=30_000, retry_backoff_ms=200,
            reconnect_backoff_max_ms=2000)
        self._pending: list[FutureRecordMetadata] = []

    def send(self, topic: TopicSpec | str, key: str | bytes | None, message: Message,
             partition: int | None = None) -> FutureRecordMetadata:
        return self.send_bytes(topic, key, codec.encode(message), partition=partition)

    def send_bytes(self, topic: TopicSpec | str, key: str | bytes | None, value: bytes,
                   partition: int | None = None) -> FutureRecordMetadata:
        name = suffixed(topic if isinstance(topic, str) else topic.name, self.suffix)
        future = self._producer.send(name, key=_key(key), value=value, partition=partition)
        self._pending.append(future)
        return future

    def flush(self, timeout: float | None = 120.0) -> int:
        """Wait until every record sent so far is acknowledged; return how many were."""
        self._producer.flush(timeout=timeout)
        pending, self._pending = self._pending, []
        for future in pending:
            future.get(timeout=0)  # re-raises the send's error, if it had one
        return len(pending)

    def close(self, timeout: float = 30.0) -> None:
        try:
            self.flush(timeout)
        finally:
            self._producer.close(timeout=timeout)
