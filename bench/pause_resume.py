"""How long a paused and resumed partition takes to hand over records already on the broker: librdkafka's
own pause/resume, m1flow's confluent consumer (which pauses in librdkafka only a pause that lasts,
m1flow.bus.clients.PAUSE_AFTER_S) and kafka-python's, against no pause at all; same broker, rounds
alternating.

Why: the stream worker pauses a partition whenever its queue is busy and every partition while its
service is throttled (backpressure), often for a fraction of a second. bench/learning.py's services
showed the rollout polling empty for 0.4-0.6 s after each such pause while prompts sat on the broker.

Each round: pause the topic's partitions, poll once, wait `--pause-s` (shorter than PAUSE_AFTER_S: the
worker's short pauses), produce one record per partition, resume, and time the polls until all have come.

Run: PYTHONPATH=. python bench/pause_resume.py [--rounds 8] [--partitions 4] [--pause-s 0.5]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable

from m1flow.bus import Producer, codec
from m1flow.bus.admin import ensure_topics
from m1flow.bus.clients import PAUSE_AFTER_S, ConfluentConsumer, Settings, consumer
from m1flow.bus.topics import TopicSpec
from m1flow.contracts import events
from ops.kafka import Broker


class RawLibrdkafka:
    """m1flow's confluent consumer with its pause and resume going straight to librdkafka (as before
    PAUSE_AFTER_S): the peer this bench measures against."""

    def __init__(self, inner: ConfluentConsumer) -> None:
        self.inner = inner

    def __getattr__(self, name: str):  # noqa: ANN204 - everything else as the wrapper does it
        return getattr(self.inner, name)

    def pause(self, partitions: set) -> None:
        from confluent_kafka import TopicPartition

        self.inner._c.pause([TopicPartition(*tp) for tp in partitions])

    def resume(self, partitions: set) -> None:
        from confluent_kafka import TopicPartition

        self.inner._c.resume([TopicPartition(*tp) for tp in partitions])


def settings(bootstrap: str, name: str) -> Settings:
    return Settings(bootstrap, f"bench-pause-{name}-{uuid.uuid4().hex[:6]}", f"bench-{name}", None, 10_000, 60_000, 100)


def joined(reader, topic: str, partitions: int) -> None:  # noqa: ANN001
    reader.subscribe([topic], on_assigned=lambda parts: None, on_revoked=lambda parts: None)
    deadline = time.monotonic() + 60
    while len(reader.assignment()) < partitions and time.monotonic() < deadline:
        reader.poll(200, 100)
    if len(reader.assignment()) < partitions:
        raise RuntimeError(f"{topic}: assigned {reader.assignment()} after 60 s")


def drain(reader, n: int, limit_s: float = 10.0) -> int:  # noqa: ANN001
    got, deadline = 0, time.monotonic() + limit_s
    while got < n and time.monotonic() < deadline:
        got += sum(len(r) for r in reader.poll(200, 100).values())
    return got


def round_trip(reader, send: Callable[[], None], n: int, pause_s: float | None) -> float:  # noqa: ANN001
    """Seconds from resume (or, with no pause, from the send) until the n records are handed over."""
    parts = reader.assignment()
    if pause_s is None:
        time.sleep(0.3)
        started = time.monotonic()
        send()
    else:
        reader.pause(parts)
        reader.poll(0, 100)
        time.sleep(pause_s)
        send()
        time.sleep(0.1)  # the records are on the broker before the resume
        started = time.monotonic()
        reader.resume(parts)
    if drain(reader, n) < n:
        raise RuntimeError("records missing after 10 s")
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--pause-s", type=float, default=0.5)
    args = ap.parse_args()
    if args.pause_s >= PAUSE_AFTER_S:
        raise SystemExit(f"--pause-s must be under PAUSE_AFTER_S ({PAUSE_AFTER_S} s): the short pauses this measures")
    broker = Broker(tempfile.mkdtemp(prefix="m1flow-bench-pause-"))
    bootstrap = broker.start()
    try:
        topic = TopicSpec(f"bench-pause-{uuid.uuid4().hex[:6]}", events.Control, "key", partitions=args.partitions)
        ensure_topics(bootstrap, (topic,))
        producer = Producer(bootstrap, "bench-pause")

        def send() -> None:
            for p in range(args.partitions):
                producer.send(topic, f"k{p}", events.Control(header=codec.header("bench"), reason="x"), partition=p)
            producer.flush()

        readers = {"no pause (confluent)": (consumer("confluent-kafka", settings(bootstrap, "none")), None),
                   "librdkafka pause/resume": (RawLibrdkafka(consumer("confluent-kafka", settings(bootstrap, "raw"))),
                                               args.pause_s),
                   "m1flow confluent consumer": (consumer("confluent-kafka", settings(bootstrap, "m1flow")), args.pause_s),
                   "m1flow kafka-python consumer": (consumer("kafka-python", settings(bootstrap, "kp")), args.pause_s)}
        for reader, _ in readers.values():
            joined(reader, topic.name, args.partitions)
        times: dict[str, list[float]] = {name: [] for name in readers}
        for _ in range(args.rounds):
            for name, (reader, pause_s) in readers.items():
                drain(reader, 10**9, 0.3)  # what earlier rounds of the others left
                times[name].append(round_trip(reader, send, args.partitions, pause_s))
        base = statistics.median(times["no pause (confluent)"])
        print(f"\n{args.partitions} partitions, paused {args.pause_s} s, {args.rounds} rounds; PAUSE_AFTER_S {PAUSE_AFTER_S}")
        print("| consumer | median s to all records | worst | vs no pause |\n|---|---|---|---|")
        for name, ts in times.items():
            print(f"| {name} | {statistics.median(ts):.3f} | {max(ts):.3f} | {statistics.median(ts) / base:.1f}x |")
        for reader, _ in readers.values():
            reader.close()
        producer.close()
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
