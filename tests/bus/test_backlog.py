"""The stream worker's per-partition backlog: which partitions it pauses while it polls the others."""
from __future__ import annotations

from m1flow.bus.backlog import Backlog
from m1flow.bus.clients import TP, Fetched

A, B = ("prompts", 0), ("prompts", 1)


class Consumer:
    """The few calls the backlog makes, recorded; each poll hands out what `arrive` holds."""

    def __init__(self) -> None:
        self.owned = {A, B}
        self.paused_now: set[TP] = set()
        self.arrive: dict[TP, list[Fetched]] = {}
        self.polled_with: list[int] = []

    def assignment(self) -> set[TP]:
        return set(self.owned)

    def paused(self) -> set[TP]:
        return set(self.paused_now)

    def pause(self, partitions: set[TP]) -> None:
        self.paused_now |= partitions

    def resume(self, partitions: set[TP]) -> None:
        self.paused_now -= partitions

    def poll(self, timeout_ms: int, max_records: int) -> dict[TP, list[Fetched]]:
        self.polled_with.append(timeout_ms)
        out = {tp: rs for tp, rs in self.arrive.items() if tp not in self.paused_now}
        self.arrive = {tp: rs for tp, rs in self.arrive.items() if tp in self.paused_now}
        return out


def records(n: int, start: int = 0) -> list[Fetched]:
    return [Fetched(start + i, b"k", b"v", 0) for i in range(n)]


def test_a_partition_with_a_few_records_waiting_stays_fetched_and_a_full_one_is_paused():
    """A pause that lasts reaches librdkafka, which fetches the partition again only ~0.5 s after the
    resume (bench/pause_resume.py): the rollout service, whose prompts always wait a few to a
    partition, lost that half second every second or so. Only a partition holding a poll's worth
    is paused, which still bounds what the backlog holds."""
    consumer = Consumer()
    backlog = Backlog(consumer, poll_records=8, stop_offsets=None)
    consumer.arrive = {A: records(3)}
    backlog.fill(False, 200, lambda: None)
    assert consumer.polled_with == [200]  # nothing waiting: the poll may wait
    consumer.arrive = {A: records(4, 3), B: records(1)}
    backlog.fill(False, 200, lambda: None)
    assert consumer.paused_now == set() and consumer.polled_with[-1] == 0  # records wait: a poll does not
    assert [len(backlog.queues[tp]) for tp in (A, B)] == [7, 1]

    consumer.arrive = {A: records(2, 7)}
    backlog.fill(False, 200, lambda: None)  # A now holds 9 >= 8
    consumer.arrive = {A: records(1, 9), B: records(1, 1)}
    backlog.fill(False, 200, lambda: None)
    assert consumer.paused_now == {A} and len(backlog.queues[A]) == 9  # A paused, B still fetched
    assert len(backlog.queues[B]) == 2

    served = [(r.partition, r.offset) for r in (backlog.next() for _ in range(4))]
    assert served == [(0, 0), (1, 0), (0, 1), (1, 1)]  # in turn
    backlog.fill(False, 200, lambda: None)  # A down to 7: resumed, and its waiting record came
    assert consumer.paused_now == set() and len(backlog.queues[A]) == 8


def test_a_throttled_worker_pauses_every_partition():
    consumer = Consumer()
    backlog = Backlog(consumer, poll_records=8, stop_offsets=None)
    consumer.arrive = {A: records(2), B: records(2)}
    backlog.fill(True, 200, lambda: None)
    assert consumer.paused_now == {A, B} and not any(backlog.queues.values())
    backlog.fill(False, 200, lambda: None)
    assert consumer.paused_now == set() and [len(backlog.queues[tp]) for tp in (A, B)] == [2, 2]
