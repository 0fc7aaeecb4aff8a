"""Topic creation and inspection over the Kafka admin API."""
from __future__ import annotations

import logging

from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError
from kafka.structs import TopicPartition

from m1flow.bus.topics import ALL_TOPICS, TopicLayout, TopicSpec, suffixed
from m1flow.security.config import SecurityConfig, kafka_python as kafka_security

log = logging.getLogger(__name__)


def admin_client(bootstrap: str, client_id: str = "m1flow-admin",
                 security: SecurityConfig | None = None) -> KafkaAdminClient:
    return KafkaAdminClient(**kafka_security(security), bootstrap_servers=bootstrap, client_id=client_id, request_timeout_ms=20000)


def ensure_topics(bootstrap: str, specs: tuple[TopicSpec, ...] = ALL_TOPICS, suffix: str = "",
                  layout: TopicLayout | None = None, security: SecurityConfig | None = None) -> list[str]:
    """Create missing topics with the layout's partitions (the table's by default) and config (and
    their `.suffix` copies when given); return the names created. Existing topics are left as they
    are: adding partitions to a keyed topic would move keys, so a mismatch is only logged."""
    layout = layout or TopicLayout()
    specs = tuple(layout.apply(s) for s in specs)
    if suffix:
        specs = specs + tuple(s.renamed(suffixed(s.name, suffix)) for s in specs)
    admin = admin_client(bootstrap, security=security)
    try:
        existing = set(admin.list_topics())
        _warn_mismatch(admin, [s for s in specs if s.name in existing])
        new = []
        for spec in specs:
            if spec.name in existing:
                continue
            config = dict(spec.config)
            if spec.compacted:
                config.setdefault("cleanup.policy", "compact")
            new.append(NewTopic(spec.name, num_partitions=spec.partitions,
                                replication_factor=layout.replication_factor, topic_configs=config))
        for topic in new:  # one by one: a concurrent creator must not fail the others
            try:
                admin.create_topics([topic], timeout_ms=20000)
            except TopicAlreadyExistsError:
                pass
        return [t.name for t in new]
    finally:
        admin.close()


def _warn_mismatch(admin: KafkaAdminClient, specs: list[TopicSpec]) -> None:
    if not specs:
        return
    wanted = {s.name: s.partitions for s in specs}
    for topic in admin.describe_topics(list(wanted)):
        name = topic.get("name", topic.get("topic"))  # the metadata key differs across kafka-python versions
        have = len(topic.get("partitions") or ())
        if name in wanted and have and have != wanted[name]:
            log.warning("topic %s has %d partitions, the layout asks for %d: left as it is (recreate it "
                        "to change: new partitions would move keys)", name, have, wanted[name])


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """The next offset to be written, per partition."""
    consumer = KafkaConsumer(**kafka_security(), bootstrap_servers=bootstrap, client_id="m1flow-offsets")
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        return {tp.partition: off for tp, off in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()


def group_lag(bootstrap: str, group_id: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (committed offset, end offset) for one consumer group."""
    admin = admin_client(bootstrap)
    try:
        committed = admin.list_group_offsets({group_id: None}).get(group_id, {})
    finally:
        admin.close()
    result: dict[tuple[str, int], tuple[int, int]] = {}
    consumer = KafkaConsumer(**kafka_security(), bootstrap_servers=bootstrap, client_id="m1flow-lag")
    try:
        ends = consumer.end_offsets(list(committed)) if committed else {}
        for tp, meta in committed.items():
            result[(tp.topic, tp.partition)] = (meta.offset, ends.get(tp, meta.offset))
    finally:
        consumer.close()
    return result


def list_groups(bootstrap: str) -> list[str]:
    admin = admin_client(bootstrap)
    try:
        return sorted(group["group_id"] for group in admin.list_groups())
    finally:
        admin.close()
