"""The source's durable position: the newest SourceState per key on the compacted `source_state`
topic, and the prompts it published after that state (read back from the tail of `prompts`).

Publishing is at-least-once: a batch of prompts is acknowledged, then its state record. A kill -9
between the two leaves prompts the state does not count; on start the service reads the last
`scan_back` records of each `prompts` partition and skips every draw of its own stream found there,
so in the common case nothing repeats (a set of draws, not a maximum: a batch cut
by the kill may have reached some partitions and not others). Should the scan miss one (more than `scan_back` records from
other producers written since), the repeat is one batch at most, carries the same message id
(m1flow.source.message_id_for) and is deduped by the rollout service.
"""
from __future__ import annotations

import logging
import time

from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.security.config import kafka_python as kafka_security

log = logging.getLogger(__name__)


def _read(consumer: KafkaConsumer, begin: dict[TopicPartition, int], end: dict[TopicPartition, int],
          timeout_s: float):
    """Raw records of [begin, end) per partition; TimeoutError when the end is not reached in time."""
    live = {tp for tp in begin if begin[tp] < end[tp]}
    if not live:
        return
    consumer.assign(list(live))
    for tp in live:
        consumer.seek(tp, begin[tp])
    deadline = time.monotonic() + timeout_s
    while live:
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {sorted(f'{t.topic}/{t.partition}' for t in live)} to their end timed out")
        for tp, records in consumer.poll(timeout_ms=500, max_records=2000).items():
            for rec in records:
                if rec.offset < end[tp]:
                    yield rec
            if tp in live and consumer.position(tp) >= end[tp]:
                live.discard(tp)


def load_states(bootstrap: str, topic: str, key: str, timeout_s: float = 60.0) -> dict[str, events.SourceState]:
    """The newest record of `key` and of every key under it ('<key>/mixture/..', '<key>/retired/..'),
    by key; empty: a fresh start."""
    consumer = KafkaConsumer(**kafka_security(), bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             client_id="m1flow-source-state")
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or {0})]
        begin, end = consumer.beginning_offsets(parts), consumer.end_offsets(parts)
        newest: dict[str, events.SourceState] = {}
        for rec in _read(consumer, begin, end, timeout_s):
            name = (rec.key or b"").decode(errors="replace")
            if rec.value is None or not (name == key or name.startswith(key + "/")):
                continue
            try:
                newest[name] = codec.decode(rec.value, events.SourceState)
            except codec.CodecError as exc:
                log.warning("skipping undecodable state at %s@%s: %s", topic, rec.offset, exc)
        return newest
    finally:
        consumer.close()


def load_state(bootstrap: str, topic: str, key: str, timeout_s: float = 60.0) -> events.SourceState | None:
    """The newest state written under `key` (None: a fresh start)."""
    return load_states(bootstrap, topic, key, timeout_s).get(key)


def published_since(bootstrap: str, topic: str, stream: str, draws: int, scan_back: int,
                    timeout_s: float = 60.0) -> set[int]:
    """The draws from `draws` on whose prompts of `stream` are in the last `scan_back` records of
    each partition of `topic`. A set, not a maximum: a batch cut by a kill may have reached some
    partitions and not others, and the draws it did not write must still be published."""
    if scan_back <= 0:
        return set()
    consumer = KafkaConsumer(**kafka_security(), bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             client_id="m1flow-source-scan")
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not parts:
            return set()
        first, end = consumer.beginning_offsets(parts), consumer.end_offsets(parts)
        begin = {tp: max(first[tp], end[tp] - scan_back) for tp in parts}
        found: set[int] = set()
        for rec in _read(consumer, begin, end, timeout_s):
            try:
                prompt = codec.decode(rec.value, events.Prompt)
            except codec.CodecError:
                continue
            if prompt.origin.stream == stream and prompt.origin.draw >= draws:
                found.add(prompt.origin.draw)
        return found
    finally:
        consumer.close()
