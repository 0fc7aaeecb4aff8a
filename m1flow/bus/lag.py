"""Committed-offset lag of a consumer group, read from the broker, and the pacing built on it: how the
producers that pace themselves (the rollout service on the reward service and the learner, the prompt
source on the rollout service) see what is still waiting downstream, the same for every replica."""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import KafkaError

from m1flow.security.config import kafka_python as kafka_security

log = logging.getLogger(__name__)


class GroupLag:
    """One admin client and one offsets consumer, kept open: lags are read about once a second."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        self.admin = KafkaAdminClient(**kafka_security(), bootstrap_servers=bootstrap, client_id=client_id, request_timeout_ms=10_000)
        self.consumer = KafkaConsumer(**kafka_security(), bootstrap_servers=bootstrap, client_id=client_id)

    def positions(self, group: str, topic: str) -> dict[str, tuple[int, int]] | None:
        """Per partition of `topic` the group has committed on, "topic/partition" -> (committed offset, end
        offset); None for a group that never committed there, or whose coordinator does not answer.
        KafkaError when the end offsets cannot be read."""
        try:
            offsets = self.admin.list_group_offsets({group: None}).get(group, {})
        except KafkaError as exc:
            log.debug("no committed offsets for %s: %s", group, exc)
            return None
        committed = {tp: meta.offset for tp, meta in offsets.items() if tp.topic == topic and meta.offset >= 0}
        if not committed:
            return None
        ends = self.consumer.end_offsets(list(committed))
        return {f"{tp.topic}/{tp.partition}": (off, ends.get(tp, off)) for tp, off in committed.items()}

    def lag(self, group: str, topic: str) -> int | None:
        """Records of `topic` the group has not committed; None as `positions`."""
        positions = self.positions(group, topic)
        return None if positions is None else sum(max(0, end - committed) for committed, end in positions.values())

    def close(self) -> None:
        self.admin.close()
        self.consumer.close()


Reading = tuple[float, bool]  # (what waits downstream, whether the downstream groups have committed)


class LagPacer:
    """What a producer counts as waiting downstream of it, and the room that leaves under a limit.

    `waiting` is the newest lag reading (`read`, at most every `refresh_s`), plus what this producer
    produced since (`produced`) and less what downstream said it consumed (`consumed`), so room opens
    and closes between readings. Until the downstream groups first commit (`read` says so), a
    reading never lowers the count: the producer counts what it produced itself, and one whose
    consumer is not running yet stops after a limit's worth. A read that fails (the broker away)
    keeps the count; nothing is consumed downstream either. Without `read`, there is no limit.
    """

    def __init__(self, read: Callable[[], Reading] | None, refresh_s: float, what: str) -> None:
        self.read, self.refresh_s, self.what = read, refresh_s, what
        self.waiting: float = 0
        self._read_at = -math.inf

    @property
    def paced(self) -> bool:
        return self.read is not None

    def produced(self, n: float = 1) -> None:
        """Counted downstream until the next reading includes them."""
        self.waiting += n

    def consumed(self, n: float) -> None:
        """Downstream said it took n (the learner's step): they leave the count now, not at the next reading."""
        self.waiting = max(0.0, self.waiting - n)

    def refresh(self) -> None:
        if self.read is None or time.monotonic() - self._read_at < self.refresh_s:
            return
        self._read_at = time.monotonic()
        try:
            waiting, committed = self.read()
        except KafkaError as exc:
            log.warning("reading %s failed: %s", self.what, exc)
            return
        self.waiting = waiting if committed else max(self.waiting, waiting)

    def room(self, limit: float, in_flight: float = 0) -> int | None:
        """How many more may be produced now under `limit` (None: not paced)."""
        if self.read is None:
            return None
        return max(0, math.ceil(limit - self.waiting - in_flight))
