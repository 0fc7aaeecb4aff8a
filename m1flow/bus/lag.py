"""Committed-offset lag of a consumer group, read from the broker: how the producers that pace
themselves (the rollout service on the learner, the prompt source on the rollout service) see
what is still waiting downstream, the same for every replica."""
from __future__ import annotations

import logging

from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import KafkaError

from m1flow.security.config import kafka_python as kafka_security

log = logging.getLogger(__name__)


class GroupLag:
    """One admin client and one offsets consumer, kept open: lags are read about once a second."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        self.admin = KafkaAdminClient(**kafka_security(), bootstrap_servers=bootstrap, client_id=client_id, request_timeout_ms=10_000)
        self.consumer = KafkaConsumer(**kafka_security(), bootstrap_servers=bootstrap, client_id=client_id)

    def lag(self, group: str, topic: str) -> int | None:
        """Records of `topic` the group has not committed; None for a group that never committed
        there, or whose coordinator does not answer. KafkaError when the end offsets cannot be read."""
        try:
            offsets = self.admin.list_group_offsets({group: None}).get(group, {})
        except KafkaError as exc:
            log.debug("no committed offsets for %s: %s", group, exc)
            return None
        committed = {tp: meta.offset for tp, meta in offsets.items() if tp.topic == topic and meta.offset >= 0}
        if not committed:
            return None
        ends = self.consumer.end_offsets(list(committed))
        return sum(max(0, ends.get(tp, off) - off) for tp, off in committed.items())

    def close(self) -> None:
        self.admin.close()
        self.consumer.close()
