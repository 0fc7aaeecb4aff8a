"""Which offsets a consumer may commit: everything below its oldest record still in flight.

A stateful service (the reward service holds a group's rollouts until the group is complete) must
not commit past a record whose outputs are not yet written, or a crash would lose it.
"""
from __future__ import annotations

from collections import defaultdict


class OffsetTracker:
    def __init__(self) -> None:
        self._pending: dict[tuple[str, int], set[int]] = defaultdict(set)
        self._next: dict[tuple[str, int], int] = {}

    def track(self, topic: str, partition: int, offset: int) -> None:
        tp = (topic, partition)
        self._pending[tp].add(offset)
        self._next[tp] = max(self._next.get(tp, 0), offset + 1)

    def done(self, topic: str, partition: int, offset: int) -> None:
        self._pending[(topic, partition)].discard(offset)

    def in_flight(self) -> int:
        return sum(len(offsets) for offsets in self._pending.values())

    def committable(self) -> dict[tuple[str, int], int]:
        """Per partition, the offset to commit: the oldest pending record, or one past the last seen."""
        return {tp: min(self._pending[tp]) if self._pending[tp] else nxt
                for tp, nxt in self._next.items()}

    def read_positions(self) -> dict[tuple[str, int], int]:
        """Per partition, one past the newest record handled (held ones included)."""
        return dict(self._next)

    def forget(self, partitions: set[tuple[str, int]]) -> None:
        """Drop partitions this consumer no longer owns (after a rebalance)."""
        for tp in partitions:
            self._pending.pop(tp, None)
            self._next.pop(tp, None)
