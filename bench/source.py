"""Prompts per second published by svc_source from a Parquet and a JSONL file, against reading the
same file bare with the reader alone, and the peak memory of both.

Why: the source must keep a rollout fleet fed without being the bottleneck, and must not hold a
dataset in memory (10M-row files). Each side runs in its own subprocess, so its peak RSS
(ru_maxrss) is its own:

  bare:   m1flow.data.readers.open_table(path).rows() in file order, every row touched (dicts)
  source: svc_source's own publishing path on a real local broker: the seeded block shuffle
          (Cursor: records(start, stop) a block at a time, the m1flow importer, TaskRecord
          validation), prompt_for, Producer.send (the `kafka_client` default, confluent-kafka), a flush per batch
          and a `source_state` record per batch, exactly as the service loop does with no lead (lead_steps 0)

Both are measured at `--rows` and at a tenth of it: memory flat in the file's size means the two
peaks match. Files are generated into /tmp (m1flow record form: id, source, prompt, verifier).
Target: the source at least 0.5x the bare reader's rows per second.
Run: PYTHONPATH=. python bench/source.py [--rows 1000000] [--formats parquet jsonl]
"""
from __future__ import annotations

import argparse
import json
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


def source(path: str, bootstrap: str) -> dict:
    from svc_source.config import SourceConfig
    from svc_source.service import SourceService

    cfg = SourceConfig(bootstrap=bootstrap, run_id=f"bench-{time.time_ns()}", lead_steps=0, max_epochs=1,
                       publish_batch=256, metrics_port=-1, sources=[{"path": path, "name": "bench"}])
    service = SourceService(cfg)
    t0 = time.perf_counter()
    service.start()
    n = 0
    while (done := service.publish(cfg.publish_batch)) or not all(c.exhausted for c in service.cursors):
        n += done
    service.shutdown()
    return {"rows": n, "s": time.perf_counter() - t0}


def measure(side: str, path: Path, bootstrap: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", side, str(path), bootstrap], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{side} on {path} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--formats", nargs="*", default=["parquet", "jsonl"])
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "m1flow-bench-source")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        side, path, bootstrap = args.child
        result = bare(path) if side == "bare" else source(path, bootstrap)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result))
        return
    from m1flow.bus.admin import ensure_topics
    from m1flow.kafka import Broker

    args.out.mkdir(parents=True, exist_ok=True)
    broker = Broker(Path(tempfile.mkdtemp(prefix="m1flow-bench-source-")))
    bootstrap = broker.start()
    ensure_topics(bootstrap)
    lines = [f"{'format':<8}{'rows':>10}{'bare rows/s':>13}{'source prompts/s':>18}{'ratio':>7}"
             f"{'bare peak MB':>14}{'source peak MB':>16}"]
    try:
        for fmt in args.formats:
            for rows in (args.rows // 10, args.rows):
                path = write(fmt, rows, args.out)
                b, s = measure("bare", path, bootstrap), measure("source", path, bootstrap)
                assert b["rows"] == rows and s["rows"] == rows, (b, s)
                br, sr = rows / b["s"], rows / s["s"]
                lines.append(f"{fmt:<8}{rows:>10}{br:>13.0f}{sr:>18.0f}{sr / br:>7.2f}"
                             f"{b['peak_rss_mb']:>14.0f}{s['peak_rss_mb']:>16.0f}")
                print(lines[-1], flush=True)
    finally:
        broker.stop()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
