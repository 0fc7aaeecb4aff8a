"""How far the source runs ahead of the rollout service: prompts on `prompts` the rollout group has
not committed (queued or in its engine), counted in learner batches.

The limit is `lead_steps * batch_groups` prompts, batch_groups as the learner announces it on
`policy` (the config's value until it does), so the mixture a `control` command sets takes effect
within a step or two. Before the rollout group first commits, the source counts what it published
itself (as svc_rollout's backpressure counts its own groups before the learner commits): a rollout
service that is not running yet stops the source after one lead's worth.
"""
from __future__ import annotations

import math

from m1flow.bus.lag import GroupLag, LagPacer, Reading


class Lead:
    """The source's pacing: prompts the rollout group has not committed, under lead_steps batches."""

    def __init__(self, lag: GroupLag | None, group: str, topic: str, lead_steps: float, batch_groups: int,
                 refresh_s: float = 0.5) -> None:
        self.lag, self.group, self.topic = lag, group, topic
        self.lead_steps, self.batch_groups = lead_steps, batch_groups
        self.pacer = LagPacer(self._read if lag is not None else None, refresh_s, "the rollout group's lag")

    def _read(self) -> Reading:
        reading = self.lag.lag(self.group, self.topic)
        return (0, False) if reading is None else (reading, True)

    @property
    def outstanding(self) -> float:
        """Prompts published and not yet committed by the rollout group."""
        return self.pacer.waiting

    @property
    def limit(self) -> int | None:
        """Prompts allowed outstanding (None: no limit), never less than one batch."""
        if self.lag is None or self.lead_steps <= 0:
            return None
        return max(self.batch_groups, math.ceil(self.lead_steps * self.batch_groups))

    def learner_batch(self, batch_groups: int) -> None:
        if batch_groups:
            self.batch_groups = batch_groups

    def published(self, n: int) -> None:
        """Counted outstanding until the next lag reading includes them."""
        self.pacer.produced(n)

    def refresh(self) -> None:
        self.pacer.refresh()

    def room(self) -> int | None:
        """How many prompts may be published now (None: no limit)."""
        limit = self.limit
        return None if limit is None else self.pacer.room(limit)

    def close(self) -> None:
        if self.lag is not None:
            self.lag.close()
