"""Waiting on topics and comparing what services wrote, for the end-to-end tests."""
from __future__ import annotations

import time
from collections.abc import Callable

from ops.topics_io import read_range


def records(bootstrap: str, topic: str) -> list[dict]:
    return list(read_range(bootstrap, topic))


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 1.0,
             detail: Callable[[], object] | None = None) -> None:
    """`detail`, when given, says on a timeout what was seen instead."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    seen = f"; saw {detail()}" if detail is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{seen}")


def scored_by_group(bootstrap: str, topic: str = "scored") -> dict[str, list[dict]]:
    """group id -> every ScoredGroup written for it (more than one after a crash and replay)."""
    out: dict[str, list[dict]] = {}
    for rec in records(bootstrap, topic):
        value = rec["value"]
        out.setdefault(value["group_id"], []).append(value)
    return out


def content(scored: dict) -> dict:
    """What a ScoredGroup says about its samples, without when/where it was written."""
    return {k: v for k, v in scored.items() if k != "header"}


def policy_versions(bootstrap: str, topic: str = "policy") -> list[int]:
    return [int(r["value"].get("version", 0)) for r in records(bootstrap, topic)]


def commit_end(bootstrap: str, group: str, topic: str = "prompts") -> None:
    """`group` commits the end of `topic`: everything published so far counts as taken (how the
    tests stand in for a rollout group that consumed it all, for the source's lead)."""
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(parts)
        consumer.seek_to_end(*parts)
        for tp in parts:
            consumer.position(tp)
        consumer.commit()
    finally:
        consumer.close()
