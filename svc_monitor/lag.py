"""Committed offsets and lag of every consumer group, with clients kept open between samples."""
from __future__ import annotations

from kafka import KafkaAdminClient, KafkaConsumer

from m1flow.security.config import kafka_python as kafka_security


class LagReader:
    def __init__(self, bootstrap: str, client_id: str = "m1flow-monitor-lag") -> None:
        self.admin = KafkaAdminClient(**kafka_security(), bootstrap_servers=bootstrap, client_id=client_id, request_timeout_ms=10_000)
        self.consumer = KafkaConsumer(**kafka_security(), bootstrap_servers=bootstrap, client_id=client_id, group_id=None,
                                      enable_auto_commit=False)

    def sample(self) -> dict[str, tuple[int, int]]:
        """group -> (sum of committed offsets, sum of lag) over the partitions it has committed."""
        out: dict[str, tuple[int, int]] = {}
        for group in sorted(g["group_id"] for g in self.admin.list_groups()):
            committed = self.admin.list_group_offsets({group: None}).get(group, {})
            committed = {tp: meta.offset for tp, meta in committed.items() if meta.offset >= 0}
            for topic in {tp.topic for tp in committed}:  # end_offsets needs the topic's metadata loaded
                self.consumer.partitions_for_topic(topic)
            ends = self.consumer.end_offsets(list(committed)) if committed else {}
            out[group] = (sum(committed.values()),
                          sum(max(0, ends.get(tp, off) - off) for tp, off in committed.items()))
        return out

    def close(self) -> None:
        self.admin.close()
        self.consumer.close()
