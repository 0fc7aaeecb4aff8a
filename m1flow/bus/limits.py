"""The bus's record size limit, in one place: the broker's `message.max.bytes` (ops/kafka, the compose
file and the Helm chart set the same number; tests/bus/test_limits.py holds them to it), what the
producers allow, and what `data validate` refuses.

Why a size of our own: the broker refuses a record batch over `message.max.bytes`; librdkafka's own
check before sending allows some records the broker then refuses and kafka-python's refuses some the
broker takes. `record_size` is the exact size of the uncompressed v2 batch a record makes alone (as a
record over batch.size is sent), so the producer refuses, before sending, exactly what the broker
would, whichever client writes.
"""
from __future__ import annotations

MESSAGE_MAX_BYTES = 16 * 1024 * 1024  # the broker's message.max.bytes: the largest record batch it takes
CLIENT_SLACK = 1024  # the clients' own limits sit this far above, so that `oversize` decides, not they

_BATCH_HEADER = 61  # v2 record batch: offset, length, epoch, magic, crc, attributes, ... count
_MAX_RECORD_OVERHEAD = 5 + 1 + 10 + 5 + 5 + 5 + 5  # varints at their widest: length .. headers count


def _varint_size(value: int) -> int:
    """Bytes of Kafka's zig-zag varint of `value`."""
    zigzag = (value << 1) ^ (value >> 63)
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def _key_bytes(key: str | bytes | None) -> int:
    if key is None:
        return -1
    return len(key.encode() if isinstance(key, str) else key)


def record_size(key: str | bytes | None, value_bytes: int) -> int:
    """The bytes of the record batch holding this record alone (no headers, no compression): what
    the broker holds against `message.max.bytes`."""
    key_len = _key_bytes(key)
    body = 1 + 1 + 1 + _varint_size(key_len) + max(key_len, 0) + _varint_size(value_bytes) + value_bytes + 1
    return _BATCH_HEADER + _varint_size(body) + body


# Below both, a record fits whatever its varints: a sender checks these two lengths and calls `oversize`
# only past them (a comparison a record, not a call: the source sends a few hundred thousand a second).
KEY_BOUND = 1024  # characters (a str) or bytes
VALUE_BOUND = MESSAGE_MAX_BYTES - _BATCH_HEADER - _MAX_RECORD_OVERHEAD - 4 * KEY_BOUND


def oversize(key: str | bytes | None, value: bytes, limit: int = MESSAGE_MAX_BYTES) -> str | None:
    """Why the broker would refuse this record for its size (None: it fits). A cheap bound first:
    the exact size is computed only near the limit."""
    key_bound = 0 if key is None else 4 * len(key)  # a str's UTF-8 is at most 4 bytes a character
    if len(value) + key_bound + _BATCH_HEADER + _MAX_RECORD_OVERHEAD <= limit:
        return None
    size = record_size(key, len(value))
    if size <= limit:
        return None
    return f"record too large: {size:,} bytes, over the bus's limit of {limit:,} (message.max.bytes)"
