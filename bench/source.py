"""Prompts per second published by svc_source from a Parquet and a JSONL file, against reading the
same file bare with the reader alone, and the peak memory of both.

Why: the source must keep a rollout fleet fed without being the bottleneck, and must not hold a
dataset in memory (10M-row files). Each side runs in its own subprocess, so its peak RSS
(ru_maxrss) is its own:

  bare:   m1flow.data.readers.open_table(path).rows() in file order, every row touched (dicts)
  source: svc_source's own publishing path on a real local broker: the seeded block shuffle
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
The regime: states/s is the acknowledged batches per second (one state record each, at most);
start s is the service's start (state read back, `prompts` tail scan, reader process, watcher).
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

    t0 = time.perf_counter()
    table = open_table(path)
    n = sum(1 for _, r in table.rows() if r)
    return {"rows": n, "s": time.perf_counter() - t0}


def source(path: str, bootstrap: str, settings: dict) -> dict:
    from svc_source.config import SourceConfig
    from svc_source.service import SourceService

    cfg = SourceConfig(bootstrap=bootstrap, run_id=f"bench-{time.time_ns()}", lead_steps=0, max_epochs=1,
                       metrics_port=-1, sources=[{"path": path, "name": "bench"}], **settings)
    service = SourceService(cfg)
    t0 = time.perf_counter()
    service.start()
    started = time.perf_counter() - t0
    n = 0
    while (done := service.publish(cfg.publish_batch)) or not all(c.exhausted for c in service.cursors):
        n += done
    service.shutdown()
    s = time.perf_counter() - t0
    return {"rows": n, "s": s, "start_s": started, "states": service.window.states}


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM). Not ru_maxrss: Linux carries that across
    fork and exec, so a child would report its parent's peak (the earlier tables did)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(side: str, path: Path, bootstrap: str, settings: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", side, str(path), bootstrap, json.dumps(settings)], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{side} on {path} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


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
        result = bare(path) if side == "bare" else source(path, bootstrap, json.loads(settings))
        result["peak_rss_mb"] = peak_rss_mb()
        print(json.dumps(result))
        return
    from m1flow.bus.admin import ensure_topics
    from m1flow.kafka import Broker

    args.out.mkdir(parents=True, exist_ok=True)
    broker = Broker(Path(tempfile.mkdtemp(prefix="m1flow-bench-source-")))
    bootstrap = broker.start()
    ensure_topics(bootstrap)
    settings = {"publish_batch": args.batch, "inflight_batches": args.inflight, "block_rows": args.block,
                "read_ahead": not args.no_read_ahead, "scan_back": max(2000, (args.inflight + 2) * args.batch)}
    lines = [f"{'format':<8}{'rows':>10}{'bare rows/s':>13}{'source prompts/s':>18}{'ratio':>7}"
             f"{'bare peak MB':>14}{'source peak MB':>16}{'start s':>9}{'states/s':>10}"]
    try:
        for fmt in args.formats:
            for rows in (args.rows // 10, args.rows):
                path = write(fmt, rows, args.out)
                b, s = measure("bare", path, bootstrap, settings), measure("source", path, bootstrap, settings)
                assert b["rows"] == rows and s["rows"] == rows, (b, s)
                br, sr = rows / b["s"], rows / s["s"]
                lines.append(f"{fmt:<8}{rows:>10}{br:>13.0f}{sr:>18.0f}{sr / br:>7.2f}"
                             f"{b['peak_rss_mb']:>14.0f}{s['peak_rss_mb']:>16.0f}{s['start_s']:>9.2f}"
                             f"{s['states'] / s['s']:>10.1f}")
                print(lines[-1], flush=True)
    finally:
        broker.stop()
    print("\n".join(lines))
    print(f"regime: publish_batch {args.batch}, inflight_batches {args.inflight}, block_rows {args.block}, "
          f"read_ahead {not args.no_read_ahead}; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
