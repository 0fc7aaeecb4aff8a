"""The one outcome vocabulary, the proto enum `m1flow.v1.Status`, as a Python IntEnum.

Why derived from the descriptor: the contract (proto/m1flow/v1/events.proto) is the only list of
statuses; a hand-written copy here would drift. Members drop the `STATUS_` prefix
(`Status.TIME_LIMIT == events.STATUS_TIME_LIMIT`), so a value goes on the wire as it is.
`status_of` reads a scored sample's status whichever schema wrote it: every reader (learner,
monitor) asks it here, not in the RL package.
"""
from __future__ import annotations

from enum import IntEnum

from m1flow.contracts import events

INFRA_FAILURE_FROM = 16  # the contract: from here up, our infrastructure failed, not the sample


class _StatusBase(IntEnum):
    @property
    def is_infra_failure(self) -> bool:
        """True when the outcome says nothing about the sample, only about our infrastructure."""
        return self.value >= INFRA_FAILURE_FROM


Status = _StatusBase("Status", {name.removeprefix("STATUS_"): number
                                for name, number in events.Status.items()}, module=__name__)


# Schema 1 carried the status as a string in `ScoredSample.legacy_status`.
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
