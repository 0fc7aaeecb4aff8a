"""Prompts per second published by svc_source from a Parquet and a JSONL file, against reading the
same file bare with the reader alone and against the producer alone, and the peak memory and the
CPU per row of each.

Why: the source must keep a rollout fleet fed without being the bottleneck, and must not hold a
dataset in memory (10M-row files). Each side runs in its own subprocess, so its peak memory
(VmHWM) and its CPU time are its own:

  bare:     m1flow.data.readers.open_table(path).rows() in file order, every row touched (dicts)
  producer: the transport alone, what any source that publishes a record per prompt pays at least:
            the same number of records of the source's mean size, already framed, sent by
            m1flow's Producer (librdkafka's produce_batch, a delivery report per record) in
            batches of publish_batch with at most inflight_batches unacknowledged, to the same
            broker; nothing read, checked or encoded
  source:   svc_source's own publishing path on a real local broker: the seeded block shuffle
            (Cursor: a block at a time, read, checked and encoded ahead in the reader process: the
            one-pass check of m1flow-form rows or the importer and the schemas, the prompt's bytes),
            the confluent-kafka producer (`kafka_client`'s default), batches acknowledged by delivery
            reports while the next is drawn and a `source_state` record once a batch and all before
            it are acknowledged, exactly as the service loop does with no lead (lead_steps 0)

Both are measured at `--rows` and at a tenth of it: memory flat in the file's size means the two
peaks match. Files are generated into /tmp (m1flow record form: id, source, prompt, verifier).
Target: the source at least 0.5x the bare reader's rows per second.
Run: PYTHONPATH=. python bench/source.py [--rows 1000000] [--formats parquet jsonl] [--batch 1024]
     [--inflight 8] [--block 4096] [--no-read-ahead]
The regime: CPU us/row is user+system CPU per row of the side's own processes over its timed run
(the source's includes its reader process and the service's start), and broker us/row the broker's CPU over that side's run per record
(the bare reader's side sends none): on two cores the sides' CPU per row, not the wall clock alone,
says what a quieter or larger machine would give. states/s is the acknowledged batches per second
(one state record each, at most); start s is the service's start (state read back, `prompts` tail
scan, reader process, watcher).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def row(i: int) -> dict:
    a, b = i % 97, (i * 7) % 89
    return {"id": str(i), "source": "bench", "prompt": f"{a}+{b}=", "verifier": {"kind": "arith", "gold": str(a + b)}}


def write(fmt: str, rows: int, out: Path) -> Path:
    path = out / f"bench-{rows}.{fmt}"
    if path.exists():
        return path
    if fmt == "jsonl":
        with open(path, "w") as f:
            for i in range(rows):
                f.write(json.dumps(row(i)) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        with pq.ParquetWriter(path, pa.schema([("id", pa.string()), ("source", pa.string()), ("prompt", pa.string()),
                                                ("verifier", pa.struct([("kind", pa.string()), ("gold", pa.string())]))]),
                              ) as writer:
            for start in range(0, rows, 65_536):
                writer.write_table(pa.Table.from_pylist([row(i) for i in range(start, min(rows, start + 65_536))]),
                                   row_group_size=65_536)
    return path


def bare(path: str) -> dict:
    from m1flow.data.readers import open_table

    c0, t0 = cpu_s(), time.perf_counter()
    table = open_table(path)
    n = sum(1 for _, r in table.rows() if r)
    return {"rows": n, "s": time.perf_counter() - t0, "cpu_s": cpu_s() - c0}


def producer(rows: int, bootstrap: str, settings: dict, value_bytes: int) -> dict:
    """The transport alone: `rows` framed records of the source's mean size through m1flow's
    Producer, in the source's batches and window, each delivery report counted."""
    from m1flow.bus import Producer
    from m1flow.bus.codec import frame
    from m1flow.bus.topics import PROMPTS

    batch, inflight = settings["publish_batch"], settings["inflight_batches"]
    sender = Producer(bootstrap, "bench-producer", client="confluent-kafka")
    sender.flush()
    payload = b"p" * max(1, value_bytes - 12)  # the 12-byte frame adds the rest
    records = [(PROMPTS.name, f"bench/{i}", frame(payload)) for i in range(rows)]
    acked = [0]

    def delivered(error: Exception | None) -> None:
        if error is not None:
            raise RuntimeError(error)
        acked[0] += 1

    c0, t0 = cpu_s(), time.perf_counter()
    for start in range(0, rows, batch):
        while start - acked[0] >= inflight * batch:
            sender.poll(0.05)
        sender.send_many(records[start:start + batch], delivered)
        sender.poll(0)
    sender.flush()
    s = time.perf_counter() - t0
    assert acked[0] == rows, acked
    cpu = cpu_s() - c0
    sender.close()
    return {"rows": rows, "s": s, "cpu_s": cpu}


def source(path: str, bootstrap: str, settings: dict) -> dict:
    from svc_source.config import SourceConfig
    from svc_source.service import SourceService

    cfg = SourceConfig(bootstrap=bootstrap, run_id=f"bench-{time.time_ns()}", lead_steps=0, max_epochs=1,
                       metrics_port=-1, sources=[{"path": path, "name": "bench"}], **settings)
    service = SourceService(cfg)
    c0, t0 = cpu_s(), time.perf_counter()
    service.start()
    started = time.perf_counter() - t0
    n = 0
    while (done := service.publish(cfg.publish_batch)) or not all(c.exhausted for c in service.cursors):
        n += done
    service.shutdown()  # reaps the reader process: its CPU is in RUSAGE_CHILDREN from here on
    s = time.perf_counter() - t0
    return {"rows": n, "s": s, "cpu_s": cpu_s() - c0, "start_s": started, "states": service.window.states,
            "value_bytes": service.window.value_bytes / max(1, n)}


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM). Not ru_maxrss: Linux carries that across
    fork and exec, so a child would report its parent's peak (the earlier tables did)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    """User and system CPU of this process and its reaped children (the source's reader)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(side: str, path: Path | str, bootstrap: str, settings: dict, broker: Any) -> dict:
    """One side in a child process; its result with the broker's CPU seconds over the run."""
    before = broker.cpu_times()
    out = subprocess.run([sys.executable, __file__, "--child", side, str(path), bootstrap, json.dumps(settings)], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    after = broker.cpu_times()
    if out.returncode:
        raise RuntimeError(f"{side} on {path} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["broker_cpu_s"] = (after.user + after.system) - (before.user + before.system)
    return result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--formats", nargs="*", default=["parquet", "jsonl"])
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "m1flow-bench-source")
    p.add_argument("--batch", type=int, default=1024, help="publish_batch: prompts per batch and state record")
    p.add_argument("--inflight", type=int, default=8, help="inflight_batches: batches sent, not yet acknowledged")
    p.add_argument("--block", type=int, default=4096, help="block_rows: rows read at once per source")
    p.add_argument("--no-read-ahead", action="store_true", help="read and encode in the service's process")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        side, path, bootstrap, settings = args.child
        settings = json.loads(settings)
        if side == "bare":
            result = bare(path)
        elif side == "producer":
            result = producer(settings["rows"], bootstrap, settings, settings["value_bytes"])
        else:
            result = source(path, bootstrap, {k: v for k, v in settings.items() if k not in ("rows", "value_bytes")})
        result["peak_rss_mb"] = peak_rss_mb()
        print(json.dumps(result))
        return
    import psutil

    from m1flow.bus.admin import ensure_topics
    from ops.kafka import Broker

    args.out.mkdir(parents=True, exist_ok=True)
    broker = Broker(Path(tempfile.mkdtemp(prefix="m1flow-bench-source-")))
    bootstrap = broker.start()
    ensure_topics(bootstrap)
    java = psutil.Process(broker.state().pid)
    settings = {"publish_batch": args.batch, "inflight_batches": args.inflight, "block_rows": args.block,
                "read_ahead": not args.no_read_ahead, "scan_back": max(2000, (args.inflight + 2) * args.batch)}
    lines = [f"{'format':<8}{'rows':>9}{'bare rows/s':>12}{'producer rec/s':>15}{'source prompts/s':>17}"
             f"{'ratio':>6}{'of producer':>12}{'CPU us/row: bare':>17}{'producer':>9}{'source':>7}"
             f"{'broker us/row: producer':>24}{'source':>7}{'peak MB: bare':>14}{'source':>7}{'start s':>8}{'states/s':>9}"]
    try:
        for fmt in args.formats:
            for rows in (args.rows // 10, args.rows):
                path = write(fmt, rows, args.out)
                b = measure("bare", path, bootstrap, settings, java)
                s = measure("source", path, bootstrap, settings, java)
                p = measure("producer", "-", bootstrap, {**settings, "rows": rows, "value_bytes": round(s["value_bytes"])},
                            java)
                assert b["rows"] == rows and s["rows"] == rows, (b, s)
                br, pr, sr = rows / b["s"], rows / p["s"], rows / s["s"]
                us = {side: 1e6 * r["cpu_s"] / rows for side, r in (("b", b), ("p", p), ("s", s))}
                lines.append(f"{fmt:<8}{rows:>9}{br:>12.0f}{pr:>15.0f}{sr:>17.0f}{sr / br:>6.2f}{sr / pr:>12.2f}"
                             f"{us['b']:>17.1f}{us['p']:>9.1f}{us['s']:>7.1f}"
                             f"{1e6 * p['broker_cpu_s'] / rows:>24.1f}{1e6 * s['broker_cpu_s'] / rows:>7.1f}"
                             f"{b['peak_rss_mb']:>14.0f}{s['peak_rss_mb']:>7.0f}{s['start_s']:>8.2f}"
                             f"{s['states'] / s['s']:>9.1f}")
                print(lines[-1], flush=True)
    finally:
        broker.stop()
    print("\n".join(lines))
    print(f"regime: publish_batch {args.batch}, inflight_batches {args.inflight}, block_rows {args.block}, "
          f"read_ahead {not args.no_read_ahead}, mean record {round(s['value_bytes'])} bytes; "
          f"{os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
