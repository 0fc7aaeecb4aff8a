"""Per-source accounting: which dataset or generator a group came from, which verifier kind scored
it, and label values for both that stay few enough to be metric labels.

Why one home: the reward service names a group's source, and the learner and the monitor split their
reward, accuracy, length and throughput by it; all three must agree on what the source of a record
written before the field existed is (its task type) and on what a missing kind is (`scored_kind`; the
kind's name itself, the part before ':', is m1flow.kinds.kind_of).

Partial credit: a reward is any float (a puzzle scored 0.5); accuracy counts only the verdict
(`correct`), never the reward, so a partial-credit sample with no verdict counts in the mean reward
and not in accuracy (see m1flow.group_totals).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from m1flow.contracts import events

UNKNOWN = "?"
OTHER = "other"
T = TypeVar("T")
MAX_LABELS = 64  # distinct sources (and kinds) a process labels by name; the rest are "other"


class _Sourced(Protocol):
    source: str
    task_type: str


def source_of(message: _Sourced) -> str:
    """A Prompt's, Rollout's or ScoredGroup's source; records from before the field: the task type."""
    return message.source or message.task_type or UNKNOWN


def scored_kind(group: events.ScoredGroup) -> str:
    """The verifier kind that scored a group; groups from before the field: the task type."""
    return group.verifier_kind or group.task_type or UNKNOWN


class BoundedLabels:
    """Label values of bounded cardinality: the first `limit` distinct names keep their name, later
    ones become "other", so a feed of thousands of sources cannot grow the metrics store without end.
    The names are remembered per process (a restarted learner may label other sources by name)."""

    def __init__(self, limit: int = MAX_LABELS) -> None:
        self.limit = limit
        self.named: set[str] = set()

    def __call__(self, name: str) -> str:
        if name in self.named:
            return name
        if len(self.named) < self.limit:
            self.named.add(name)
            return name
        return OTHER


class SourceKindLabels:
    """The {source, kind} labels of a group, each capped by its own BoundedLabels."""

    def __init__(self, limit: int = MAX_LABELS) -> None:
        self.sources = BoundedLabels(limit)
        self.kinds = BoundedLabels(limit)

    def __call__(self, group: events.ScoredGroup) -> tuple[str, str]:
        return self.sources(source_of(group)), self.kinds(scored_kind(group))


def split_by_source(items: Iterable[T], labels: Callable[[T], tuple[str, str]]) -> dict[tuple[str, str], list[T]]:
    """Items (groups, or what wraps them) per (source, kind) label pair, in the order they came."""
    out: dict[tuple[str, str], list[T]] = {}
    for item in items:
        out.setdefault(labels(item), []).append(item)
    return out

