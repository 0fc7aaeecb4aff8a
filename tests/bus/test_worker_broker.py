"""StreamWorker over the session's real broker: held records stay uncommitted until released."""
from __future__ import annotations

import time

from m1flow.bus import HandlerBase, Producer, StreamWorker, codec
from m1flow.bus.admin import group_lag
from m1flow.bus.topics import CONTROL
from m1flow.contracts import events


class Holder(HandlerBase):
    topics = (CONTROL,)

    def __init__(self) -> None:
        self.held = []
        self.seen = []

    def handle(self, message, record, ctx):  # noqa: ANN001
        self.seen.append(message.reason)
        if message.reason.startswith("hold"):
            ctx.hold(record)
            self.held.append(record)



def committed(bootstrap: str, group: str) -> int:
    return sum(c for (_, _), (c, _) in group_lag(bootstrap, group).items())


def test_commit_waits_for_held_records_and_dedupes(bootstrap):
    producer = Producer(bootstrap, "t")
    base = 0  # the session broker's `control` topic is this test's alone
    msgs = [events.Control(header=codec.header("t", message_id=f"m{i}"), reason=r)
            for i, r in enumerate(["a", "hold-b", "c"])]
    for m in msgs + [msgs[0]]:  # the last one is a redelivery of the first
        producer.send(CONTROL, "k", m)
    producer.flush()
    handler = Holder()
    worker = StreamWorker(bootstrap, "test-holder", handler, "test")
    try:
        deadline = time.monotonic() + 30
        while len(handler.seen) < 3 and time.monotonic() < deadline:
            worker.step()
        assert handler.seen == ["a", "hold-b", "c"]  # the duplicate was dropped
        worker.step()
        start = committed(bootstrap, "test-holder")
        assert start == base + 1  # stuck below the held record at offset 1
        worker.ctx.release(handler.held)
        worker.step()
        assert committed(bootstrap, "test-holder") == base + 4
    finally:
        worker.close()
