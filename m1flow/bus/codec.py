"""Wire format of every record value: a frame, then the protobuf message.

Frame: b"MF" magic, the schema version (big-endian uint16), the payload's length (uint32) and its
CRC-32C (uint32). A protobuf message cut anywhere still parses (a ScoredGroup cut in half decodes
as a group of half its samples, same id), so the frame, not protobuf, must say whether the bytes are
whole: a truncated, padded or corrupted payload fails the length or checksum test and goes to the
dead-letter topic with the reason, as do garbage and messages from a newer producer.
Frames written before the length and checksum existed (magic b"M1", version only) still decode, so
older topics replay; they get no integrity check.
"""
from __future__ import annotations

import struct
import time
import uuid

import crc32c
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from m1flow.contracts import events

MAGIC = b"MF"
LEGACY_MAGIC = b"M1"
SCHEMA_VERSION = 2
_FRAME = struct.Struct(">2sHII")
_LEGACY_FRAME = struct.Struct(">2sH")


class CodecError(ValueError):
    """A record value that this service cannot turn into the expected message."""


def new_id() -> str:
    return uuid.uuid4().hex


def header(producer: str, *, run_id: str = "", group_id: str = "", rollout_id: str = "",
           policy_version: int = 0, message_id: str | None = None) -> events.Header:
    """A fresh header with a unique message id and the given trace."""
    return events.Header(
        schema_version=SCHEMA_VERSION,
        message_id=message_id or new_id(),
        trace=events.Trace(run_id=run_id, group_id=group_id, rollout_id=rollout_id,
                           policy_version=policy_version),
        created_unix_ms=int(time.time() * 1000),
        producer=producer,
    )


def encode(message: Message, schema_version: int = SCHEMA_VERSION) -> bytes:
    return frame(message.SerializeToString(), schema_version)


def frame(payload: bytes, schema_version: int = SCHEMA_VERSION) -> bytes:
    """A serialized message framed (what `encode` does after serializing)."""
    return _FRAME.pack(MAGIC, schema_version, len(payload), crc32c.crc32c(payload)) + payload


def decode(data: bytes | None, message_type: type[Message]) -> Message:
    """Parse a framed value, raising CodecError with the reason when it cannot be trusted."""
    version, payload = _unframe(data)
    if version > SCHEMA_VERSION:
        raise CodecError(f"schema version {version} is newer than supported {SCHEMA_VERSION}")
    if version < 1:
        raise CodecError(f"invalid schema version {version}")
    message = message_type()
    try:
        message.ParseFromString(payload)
    except DecodeError as exc:
        raise CodecError(f"protobuf decode of {message_type.__name__} failed: {exc}") from exc
    head = getattr(message, "header", None)
    if head is not None and head.schema_version > SCHEMA_VERSION:
        raise CodecError(f"header schema version {head.schema_version} is newer than supported")
    return message


def _unframe(data: bytes | None) -> tuple[int, bytes]:
    """(schema version, payload) of a checked or legacy frame."""
    if data is None:
        raise CodecError("empty record value (tombstone)")
    magic = bytes(data[:2])
    if magic == LEGACY_MAGIC and len(data) >= _LEGACY_FRAME.size:
        return _LEGACY_FRAME.unpack_from(data)[1], data[_LEGACY_FRAME.size:]
    if magic not in (MAGIC, LEGACY_MAGIC):
        raise CodecError(f"bad magic {magic!r}: not an m1flow message")
    if len(data) < _FRAME.size:
        raise CodecError(f"value of {len(data)} bytes is shorter than the {_FRAME.size}-byte frame")
    _, version, length, checksum = _FRAME.unpack_from(data)
    payload = data[_FRAME.size:]
    if len(payload) != length:
        raise CodecError(f"truncated or padded: frame says {length} payload bytes, record has {len(payload)}")
    if crc32c.crc32c(payload) != checksum:
        raise CodecError("payload checksum mismatch: corrupted in transit or at rest")
    return version, payload


def to_json(message: Message) -> dict:
    """A JSON-ready dict of a message, for dumps and logs (bytes fields become base64)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)
