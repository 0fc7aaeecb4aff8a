"""The one outcome vocabulary, the proto enum `m1flow.v1.Status`, as a Python IntEnum.

Why derived from the descriptor: the contract (proto/m1flow/v1/events.proto) is the only list of
statuses; a hand-written copy here would drift. Members drop the `STATUS_` prefix
(`Status.TIME_LIMIT == events.STATUS_TIME_LIMIT`), so a value goes on the wire as it is.
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
