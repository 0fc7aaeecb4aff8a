"""Schema-1 `scored` records, read as schema 2, so an older topic replays into today's learner.

Schema 1 (before the algorithm moved to the learner) carried the status as a string, and its
rewards were already shaped by the reward service (format reward and overlong penalty included),
with advantages and dynamic-sampling flags the learner now computes itself and ignores. Reading
either schema's status is `m1flow.status.status_of`.
"""
from __future__ import annotations

from m1flow.contracts import events
from m1flow.status import status_of

SCHEMA_SHAPING_MOVED = 2  # from this schema on, rewards are the verifier's and the learner shapes them


def rewards_are_shaped(group: events.ScoredGroup) -> bool:
    """True for schema-1 groups: their rewards already hold the format reward and overlong penalty."""
    return 0 < group.header.schema_version < SCHEMA_SHAPING_MOVED


def upgrade(group: events.ScoredGroup) -> events.ScoredGroup:
    """Schema 1 -> 2 in place: enum statuses; the header keeps its version (see rewards_are_shaped)."""
    if rewards_are_shaped(group):
        for sample in group.samples:
            sample.status = status_of(sample)
            sample.ClearField("legacy_status")
    return group
