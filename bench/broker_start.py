"""How long the local broker takes to start and what it costs, C1-only against the JVM's tiered default.

Why: every Kafka test, bench and demo starts its own broker (ops.kafka.Broker), and on 2 cores the C2
compiler's work on Kafka's hot paths was most of a young broker's CPU. Each round starts a fresh broker
of each kind in turn (a new run directory: format, start, until it answers), then reads its CPU to
ready and over `--idle-s` seconds of idling, and stops it.

Run: PYTHONPATH=. python bench/broker_start.py [--rounds 3] [--idle-s 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import psutil

from ops.kafka import Broker

KINDS = {"c1 (m1flow's)": "c1", "tiered (the JVM's default)": "tiered"}


def cpu_s(process: psutil.Process) -> float:
    t = process.cpu_times()
    return t.user + t.system


def one_start(jit: str, idle_s: float) -> tuple[float, float, float]:
    """Seconds to ready, CPU-seconds to ready, CPU-seconds per second idle."""
    broker = Broker(tempfile.mkdtemp(prefix=f"m1flow-bench-broker-{jit}-"), jit=jit)
    started = time.monotonic()
    try:
        broker.start()
        ready = time.monotonic() - started
        process = broker._process()
        at_ready = cpu_s(process)
        time.sleep(idle_s)
        return ready, at_ready, (cpu_s(process) - at_ready) / idle_s
    finally:
        broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle-s", type=float, default=5.0)
    args = ap.parse_args()
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in KINDS}
    for _ in range(args.rounds):
        for name, jit in KINDS.items():
            runs[name].append(one_start(jit, args.idle_s))
    base = statistics.median(r[0] for r in runs["tiered (the JVM's default)"])
    print(f"\n{args.rounds} rounds, {os.cpu_count()} cores, load average {psutil.getloadavg()[0]:.1f}")
    print("| broker JIT | s to ready (median) | range | CPU-s to ready | idle CPU-s per s | vs tiered (s to ready) |")
    print("|---|---|---|---|---|---|")
    for name, rs in runs.items():
        ready = [r[0] for r in rs]
        print(f"| {name} | {statistics.median(ready):.2f} | {min(ready):.2f}-{max(ready):.2f} | "
              f"{statistics.median(r[1] for r in rs):.2f} | {statistics.median(r[2] for r in rs):.3f} | "
              f"{statistics.median(ready) / base:.2f}x |")


if __name__ == "__main__":
    main()
