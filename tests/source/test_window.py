"""The window of batches in flight (svc_source.window): a batch's state record goes out only once
it and every batch before it is acknowledged, a failed batch is sent again in its place, and at most
`limit` are in flight. The producer here is a fake that holds delivery reports until told; the
real broker's side is tests/integration/test_source.py's kill -9 run and
tests/bus/test_producer_clients.py."""
from __future__ import annotations

from m1flow.bus import codec
from m1flow.contracts import events
from svc_source.window import Batch, Window


class HeldReports:
    """Records what was sent; delivery reports come only when the test releases them."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, bytes]] = []
        self.held: list[tuple[object, str]] = []
        self.states: list[int] = []

    def send_many(self, records, on_delivery) -> None:
        for topic, key, value in records:
            self.send_bytes(topic, key, value, on_delivery=on_delivery)

    def send_bytes(self, topic, key, value, partition=None, on_delivery=None) -> None:
        topic = getattr(topic, "name", topic)
        self.sent.append((topic, key, value))
        if topic == "source_state":
            self.states.append(codec.decode(value, events.SourceState).draws)
        else:
            self.held.append((on_delivery, key))

    def release(self, key: str, error: Exception | None = None) -> None:
        for i, (callback, k) in enumerate(self.held):
            if k == key:
                del self.held[i]
                callback(error)
                return
        raise AssertionError(f"{key} not in flight")

    def poll(self, timeout: float = 0.0) -> None:
        pass

    def flush(self, timeout: float | None = None) -> int:
        return 0


def batch(draws: int, *keys: str) -> Batch:
    return Batch([("prompts", k, k.encode()) for k in keys], events.SourceState(draws=draws))


def test_a_state_waits_for_its_batch_and_every_batch_before_it():
    producer = HeldReports()
    window = Window(producer, "run/g", limit=3)
    window.send(batch(2, "a", "b"))
    window.send(batch(4, "c", "d"))
    assert window.full is False
    window.send(batch(6, "e", "f"))
    assert window.full
    for key in ("c", "d", "e"):  # the later batches are acknowledged first
        producer.release(key)
    window.settle()
    assert producer.states == []  # batch 1 is not: no state may claim draws 3..6
    producer.release("a")
    window.settle()
    assert producer.states == []
    producer.release("b")
    assert window.settle() == 2 and producer.states == [4]  # batches 1 and 2 at once: one state, the newest
    producer.release("f")
    window.settle()
    assert producer.states == [4, 6] and len(window) == 0


def test_a_failed_batch_is_sent_again_in_its_place_and_blocks_the_states_after_it():
    producer = HeldReports()
    window = Window(producer, "run/g", limit=4)
    window.send(batch(1, "a"))
    window.send(batch(2, "b"))
    producer.release("a", RuntimeError("broker away"))
    producer.release("b")
    window.settle()
    assert producer.states == [] and [k for _, k, _ in producer.sent].count("a") == 2  # sent again
    producer.release("a")
    window.settle()
    assert producer.states == [2]
