"""Batches of trainable groups: DAPO's dynamic sampling as a pure object over ScoredGroups.

A step trains on `batch_groups` groups that each have something to teach; a skipped group does
not take a place in the batch, the next trainable one does. The learner feeds it from Kafka and
adds only one rule of its own (an idle input flushes a partial batch); `fill_batches` gives the
same batches offline, for benchmarks and tests.

    filler = BatchFiller(AlgorithmConfig(), batch_groups=16)
    for group in groups:
        filler.offer(group, current_version=version)   # Selected (queued) or Skipped (with why)
        if filler.full:
            train(filler.take()); version += 1
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

from m1flow.contracts import events
from m1flow.rl.config import AlgorithmConfig
from m1flow.rl.legacy import upgrade
from m1flow.rl.selection import Selected, Skipped, check_group


class BatchFiller:
    def __init__(self, cfg: AlgorithmConfig, batch_groups: int) -> None:
        if batch_groups < 1:
            raise ValueError(f"batch_groups must be at least 1, got {batch_groups}")
        self.cfg = cfg
        self.batch_groups = batch_groups
        self.pending: list[Selected] = []

    def offer(self, group: events.ScoredGroup, current_version: int) -> Selected | Skipped:
        """Check, select and (when trainable) queue a group; ValueError when it is not whole.

        current_version is the version the queued groups will be trained from: the learner trains
        every queued group at the next step, so staleness decided here is staleness at training.
        """
        group = upgrade(group)
        check_group(group)
        outcome = self.cfg.select(group, current_version)
        if isinstance(outcome, Selected):
            self.pending.append(outcome)
        return outcome

    @property
    def full(self) -> bool:
        return len(self.pending) >= self.batch_groups

    def holds(self, group_id: str) -> bool:
        return any(s.group_id == group_id for s in self.pending)

    def take(self) -> list[Selected]:
        """The queued groups (a full batch, or fewer when the caller flushes), oldest first."""
        batch, self.pending = self.pending, []
        return batch


def fill_batches(groups: Iterable[events.ScoredGroup], cfg: AlgorithmConfig, batch_groups: int,
                 start_version: int = 0, flush: bool = True) -> Iterator[list[Selected]]:
    """The batches a learner starting at start_version trains on, for groups arriving in this order.

    Each batch is trained at the next version (start_version, start_version + 1, ...), which is what
    staleness is measured against; `flush` yields the last partial batch (the learner's idle flush).
    """
    filler = BatchFiller(cfg, batch_groups)
    version = start_version
    for group in groups:
        filler.offer(group, version)
        if filler.full:
            yield filler.take()
            version += 1
    if flush and filler.pending:
        yield filler.take()
