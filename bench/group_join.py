"""How long two consumers of one group take to be assigned and drain a topic while busy processes
starve the CPU: kafka-python (the bus's client) against confluent-kafka (librdkafka), same broker,
same settings, trials alternating.

Why: CI once saw the reward service assigned nothing useful for 240 s with no error, and a bare
kafka-python consumer in bench/bus.py failed to join within 60 s while another stack ran. This
reproduces the starvation on purpose (stress-ng, or busy loops where it is missing) and counts the
trials where a member was still unassigned after `--wedge-after` seconds (a "wedge": the member
joined a generation but never processed its SyncGroup answer, heartbeats off, until the session
timed out). Prints per client: trials, wedges, median and worst time to drain.

Run: PYTHONPATH=. python bench/group_join.py [--trials 20] [--hogs 8] [--members 2]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from m1flow.bus.admin import ensure_topics
from m1flow.bus.topics import ROLLOUTS
from ops.kafka import Broker


@dataclass
class Trial:
    client: str
    seconds: float
    consumed: int
    first_assigned: list[float | None]


def kafka_python_member(boot: str, topic: str, group: str, k: int, counts: list[int],
                        assigned: list[float | None], stop: threading.Event) -> None:
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor

    consumer = KafkaConsumer(topic, bootstrap_servers=boot, group_id=group, client_id=f"m{k}",
                             group_instance_id=f"{group}-m{k}", enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=20000, heartbeat_interval_ms=1000,
                             max_poll_interval_ms=120_000, max_poll_records=16,
                             partition_assignment_strategy=(CooperativeStickyAssignor,))
    t0 = time.monotonic()
    while not stop.is_set():
        batches = consumer.poll(timeout_ms=200)
        if consumer.assignment() and assigned[k] is None:
            assigned[k] = time.monotonic() - t0
        n = sum(len(v) for v in batches.values())
        counts[k] += n
        if n:
            consumer.commit()
            time.sleep(0.01 * n)  # work per record
    consumer.close()


def confluent_member(boot: str, topic: str, group: str, k: int, counts: list[int],
                     assigned: list[float | None], stop: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer({"bootstrap.servers": boot, "group.id": group, "client.id": f"m{k}",
                         "group.instance.id": f"{group}-m{k}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 20000,
                         "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 120_000,
                         "partition.assignment.strategy": "cooperative-sticky"})
    t0 = time.monotonic()

    def on_assign(_consumer, partitions) -> None:  # noqa: ANN001
        if partitions and assigned[k] is None:
            assigned[k] = time.monotonic() - t0

    consumer.subscribe([topic], on_assign=on_assign)
    while not stop.is_set():
        n = sum(1 for m in consumer.consume(num_messages=16, timeout=0.2) if m.error() is None)
        counts[k] += n
        if n:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException:  # a rebalance is going on: the next commit carries it
                pass
            time.sleep(0.01 * n)
    consumer.close()


MEMBERS: dict[str, Callable] = {"kafka-python": kafka_python_member, "confluent-kafka": confluent_member}


def produce(boot: str, topic: str, n: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=boot)
    for i in range(n):
        producer.send(topic, key=str(i).encode(), value=b"x" * 2000)
    producer.flush()
    producer.close()


def trial(boot: str, client: str, index: int, records: int, members: int, limit_s: float) -> Trial:
    topic = ROLLOUTS.renamed(f"join-{client}-{index}")
    ensure_topics(boot, (topic,))
    produce(boot, topic.name, records)
    counts, assigned, stop = [0] * members, [None] * members, threading.Event()
    threads = [threading.Thread(target=MEMBERS[client], args=(boot, topic.name, f"g-{client}-{index}", k,
                                                             counts, assigned, stop)) for k in range(members)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    while sum(counts) < records and time.monotonic() - t0 < limit_s:
        time.sleep(0.2)
    took = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join(60)
    return Trial(client, took, sum(counts), assigned)


def hog(n: int) -> subprocess.Popen | None:
    if n <= 0:
        return None
    if shutil.which("stress-ng"):
        return subprocess.Popen(["stress-ng", "--cpu", str(n), "--quiet"], start_new_session=True)
    return subprocess.Popen([sys.executable, "-c", f"import multiprocessing as m\n"
                             f"def f():\n  while True: pass\n"
                             f"ps=[m.Process(target=f) for _ in range({n})]\n[p.start() for p in ps]\n[p.join() for p in ps]"],
                            start_new_session=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="per client")
    parser.add_argument("--hogs", type=int, default=8, help="busy processes starving the CPU")
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--records", type=int, default=400)
    parser.add_argument("--wedge-after", type=float, default=15.0)
    parser.add_argument("--limit", type=float, default=120.0, help="give a trial up after this long")
    args = parser.parse_args()
    results: list[Trial] = []
    with tempfile.TemporaryDirectory(prefix="m1flow-bench-join-") as run_dir:
        broker = Broker(run_dir)
        busy = None
        try:
            boot = broker.start()
            busy = hog(args.hogs)
            for i in range(args.trials):
                for client in (MEMBERS if i % 2 == 0 else reversed(list(MEMBERS))):
                    results.append(trial(boot, client, i, args.records, args.members, args.limit))
        finally:
            if busy is not None:
                os.killpg(busy.pid, 15)
                busy.wait()
            broker.stop()
    print(f"{args.trials} trials per client, {args.members} members, {args.records} records, "
          f"{args.hogs} busy processes on {os.cpu_count()} cores, wedge = a member unassigned after {args.wedge_after:.0f}s")
    print(f"{'client':<17}{'trials':>7}{'wedged':>8}{'drained':>9}{'median s':>10}{'worst s':>9}")
    for client in MEMBERS:
        rows = [r for r in results if r.client == client]
        wedged = sum(r.seconds > args.wedge_after and any(a is None or a > args.wedge_after for a in r.first_assigned)
                     for r in rows)
        drained = sum(r.consumed >= args.records for r in rows)
        times = [r.seconds for r in rows]
        print(f"{client:<17}{len(rows):>7}{wedged:>8}{drained:>9}{statistics.median(times):>10.1f}{max(times):>9.1f}")


if __name__ == "__main__":
    main()
