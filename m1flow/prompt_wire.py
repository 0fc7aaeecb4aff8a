"""A Prompt's framed bytes written from its parts, for the prompt source's per-row path.

Why by hand: building the nested protobuf objects of a Prompt costs ~4 us a row in Python (upb's
constructor with the verifier sub-message), more than reading the row. Protobuf's wire form is a
message's fields one after another, each a tag, a length and the bytes for the string and message
fields the source writes; written in field order with proto3's rule (an empty string or a zero is
left out), the bytes are exactly those `codec.encode` gives for the same Prompt, which
tests/source/test_prompt_wire.py checks against the protobuf library on odd values (empty, long,
non-ASCII strings, chat messages). Only the `Prompt` fields listed here are written; the schema
lives in proto/m1flow/v1/events.proto.
"""
from __future__ import annotations

from collections.abc import Sequence

from m1flow.bus import codec
from m1flow.contracts import events

_SHORT = [bytes((n,)) for n in range(128)]


def varint(n: int) -> bytes:
    """An unsigned varint (n >= 0); one bytes() call up to 2**21 (the positions and draws of most runs)."""
    if n < 128:
        return _SHORT[n]
    if n < 16_384:
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 2_097_152:
        return bytes((n & 0x7F | 0x80, (n >> 7) & 0x7F | 0x80, n >> 14))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field (string or message) with its one-byte tag; empty: left out."""
    return tag + varint(len(data)) + data if data else b""


def text(tag: bytes, value: str) -> bytes:
    return field(tag, value.encode()) if value else b""


# tags (field number << 3 | 2) of the Prompt's fields and its sub-messages' (events.proto)
PROMPT_ID, TASK_TYPE, TEXT, VERIFIER, SOURCE, DOMAIN, MESSAGES = b"\x12", b"\x1a", b"\x22", b"\x2a", b"\x42", b"\x4a", b"\x52"
HEADER, ORIGIN = b"\x0a", b"\x5a"
KIND, GOLD, SPEC_JSON, PAYLOAD_URI = b"\x0a", b"\x12", b"\x1a", b"\x22"  # VerifierSpec
ROLE, CONTENT = b"\x0a", b"\x12"  # ChatMessage
GROUP_SIZE = 0x30  # a varint field: Prompt.group_size (6)


class BodyWriter:
    """A Prompt's fields 2-10 (all but the header and the origin) for one group size; the
    strings that repeat from row to row (source, domain, kind) are encoded once."""

    def __init__(self, group_size: int) -> None:
        self.group = bytes((GROUP_SIZE,)) + varint(group_size) if group_size else b""
        self._same: dict[tuple[bytes, str], bytes] = {}

    def _cached(self, tag: bytes, value: str) -> bytes:
        key = (tag, value)
        out = self._same.get(key)
        if out is None:
            out = text(tag, value)
            if len(self._same) < 4096:
                self._same[key] = out
        return out

    def body(self, prompt_id: str, task_type: str, user_turn: str, kind: str, gold: str, spec_json: str,
             payload_uri: str, source: str, domain: str, messages: Sequence[tuple[str, str]] = ()) -> bytes:
        cached = self._cached
        verifier = b"".join((cached(KIND, kind), text(GOLD, gold), text(SPEC_JSON, spec_json),
                             text(PAYLOAD_URI, payload_uri)))
        parts = [text(PROMPT_ID, prompt_id), cached(TASK_TYPE, task_type), text(TEXT, user_turn),
                 VERIFIER, varint(len(verifier)), verifier, self.group, cached(SOURCE, source), cached(DOMAIN, domain)]
        for role, content in messages:
            message = cached(ROLE, role) + text(CONTENT, content)
            parts += (MESSAGES, varint(len(message)), message)
        return b"".join(parts)


class Envelope:
    """A batch's Prompts as framed bytes: the batch's header with each prompt's message id in it,
    a row's body, and the draw's origin (a serialized SourceCursor).

    Per draw only the message id, the body and the origin's numbers change, so the header's bytes
    around the id (its length included: an id is always 32 characters) are joined once a batch, and
    `draw` makes a record's value in one join and one CRC."""

    ID_LENGTH = 32

    def __init__(self, header: events.Header, rest: bytes = b"") -> None:
        self.head = events.Header(schema_version=header.schema_version).SerializeToString()
        tail = events.Header()
        tail.CopyFrom(header)
        tail.ClearField("schema_version")
        tail.ClearField("message_id")
        self.tail = tail.SerializeToString()
        size = len(self.head) + 2 + self.ID_LENGTH + len(self.tail)
        self._before_id = HEADER + varint(size) + self.head + b"\x12" + varint(self.ID_LENGTH)
        self.rest = rest  # the origin's mixture version and stream, serialized once a batch
        self._sources: dict[str, bytes] = {}

    def origin(self, source: str, epoch: int, position: int, draw: int) -> bytes:
        """A SourceCursor's bytes: source (encoded once per name), epoch, position, draw, then the
        batch's mixture version and stream."""
        head = self._sources.get(source)
        if head is None:
            head = self._sources[source] = text(b"\x0a", source)
        return b"".join((head, b"\x10" + varint(epoch) if epoch else b"", b"\x18" + varint(position) if position else b"",
                         b"\x20" + varint(draw) if draw else b"", self.rest))

    def encode(self, message_id: str, body: bytes, origin: bytes) -> bytes:
        header = b"".join((self.head, text(b"\x12", message_id), self.tail))
        return codec.frame(b"".join((HEADER, varint(len(header)), header, body, ORIGIN, varint(len(origin)), origin)))

    def draw(self, message_id: str, body: bytes, source: str, epoch: int, position: int, draw: int) -> bytes:
        """The framed Prompt of one draw: what encode(message_id, body, origin(...)) gives, with the
        fewest calls (the source's per-row path; tests/source/test_prompt_wire.py checks both)."""
        origin = self.origin(source, epoch, position, draw)
        mid = message_id.encode()
        if len(mid) != self.ID_LENGTH:
            return self.encode(message_id, body, origin)
        return codec.frame(b"".join((self._before_id, mid, self.tail, body, ORIGIN, varint(len(origin)), origin)))
