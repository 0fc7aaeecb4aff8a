"""How far the source runs ahead of the rollout service: prompts on `prompts` the rollout group has
not committed (queued or in its engine), counted in learner batches.

The limit is `lead_steps * batch_groups` prompts, batch_groups as the learner announces it on
`policy` (the config's value until it does), so the mixture a `control` command sets takes effect
within a step or two. Before the rollout group first commits, the source counts what it published
itself (as svc_rollout's backpressure counts its own groups before the learner commits): a rollout
service that is not running yet stops the source after one lead's worth.
"""
from __future__ import annotations

import logging
import math
import time

from kafka.errors import KafkaError

from m1flow.bus.lag import GroupLag

log = logging.getLogger(__name__)


class Lead:
    def __init__(self, lag: GroupLag | None, group: str, topic: str, lead_steps: float, batch_groups: int,
                 refresh_s: float = 0.5) -> None:
        self.lag, self.group, self.topic = lag, group, topic
        self.lead_steps, self.batch_groups, self.refresh_s = lead_steps, batch_groups, refresh_s
        self.outstanding = 0  # prompts published and not yet committed by the rollout group
        self._read_at = -math.inf

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
        self.outstanding += n

    def refresh(self) -> None:
        if self.lag is None or time.monotonic() - self._read_at < self.refresh_s:
            return
        self._read_at = time.monotonic()
        try:
            reading = self.lag.lag(self.group, self.topic)
        except KafkaError as exc:  # the broker is away: nothing is consumed either
            log.warning("reading the rollout group's lag failed: %s", exc)
            return
        self.outstanding = max(self.outstanding, 0) if reading is None else reading

    def room(self) -> int | None:
        """How many prompts may be published now (None: no limit)."""
        limit = self.limit
        return None if limit is None else max(0, limit - self.outstanding)

    def close(self) -> None:
        if self.lag is not None:
            self.lag.close()
