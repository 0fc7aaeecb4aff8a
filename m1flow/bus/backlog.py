"""What a stream worker has read and not yet handled, per partition, served in turn.

kafka-python hands out one partition's fetched records until they run out, so a consumer that takes
a few records per step (the rollout service takes one) would drain one partition while the others
wait; keeping a small backlog per partition and taking from them in turn reads every owned partition
at the same pace. A partition whose backlog holds a poll's worth is paused while the others are
polled; one with a few records waiting is not: a lasting pause reaches librdkafka, which fetches a
resumed partition only about 0.5 s later (bench/pause_resume.py), and the rollout service, whose
prompts always wait a few to a partition (the source's lead), lost that half second a version every
second or so. In a replay, a partition stops at its stop offset: what lies past it is never queued.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from m1flow.bus.clients import TP, Consumer
from m1flow.bus.records import Record


class Backlog:
    def __init__(self, consumer: Consumer, poll_records: int, stop_offsets: dict[str, int] | None) -> None:
        self.consumer, self.poll_records, self.stop_offsets = consumer, poll_records, stop_offsets
        self.queues: dict[TP, deque] = {}
        self.at_stop: set[TP] = set()

    def fill(self, throttled: bool, poll_ms: int, after_poll: Callable[[], None]) -> None:
        """Poll for the partitions whose backlog is not full (none while throttled); `after_poll` applies
        the rebalance the poll may have reported before its records are queued."""
        assigned = self.consumer.assignment()
        busy = {tp for tp, q in self.queues.items() if q}
        full = {tp for tp in busy if len(self.queues[tp]) >= self.poll_records}
        hold = assigned if throttled else (full | self.at_stop) & assigned
        self.consumer.pause(hold)
        self.consumer.resume((assigned - hold) & self.consumer.paused())
        batches = self.consumer.poll(timeout_ms=0 if busy else poll_ms, max_records=self.poll_records)
        after_poll()
        if not batches and not assigned:
            time.sleep(poll_ms / 1000)  # poll returns at once without partitions: don't spin
        owned = self.consumer.assignment()
        for tp, raw_records in batches.items():
            if tp not in owned:  # revoked during this very poll
                continue
            queue = self.queues.setdefault(tp, deque())
            end = self.stop_at(*tp)
            for raw in raw_records:
                if raw.offset >= end:
                    self.at_stop.add(tp)
                    break
                queue.append(raw)

    def next(self) -> Record | None:
        """The next record, one partition after the other; a partition served goes to the back of the
        line, so the turn carries over from one step to the next."""
        tp = next((tp for tp, q in self.queues.items() if q), None)
        if tp is None:
            return None
        queue = self.queues.pop(tp)
        raw = queue.popleft()
        self.queues[tp] = queue
        return Record(tp[0], tp[1], raw.offset, raw.key, raw.value, raw.timestamp)

    def stop_at(self, topic: str, partition: int) -> float:
        if self.stop_offsets is None:
            return float("inf")
        return self.stop_offsets.get(f"{topic}/{partition}", 0)

    def lag(self) -> int:
        """Records left on the owned partitions, up to their end (replay: their stop offsets): the
        ones not yet read and the ones queued here. ClientError when the broker cannot be reached."""
        parts = self.consumer.assignment()
        if not parts:
            return 0
        ends = self.consumer.end_offsets(parts)
        unread = sum(max(0, min(ends[tp], self.stop_at(*tp)) - self.consumer.position(tp)) for tp in parts)
        return unread + sum(len(q) for q in self.queues.values())

    def reached_stop(self) -> bool:
        """Replay: nothing queued, and every partition with a stop offset read up to it."""
        if self.stop_offsets is None or any(self.queues.values()):
            return False
        for key, end in self.stop_offsets.items():
            topic, part = key.rsplit("/", 1)
            if end > 0 and self.consumer.position((topic, int(part))) < end:
                return False
        return True

    def forget(self, partitions: set[TP]) -> None:
        for tp in partitions:
            self.queues.pop(tp, None)
