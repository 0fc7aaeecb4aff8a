"""Reading a range of a topic (by offset or time) and turning it into JSONL: `dump` and `replay`."""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime

from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata, TopicPartition

from m1flow.bus import codec
from m1flow.bus.topics import spec
from m1flow.security.config import kafka_python as kafka_security


def parse_position(text: str | None) -> tuple[str, int] | None:
    """'123' is an offset; an ISO time ('2026-11-30T12:00:00') or 'ms:<epoch ms>' is a timestamp."""
    if text is None:
        return None
    if text.isdigit():
        return "offset", int(text)
    if text.startswith("ms:"):
        return "time", int(text[3:])
    return "time", int(datetime.fromisoformat(text).timestamp() * 1000)


def resolve(consumer: KafkaConsumer, topic: str, position: tuple[str, int] | None,
            default: str) -> dict[TopicPartition, int]:
    """Per partition, the offset that `position` names (offsets apply to every partition)."""
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    if not parts:
        raise ValueError(f"topic {topic!r} does not exist")
    ends = consumer.end_offsets(parts)
    if position is None:
        return consumer.beginning_offsets(parts) if default == "beginning" else ends
    kind, value = position
    if kind == "offset":
        return {tp: min(value, ends[tp]) for tp in parts}
    found = consumer.offsets_for_times({tp: value for tp in parts})
    return {tp: (found[tp].offset if found.get(tp) else ends[tp]) for tp in parts}


def bounds(consumer: KafkaConsumer, topic: str, start: str | None, end: str | None
           ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """[begin, stop) offsets per partition of the range named by `start` and `end`."""
    return (resolve(consumer, topic, parse_position(start), "beginning"),
            resolve(consumer, topic, parse_position(end), "end"))


def read_range(bootstrap: str, topic: str, start: str | None = None, end: str | None = None,
               limit: int | None = None) -> Iterator[dict]:
    """Decoded records of [start, end) as dicts (undecodable ones carry their error)."""
    consumer = KafkaConsumer(**kafka_security(), bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             client_id="m1flow-dump")
    try:
        begin, stop = bounds(consumer, topic, start, end)
        consumer.assign(list(begin))
        for tp, off in begin.items():
            consumer.seek(tp, off)
        value_type = spec(topic).value_type
        remaining = {tp for tp in begin if begin[tp] < stop[tp]}
        count = 0
        while remaining:
            for tp, records in consumer.poll(timeout_ms=1000).items():
                for rec in records:
                    if tp not in remaining or rec.offset >= stop[tp]:
                        remaining.discard(tp)
                        break
                    entry = {"topic": topic, "partition": tp.partition, "offset": rec.offset,
                             "timestamp_ms": rec.timestamp,
                             "key": rec.key.decode(errors="replace") if rec.key else None}
                    try:
                        entry["value"] = codec.to_json(codec.decode(rec.value, value_type))
                    except codec.CodecError as exc:
                        entry["error"] = str(exc)
                    yield entry
                    count += 1
                    if limit and count >= limit:
                        return
                    if rec.offset + 1 >= stop[tp]:
                        remaining.discard(tp)
    finally:
        consumer.close()


def dump_jsonl(bootstrap: str, topic: str, start: str | None = None, end: str | None = None,
               limit: int | None = None) -> Iterator[str]:
    for entry in read_range(bootstrap, topic, start, end, limit):
        yield json.dumps(entry, sort_keys=True)


def prepare_replay(bootstrap: str, topic: str, group: str, start: str, end: str | None = None
                   ) -> dict[str, int]:
    """Point a fresh consumer group at `start` and return the stop offsets of the range."""
    consumer = KafkaConsumer(**kafka_security(), bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             client_id="m1flow-replay")
    try:
        begin, stop = bounds(consumer, topic, start, end)
        consumer.assign(list(begin))
        consumer.commit({tp: OffsetAndMetadata(off, "replay start", -1) for tp, off in begin.items()})
        return {f"{tp.topic}/{tp.partition}": stop[tp] for tp in begin}
    finally:
        consumer.close()
