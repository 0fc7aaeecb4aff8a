"""The window of batches in flight (svc_source.window): a batch's state record goes out only once
it and every batch before it is acknowledged, a batch's failed records are sent again in its place
(not the acknowledged ones), a record the bus refuses is replaced by its dead letter (never the
batch sent again for it), and at most `limit` are in flight. The producer here is a fake that holds
delivery reports until told, naming each failure's record as the real one does; the real broker's
side is tests/integration/test_source.py (the kill -9 run, the oversize row) and
tests/bus/test_producer_clients.py."""
from __future__ import annotations

from m1flow.bus import codec
from m1flow.bus.producer import ProduceError, RecordRefused
from m1flow.contracts import events
from svc_source.window import UNNAMED, Batch, Window, next_round


class HeldReports:
    """Records what was sent; delivery reports come only when the test releases them."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, bytes]] = []
        self.held: list[tuple[object, str, int | None]] = []
        self.states: list[int] = []

    def send_many(self, records, on_delivery) -> None:
        for index, (topic, key, value) in enumerate(records):
            self.send_bytes(topic, key, value, on_delivery=on_delivery, index=index)

    def send_bytes(self, topic, key, value, partition=None, on_delivery=None, index=None) -> None:
        topic = getattr(topic, "name", topic)
        self.sent.append((topic, key, value))
        if topic == "source_state":
            self.states.append(codec.decode(value, events.SourceState).draws)
        else:
            self.held.append((on_delivery, key, index))

    def release(self, key: str, error: ProduceError | None = None) -> None:
        """The report of the record `key`; an error names the record by its place in its send_many."""
        for i, (callback, k, index) in enumerate(self.held):
            if k == key:
                del self.held[i]
                if error is not None:
                    error.index = index
                callback(error)
                return
        raise AssertionError(f"{key} not in flight")

    def poll(self, timeout: float = 0.0) -> None:
        pass

    def flush(self, timeout: float | None = None) -> int:
        return 0


def batch(draws: int, *keys: str) -> Batch:
    return Batch([("prompts", k, k.encode()) for k in keys], events.SourceState(draws=draws),
                 [("src", row, 0) for row in range(len(keys))])


class Letters:
    """The service's side of a refusal: a dead letter per refused prompt, remembered."""

    def __init__(self) -> None:
        self.refused: list[tuple[tuple, str]] = []

    def __call__(self, origin, error):
        self.refused.append((origin, error.code))
        return "dlq", "source:src", f"letter of row {origin[1]}".encode()


def too_large(topic: str = "prompts") -> RecordRefused:
    return RecordRefused(topic, "too_large", "record too large: 17,000,000 bytes")


def test_a_state_waits_for_its_batch_and_every_batch_before_it():
    producer = HeldReports()
    window = Window(producer, "run/g", limit=3, letter=Letters())
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
    window = Window(producer, "run/g", limit=4, letter=Letters())
    window.send(batch(1, "a", "a2"))
    window.send(batch(2, "b"))
    producer.release("a", ProduceError("broker away"))
    producer.release("a2")
    producer.release("b")
    window.settle()
    keys = [k for _, k, _ in producer.sent]
    assert producer.states == [] and keys.count("a") == 2  # sent again
    assert keys.count("a2") == 1  # acknowledged: not sent again
    producer.release("a")
    window.settle()
    assert producer.states == [2]


def published() -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("m1flow_source_prompts_total", {"source": "src"}) or 0.0


def test_a_refused_record_is_dead_lettered_in_its_place_and_the_batch_is_not_sent_again():
    producer, letters = HeldReports(), Letters()
    window = Window(producer, "run/g", limit=4, letter=letters)
    before = published()
    window.send(batch(3, "a", "big", "c"))
    producer.release("a")
    producer.release("big", too_large())
    producer.release("c")
    window.settle()
    assert letters.refused == [(("src", 1, 0), "too_large")]  # its row, to the service's letter
    assert [k for _, k, _ in producer.sent] == ["a", "big", "c", "source:src"]  # the letter, nothing else again
    assert producer.states == []  # the state waits for the letter
    producer.release("source:src")
    assert window.settle() == 1 and producer.states == [3] and len(window) == 0
    assert published() == before + 2  # counted on acknowledgement; the refused one is a bad row


def test_refusals_and_failures_in_one_round():
    """One round: a refused record and a failed one; the next round holds the letter and the failed
    record, and a refused letter is dropped (logged) rather than sent forever."""
    producer, letters = HeldReports(), Letters()
    window = Window(producer, "run/g", limit=4, letter=letters)
    window.send(batch(4, "a", "big", "c", "d"))
    producer.release("a")
    producer.release("big", too_large())
    producer.release("c", ProduceError("request timed out"))
    producer.release("d")
    window.settle()
    assert [k for _, k, _ in producer.sent][4:] == ["source:src", "c"]
    producer.release("source:src", too_large("dlq"))  # the letter itself refused: nothing can hold it
    producer.release("c")
    assert window.settle() == 1 and producer.states == [4] and len(letters.refused) == 1


def test_next_round_decides_from_the_reports():
    refused, away = too_large(), ProduceError("broker away")
    b = batch(0, "a", "b", "c", "d")
    b.failed = {1: refused, 3: away}
    assert next_round(b) == ([3], [(1, refused)])  # a refusal sends nothing else again
    b.failed = {1: refused}
    assert next_round(b) == ([], [(1, refused)])
    b.failed = {UNNAMED: away, 1: refused}  # a failure naming no record: the round again, but the refused
    assert next_round(b) == ([0, 2, 3], [(1, refused)])
    b.start([2, 3])  # a second round: reports name records by their place in it
    b.delivered(None)
    b.delivered(ProduceError("broker away", index=1))
    assert b.left == 0 and next_round(b) == ([3], [])
