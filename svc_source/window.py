"""Batches of prompts sent and not yet acknowledged, and the state record each one allows.

Why: a flush after every batch left the source idle for the broker's round trip once a batch (~26%
of its time, bench/README.md). Now batch i+1 is drawn and sent while i is in flight; each record's
delivery report counts its batch down, and the `source_state` record of batch i goes out only once
every batch up to i is acknowledged (prompts and dead letters), so a state never claims a draw the
broker has not got. A kill -9 leaves at most `limit` batches past the newest state, which the
restart's tail scan finds (svc_source.state.published_since).

A record that failed is sent again, under the same message id; the records of its batch that were
acknowledged are not. A prompt the bus refuses for what it is (too large, invalid: RecordRefused)
would fail every time: its row's dead letter goes in its place (the service's `Letter`, counted with
the bad rows), so one row never wedges the source and nothing drawn is lost.
"""
from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable

from m1flow.bus import Producer, codec
from m1flow.bus.producer import RecordRefused
from m1flow.bus.topics import SOURCE_STATE
from m1flow.contracts import events
from svc_source import metrics

log = logging.getLogger(__name__)

Record = tuple[str, str, bytes]  # (topic, key, framed value)
Origin = tuple[str, int, int]  # (source, row, epoch) a prompt was drawn from; None for a dead letter
Letter = Callable[[Origin, RecordRefused], Record]  # the dead letter of a refused prompt, counted
UNNAMED = -1  # a failure whose report names no record: the whole round goes again


class Batch:
    """One batch's records, where each prompt was drawn, and the state after its draws; counts the
    delivery reports of the round in flight down and keeps its failures by record."""
    __slots__ = ("records", "origins", "per_source", "state", "round", "left", "failed")

    def __init__(self, records: list[Record], state: events.SourceState,
                 origins: list[Origin | None] | None = None, per_source: Counter | None = None) -> None:
        self.records, self.state = records, state
        self.origins = origins if origins is not None else [None] * len(records)
        self.per_source = per_source if per_source is not None else Counter(o[0] for o in self.origins if o)
        self.round: range | list[int] = range(len(records))  # the records in flight, by index
        self.left = len(records)
        self.failed: dict[int, Exception] = {}  # record index (UNNAMED: none named) -> its error

    def start(self, indices: list[int]) -> list[Record]:
        """A round that sends these records: its reports are counted from now."""
        self.round, self.left, self.failed = indices, len(indices), {}
        return [self.records[i] for i in indices]

    def delivered(self, error: Exception | None) -> None:
        self.left -= 1
        if error is not None:
            at = getattr(error, "index", None)
            index = self.round[at] if at is not None and 0 <= at < len(self.round) else UNNAMED
            self.failed.setdefault(index, error)


def next_round(batch: Batch) -> tuple[list[int], list[tuple[int, RecordRefused]]]:
    """After every report of a round came: (the records to send again, the records refused for what
    they are). A refusal is never a reason to send the others again; a failure that names no record
    is (the whole round, but the refused)."""
    refused = sorted((i, e) for i, e in batch.failed.items() if i != UNNAMED and isinstance(e, RecordRefused))
    if UNNAMED in batch.failed:
        out = {i for i, _ in refused}
        return [i for i in batch.round if i not in out], refused
    return sorted(i for i, e in batch.failed.items() if not isinstance(e, RecordRefused)), refused


class Window:
    """At most `limit` batches in flight; states sent in draw order, each after its batch's acks.
    letter: the service's dead letter for a prompt the bus refuses (svc_source.draws.Draws.refused)."""

    def __init__(self, producer: Producer, state_key: str, limit: int, letter: Letter) -> None:
        self.producer, self.state_key, self.limit, self.letter = producer, state_key, limit, letter
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
        self.producer.send_many(batch.records, batch.delivered)  # the first round: every record
        self.batches.append(batch)

    def _produce(self, batch: Batch, indices: list[int]) -> None:
        self.producer.send_many(batch.start(indices), batch.delivered)

    def settle(self, wait_s: float = 0.0) -> int:
        """Serve delivery reports (up to wait_s for one), send the state of the acknowledged batches
        at the head, send a failed batch's failed records again (a refused prompt's dead letter in
        its place); returns how many batches were acknowledged."""
        self.producer.poll(wait_s)
        done, newest = 0, None
        while self.batches:
            batch = self.batches[0]
            if batch.left:
                break
            if batch.failed:
                again = self._retry(batch)
                if again:
                    self._produce(batch, again)  # in its place: the states after it wait for it
                    break
            self.batches.popleft()
            done, newest = done + 1, batch.state
            _count_published(batch)
        if newest is not None:
            self.producer.send_bytes(SOURCE_STATE, self.state_key, codec.encode(newest), on_delivery=_state_sent)
            self.acked, self.states = newest, self.states + 1
        return done

    def _retry(self, batch: Batch) -> list[int]:
        """The records of a batch's next round: those that failed, a refused prompt's letter instead
        of it (a refused letter is dropped, said in the log: nothing else can hold it)."""
        again, refused = next_round(batch)
        if again:
            why = next((e for e in batch.failed.values() if not isinstance(e, RecordRefused)),
                       batch.failed.get(UNNAMED))
            log.warning("%s of a batch of %s records not delivered, sending them again: %s", len(again),
                        len(batch.records), why)
        for index, error in refused:
            origin = batch.origins[index]
            if origin is None:
                log.error("a dead letter was refused by the bus and is dropped: %s", error)
                continue
            batch.records[index], batch.origins[index] = self.letter(origin, error), None
            batch.per_source[origin[0]] -= 1  # not a prompt on `prompts`: a bad row
            again.append(index)
        return sorted(again)

    def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for every batch in flight and send the last state (the service's stop); a round of
        letters or records sent again is waited for too, a few rounds at most."""
        for _ in range(3):
            self.producer.flush(timeout_s)
            self.settle()
            if not self.batches:
                break
        self.producer.flush(timeout_s)


def _state_sent(error: Exception | None) -> None:
    if error is not None:  # a later state (or the restart's tail scan) covers it
        log.warning("a `source_state` record was not delivered: %s", error)


def _count_published(batch: Batch) -> None:
    """The batch's prompts, acknowledged on `prompts`, per source (a refused one is a bad row instead)."""
    for source, count in batch.per_source.items():
        if count:
            metrics.PUBLISHED.labels(source).inc(count)
