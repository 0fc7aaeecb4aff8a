"""Wire format of every record value: a 4-byte frame, then the protobuf message.

Frame: b"M1" magic, then the schema version as a big-endian uint16. The frame lets a consumer
reject garbage and messages from a newer producer before it parses anything, and send them to the
dead-letter topic with a precise reason instead of crashing or misreading them.
"""
from __future__ import annotations

import struct
import time
import uuid

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from m1flow.contracts import events

MAGIC = b"M1"
SCHEMA_VERSION = 2
_FRAME = struct.Struct(">2sH")


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
    return _FRAME.pack(MAGIC, schema_version) + message.SerializeToString()


def decode(data: bytes | None, message_type: type[Message]) -> Message:
    """Parse a framed value, raising CodecError with the reason when it cannot be trusted."""
    if data is None:
        raise CodecError("empty record value (tombstone)")
    if len(data) < _FRAME.size:
        raise CodecError(f"value of {len(data)} bytes is shorter than the {_FRAME.size}-byte frame")
    magic, version = _FRAME.unpack_from(data)
    if magic != MAGIC:
        raise CodecError(f"bad magic {magic!r}: not an m1flow message")
    if version > SCHEMA_VERSION:
        raise CodecError(f"schema version {version} is newer than supported {SCHEMA_VERSION}")
    if version < 1:
        raise CodecError(f"invalid schema version {version}")
    message = message_type()
    try:
        message.ParseFromString(data[_FRAME.size:])
    except DecodeError as exc:
        raise CodecError(f"protobuf decode of {message_type.__name__} failed: {exc}") from exc
    head = getattr(message, "header", None)
    if head is not None and head.schema_version > SCHEMA_VERSION:
        raise CodecError(f"header schema version {head.schema_version} is newer than supported")
    return message


def to_json(message: Message) -> dict:
    """A JSON-ready dict of a message, for dumps and logs (bytes fields become base64)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)
