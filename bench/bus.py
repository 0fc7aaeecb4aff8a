"""Messages per second of ~64 KB Rollouts through the m1flow bus (its consumer on either Kafka
client, m1flow/bus/clients.py) against a bare kafka-python loop.

Why: every rollout crosses the bus twice (rollout -> reward -> learner), so the bus's own price per
message (protobuf encode/decode, framing, dedupe, offset tracking, flush-before-commit per cycle)
must stay small next to what Kafka itself costs. Both sides move the same bytes through the same
local KRaft broker, each measurement on a fresh `rollouts.<suffix>` topic, rounds alternating.

  bus:  Producer.send (encode) + flush | StreamWorker.step (decode, dedupe, count, flush, commit),
        once with the kafka-python consumer (bus-kp) and once with confluent-kafka's (bus-ck)
  bare: KafkaProducer acks=all idempotent + flush | KafkaConsumer.poll + commit per poll batch

The bare side keeps kafka-python's other defaults (16 KB producer batches, 1 MB per-partition
fetches, 500 records per poll); the bus uses its own settings (m1flow/bus/producer.py, worker.py).
Each side first joins its consumer group on the empty topic, then produces N messages (timed),
then consumes them all (timed). "e2e" is N over both phases.

Secure mode (`--modes plain secure`, the default runs both, one broker each, in the same run): the
broker of `m1flow up --secure` (TLS listeners with client certificates, m1flow/security/pki.py) and
every client of both sides over TLS as its super user `admin` (no ACL is consulted for a super user,
so this prices the encryption and the handshakes, not the authorizer). Issue 22's target: secure at
least 0.7x plaintext end to end.
Run: PYTHONPATH=. python bench/bus.py [--messages N] [--rounds 3] [--kb 64] [--max-records N] [--profile]
     [--modes plain secure]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from kafka import KafkaConsumer, KafkaProducer

from m1flow.bus import HandlerBase, Producer, Record, StreamWorker, codec
from m1flow.bus.admin import ensure_topics
from m1flow.bus.topics import ROLLOUTS, TopicSpec
from m1flow.bus.worker import Context
from m1flow.contracts import events
from ops.kafka import Broker
from m1flow.security import config as security

GROUPS = 64  # distinct keys, so every partition of the topic gets traffic
CLIENTS = {"bus-kp": "kafka-python", "bus-ck": "confluent-kafka"}
SIDES = ("bus-kp", "bus-ck", "bare")
JOIN_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 120.0


def rollout(target_bytes: int, seed: int = 0) -> events.Rollout:
    """A Rollout whose framed encoding is about `target_bytes`, filled like a real long completion."""
    rng = random.Random(seed)
    msg = events.Rollout(header=codec.header("bench", run_id="bench", group_id="g0"),
                         rollout_id=codec.new_id(), group_id="g0", prompt_id="p0", group_size=16,
                         task_type="math", prompt_text="Compute the sum of the first n odd numbers.",
                         finish_reason=events.FINISH_REASON_STOP,
                         policy_version=1, max_new_tokens=40_000, engine="bench")
    base = len(codec.encode(msg))
    probe = events.Rollout(token_ids=[rng.randrange(200_000) for _ in range(1000)],
                           logprobs=[-rng.random() * 3 for _ in range(1000)])
    per_token = probe.ByteSize() / 1000
    n = max(1, int((target_bytes - base) / per_token))
    msg.token_ids.extend(rng.randrange(200_000) for _ in range(n))
    msg.logprobs.extend(-rng.random() * 3 for _ in range(n))
    return msg


@dataclass
class Result:
    side: str
    phase: str
    messages: int
    seconds: float
    value_bytes: int

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.messages * self.value_bytes / self.seconds / 1e6


class Counter(HandlerBase):
    """The trivial handler: count decoded rollouts."""

    def __init__(self, topic: TopicSpec) -> None:
        self.topics = (topic,)
        self.count = 0

    def handle(self, message: events.Rollout, record: Record, ctx: Context) -> None:
        self.count += 1


def _until(done: Callable[[], bool], step: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not done after {timeout:.0f}s")
        step()


def _timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_bus(bootstrap: str, topic: TopicSpec, template: events.Rollout, n: int,
            worker_options: dict[str, int], client: str) -> tuple[float, float]:
    """(produce seconds, consume seconds) through Producer and StreamWorker."""
    handler = Counter(topic)
    worker = StreamWorker(bootstrap, f"bench-{topic.name}", handler, "bench-consumer", client=client,
                          **worker_options)
    producer = Producer(bootstrap, "bench-producer")
    try:
        _until(lambda: bool(worker.consumer.assignment()), worker.step, JOIN_TIMEOUT_S, "group join")

        def produce() -> None:
            for i in range(n):
                group = f"g{i % GROUPS}"
                template.header.message_id = codec.new_id()  # a real stream never repeats ids
                template.group_id = group
                producer.send(topic, group, template)
            producer.flush()

        produce_s = _timed(produce)
        consume_s = _timed(lambda: _until(lambda: handler.count >= n, worker.step, DRAIN_TIMEOUT_S,
                                          "bus drain"))
        stats = worker.stats
        assert handler.count == n and stats["duplicates"] == 0 == stats["dead_lettered"], stats
        return produce_s, consume_s
    finally:
        worker.close()
        producer.close()


def run_bare(bootstrap: str, topic: TopicSpec, value: bytes, n: int) -> tuple[float, float]:
    """(produce seconds, consume seconds) through kafka-python with the bus's delivery guarantees."""
    consumer = KafkaConsumer(topic.name, **security.kafka_python(), bootstrap_servers=bootstrap,
                             group_id=f"bench-{topic.name}", enable_auto_commit=False, auto_offset_reset="earliest")
    producer = KafkaProducer(**security.kafka_python(), bootstrap_servers=bootstrap, acks="all",
                             enable_idempotence=True, linger_ms=5)
    seen = 0
    try:
        _until(lambda: bool(consumer.assignment()), lambda: consumer.poll(timeout_ms=200), JOIN_TIMEOUT_S,
               "group join")

        def produce() -> None:
            for i in range(n):
                producer.send(topic.name, key=f"g{i % GROUPS}".encode(), value=value)
            producer.flush()

        def poll_and_commit() -> None:
            nonlocal seen
            batches = consumer.poll(timeout_ms=200)
            if batches:
                seen += sum(len(records) for records in batches.values())
                consumer.commit()

        produce_s = _timed(produce)
        consume_s = _timed(lambda: _until(lambda: seen >= n, poll_and_commit, DRAIN_TIMEOUT_S,
                                          "bare drain"))
        assert seen == n, seen
        return produce_s, consume_s
    finally:
        consumer.close(autocommit=False)
        producer.close()


def measure(messages: int, rounds: int, kb: int, profile: bool = False,
            worker_options: dict[str, int] | None = None, secure: bool = False) -> list[Result]:
    """Alternate bus and bare for `rounds` rounds on one fresh broker (TLS with client certificates
    when `secure`); one Result per side, phase, round."""
    template = rollout(kb * 1024)
    value = codec.encode(template)
    results: list[Result] = []
    profiler = cProfile.Profile() if profile else None
    with tempfile.TemporaryDirectory(prefix="m1flow-bench-bus-") as run_dir:
        broker = Broker(f"{run_dir}/kafka", secrets=f"{run_dir}/secrets" if secure else None)
        security.activate(broker.admin_security)  # every client of this run: plaintext, or TLS as admin
        try:
            bootstrap = broker.start()
            for r in range(rounds):
                sides = SIDES if r % 2 == 0 else tuple(reversed(SIDES))
                for side in sides:
                    topic = ROLLOUTS.renamed(f"{ROLLOUTS.name}.bench-{side}-{r}")
                    ensure_topics(bootstrap, (topic,))
                    if side in CLIENTS:
                        if profiler:
                            profiler.enable()
                        produce_s, consume_s = run_bus(bootstrap, topic, template, messages,
                                                       worker_options or {}, CLIENTS[side])
                        if profiler:
                            profiler.disable()
                    else:
                        produce_s, consume_s = run_bare(bootstrap, topic, value, messages)
                    for phase, seconds in (("produce", produce_s), ("consume", consume_s),
                                           ("e2e", produce_s + consume_s)):
                        results.append(Result(side, phase, messages, seconds, len(value)))
        finally:
            broker.stop()
            security.activate(security.SecurityConfig())
    if profiler:
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(25)
        stats.sort_stats("tottime").print_stats(15)
    return results


def _row(res: Result) -> str:
    return f"{res.side:<8}{res.phase:<9}{res.messages:>9}{res.seconds:>9.2f}{res.rate:>9.1f}{res.mb_per_s:>8.1f}"


def table(results: list[Result]) -> str:
    """Per-round rows, then totals per side and phase with the bus/bare ratio of msg/s."""
    lines = [f"{'side':<8}{'phase':<9}{'messages':>9}{'seconds':>9}{'msg/s':>9}{'MB/s':>8}"]
    lines += [_row(res) for res in results]
    lines.append("totals over all rounds")
    for phase in ("produce", "consume", "e2e"):
        totals = {}
        for side in SIDES:
            rows = [r for r in results if r.side == side and r.phase == phase]
            totals[side] = Result(side, phase, sum(r.messages for r in rows), sum(r.seconds for r in rows),
                                  rows[0].value_bytes)
            lines.append(_row(totals[side]))
        target = "  (target >= 0.80)" if phase == "e2e" else ""
        for side in CLIENTS:
            lines.append(f"ratio {side}/bare {phase:<8} {totals[side].rate / totals['bare'].rate:.2f}{target}")
    return "\n".join(lines)


def native_crc32c() -> bool:
    """kafka-python checks a CRC-32C over every batch; without the `crc32c` package it does so in
    pure Python, which caps both sides at a few MB/s and hides everything else."""
    from kafka.record import util

    return util.crc32c_c is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=0,
                        help="messages per side per round (default 2000 with native crc32c, else 300)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--kb", type=int, default=64, help="serialized Rollout size in KiB")
    parser.add_argument("--max-records", type=int, default=0, help="StreamWorker max_records (0: its default)")
    parser.add_argument("--profile", action="store_true", help="cProfile the bus side and print the top")
    parser.add_argument("--modes", nargs="+", choices=["plain", "secure"], default=["plain", "secure"],
                        help="plaintext and/or TLS with client certificates, each on its own broker")
    args = parser.parse_args()
    crc = native_crc32c()
    messages = args.messages or (2000 if crc else 300)
    options = {"max_records": args.max_records} if args.max_records else {}
    by_mode: dict[str, list[Result]] = {}
    for mode in args.modes:
        started = time.perf_counter()
        results = by_mode[mode] = measure(messages, args.rounds, args.kb, args.profile, options, mode == "secure")
        print(f"[{mode}] {messages} x {results[0].value_bytes} B Rollouts, {args.rounds} rounds, "
              f"crc32c {'native' if crc else 'pure Python'}, worker {options or 'defaults'}, "
              f"wall {time.perf_counter() - started:.0f}s")
        print(table(results))
    if len(by_mode) == 2:
        print(secure_table(by_mode["plain"], by_mode["secure"]))


def secure_table(plain: list[Result], secure: list[Result]) -> str:
    """msg/s over all rounds per side and phase, TLS against plaintext (issue 22: e2e >= 0.7)."""
    def rate(results: list[Result], side: str, phase: str) -> float:
        rows = [r for r in results if r.side == side and r.phase == phase]
        return sum(r.messages for r in rows) / sum(r.seconds for r in rows)

    lines = ["secure against plaintext (msg/s over all rounds)",
             f"{'side':<8}{'phase':<9}{'plain':>9}{'secure':>9}{'ratio':>7}"]
    for side in SIDES:
        for phase in ("produce", "consume", "e2e"):
            p, s = rate(plain, side, phase), rate(secure, side, phase)
            target = "  (target >= 0.70)" if phase == "e2e" else ""
            lines.append(f"{side:<8}{phase:<9}{p:>9.1f}{s:>9.1f}{s / p:>7.2f}{target}")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
