"""Schema-1 `scored` records, read as schema 2, so an older topic replays into today's learner.

Schema 1 (before the algorithm moved to the learner) carried the status as a string, and its
rewards were already shaped by the reward service (format reward and overlong penalty included),
with advantages and dynamic-sampling flags the learner now computes itself and ignores.
"""
from __future__ import annotations

from m1flow.contracts import events
from m1flow.status import Status

SCHEMA_SHAPING_MOVED = 2  # from this schema on, rewards are the verifier's and the learner shapes them

LEGACY_STATUS = {
    "ok": Status.OK,
    "format_error": Status.FORMAT_ERROR,
    "timeout": Status.VERIFIER_TIMEOUT,
    "sandbox_error": Status.SANDBOX_ERROR,
    "judge_error": Status.JUDGE_ERROR,
}


def status_of(sample: events.ScoredSample) -> Status:
    """The sample's status as the enum, whichever schema wrote it (UNSPECIFIED when it says none)."""
    if sample.status:
        return Status(sample.status)
    if sample.legacy_status:
        try:
            return LEGACY_STATUS[sample.legacy_status]
        except KeyError:
            raise ValueError(f"sample {sample.rollout_id}: unknown schema-1 status "
                             f"{sample.legacy_status!r}") from None
    return Status.UNSPECIFIED


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
