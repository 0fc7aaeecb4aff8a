"""The scored groups the online filter judges: `scored` followed from its end, without a group
(every source replica sees every group; what came before the source started is not its business)."""
from __future__ import annotations

import logging

from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.security.config import kafka_python as kafka_security

log = logging.getLogger(__name__)


class ScoredFollower:
    def __init__(self, bootstrap: str, topic: str, client_id: str, run_id: str) -> None:
        self.run_id = run_id
        self.consumer = KafkaConsumer(**kafka_security(), bootstrap_servers=bootstrap, group_id=None,
                                      enable_auto_commit=False, client_id=client_id, fetch_max_wait_ms=50)
        parts = [TopicPartition(topic, p) for p in sorted(self.consumer.partitions_for_topic(topic) or {0})]
        self.consumer.assign(parts)
        self.consumer.seek_to_end(*parts)
        for tp in parts:
            self.consumer.position(tp)  # resolve the end now, not at the first poll

    def poll(self) -> list[events.ScoredGroup]:
        """Groups of this run scored since the last poll; undecodable ones are the reward service's to report."""
        out = []
        for records in self.consumer.poll(timeout_ms=0, max_records=1000).values():
            for rec in records:
                try:
                    group = codec.decode(rec.value, events.ScoredGroup)
                except codec.CodecError:
                    continue
                if group.header.trace.run_id in ("", self.run_id):
                    out.append(group)
        return out

    def close(self) -> None:
        self.consumer.close()
