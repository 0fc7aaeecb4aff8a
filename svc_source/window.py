"""Batches of prompts sent and not yet acknowledged, and the state record each one allows.

Why: a flush after every batch left the source idle for the broker's round trip once a batch (~26%
of its time, bench/README.md). Now batch i+1 is drawn and sent while i is in flight; each record's
delivery report counts its batch down, and the `source_state` record of batch i goes out only once
every batch up to i is acknowledged (prompts and dead letters), so a state never claims a draw the
broker has not got. A kill -9 leaves at most `limit` batches past the newest state, which the
restart's tail scan finds (svc_source.state.published_since). A batch whose delivery failed is
sent again, whole, under the same message ids.
"""
from __future__ import annotations

import logging
from collections import deque

from m1flow.bus import Producer, codec
from m1flow.bus.topics import SOURCE_STATE
from m1flow.contracts import events

log = logging.getLogger(__name__)

Record = tuple[str, str, bytes]  # (topic, key, framed value)


class Batch:
    """One batch's records and the state after its draws; counts its delivery reports down."""
    __slots__ = ("records", "state", "left", "error")

    def __init__(self, records: list[Record], state: events.SourceState) -> None:
        self.records, self.state = records, state
        self.left, self.error = len(records), None

    def delivered(self, error: Exception | None) -> None:
        self.left -= 1
        if error is not None and self.error is None:
            self.error = error


class Window:
    """At most `limit` batches in flight; states sent in draw order, each after its batch's acks."""

    def __init__(self, producer: Producer, state_key: str, limit: int) -> None:
        self.producer, self.state_key, self.limit = producer, state_key, limit
        self.batches: deque[Batch] = deque()
        self.acked: events.SourceState | None = None  # the newest state sent
        self.states = 0  # state records sent (a bench's regime figure)
        self.value_bytes = 0  # bytes of the record values sent (the bench's mean record size)

    def __len__(self) -> int:
        return len(self.batches)

    @property
    def full(self) -> bool:
        return len(self.batches) >= self.limit

    def send(self, batch: Batch) -> None:
        self.value_bytes += sum(len(value) for _, _, value in batch.records)
        self._produce(batch)
        self.batches.append(batch)

    def _produce(self, batch: Batch) -> None:
        batch.left, batch.error = len(batch.records), None
        self.producer.send_many(batch.records, batch.delivered)

    def settle(self, wait_s: float = 0.0) -> int:
        """Serve delivery reports (up to wait_s for one), send the state of the acknowledged batches
        at the head, send a failed batch again; returns how many batches were acknowledged."""
        self.producer.poll(wait_s)
        done, newest = 0, None
        for batch in list(self.batches):
            if batch.left:
                break
            if batch.error is not None:
                log.warning("a batch of %s records was not delivered, sending it again: %s", len(batch.records),
                            batch.error)
                self._produce(batch)  # in its place: the states after it wait for it
                break
            self.batches.popleft()
            done, newest = done + 1, batch.state
        if newest is not None:
            self.producer.send_bytes(SOURCE_STATE, self.state_key, codec.encode(newest), on_delivery=_state_sent)
            self.acked, self.states = newest, self.states + 1
        return done

    def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for every batch in flight and send the last state (the service's stop)."""
        self.producer.flush(timeout_s)
        self.settle()
        self.producer.flush(timeout_s)


def _state_sent(error: Exception | None) -> None:
    if error is not None:  # a later state (or the restart's tail scan) covers it
        log.warning("a `source_state` record was not delivered: %s", error)
