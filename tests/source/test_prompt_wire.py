"""The prompt source's hand-written Prompt bytes (m1flow.prompt_wire) are byte for byte what the
protobuf library writes for the same Prompt, on odd values: empty, long (multi-byte lengths),
non-ASCII strings, chat messages, large draw numbers."""
from __future__ import annotations

import itertools

import pytest

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.prompt_wire import BodyWriter, Envelope, varint

STRINGS = ["", "a", "caf\u00e9 \u4e2d\u6587", "x" * 127, "y" * 128, "z" * 20_000]


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16_383, 16_384, 2**35, 2**63 - 1])
def test_varint_is_protobufs(n):
    assert (b"\x10" + varint(n) if n else b"") == events.SourceCursor(epoch=n).SerializeToString()  # epoch: field 2


def test_bodies_envelopes_and_origins_are_the_protobuf_librarys_bytes():
    header = codec.header("source", run_id="run-1")
    writer = BodyWriter(8)
    cases = itertools.product(STRINGS, STRINGS[:4], [(), (("system", "be brief"), ("user", "hi \u00e9"))],
                              [(0, 0, 0, 0), (1, 300, 70_000, 2), (0, 5, 2**40, 0)])
    for value, small, messages, (epoch, position, draw, mixture) in cases:
        body = writer.body(f"src/{small}", "math", value, "math", small, "{}" if not small else value, small,
                           "src", "reasoning", messages)
        rest = events.SourceCursor(mixture_version=mixture, stream="run-1/g").SerializeToString()
        envelope = Envelope(header, rest)
        origin = envelope.origin("src", epoch, position, draw)
        got = envelope.encode("m" * 32, body, origin)
        want = events.Prompt(
            prompt_id=f"src/{small}", task_type="math", text=value, group_size=8, source="src", domain="reasoning",
            verifier=events.VerifierSpec(kind="math", gold=small, spec_json="{}" if not small else value,
                                         payload_uri=small),
            messages=[events.ChatMessage(role=r, content=c) for r, c in messages],
            origin=events.SourceCursor(source="src", epoch=epoch, position=position, draw=draw,
                                       mixture_version=mixture, stream="run-1/g"))
        want.header.CopyFrom(header)
        want.header.message_id = "m" * 32
        assert got == codec.encode(want)
        assert codec.decode(got, events.Prompt) == want
        one_call = Envelope(header, rest).draw("m" * 32, body, "src", epoch, position, draw)
        assert one_call == got
        assert Envelope(header, rest).draw("short-id", body, "src", epoch, position, draw) == \
            envelope.encode("short-id", body, origin)
