"""A weight broadcast through each checkpoint store: the learner's write and one rollout replica's
read of a policy, over file:// (a directory, what a ReadWriteMany volume gives) and over s3:// (a
real S3-compatible server, s3s-fs from scripts/s3_server.sh, on this machine's loopback and disk),
side by side.

Two payloads: the demo's policy (the real model, tokenizer and optimizer, written by the learner's
CheckpointStore.save and read by the rollout's PolicyCache + SHA-256 check), and a 1 GiB weights
blob (the transport alone: an atomic copy into the directory vs the upload; hash vs download + hash).
Both stores sit on the same local disk, so the ratio is the protocol's cost (HTTP, signing,
multipart, the server's own writes), not a network's: over a real network both sides add the wire.

    PYTHONPATH=. $(bash scripts/env.sh)/bin/python bench/checkpoint_store.py [--blob-mb 1024] [--rounds 3] [--cold]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from m1flow import checkpoint, store
from m1flow.store_config import StoreConfig

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "s3_server.sh"
BUCKET = "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drop_caches() -> bool:
    """Drop the page cache (root only) so reads come from the disk on both sides; False if not allowed."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def timed(fn: Callable[[], object], rounds: int, before: Callable[[], object] = lambda: None) -> float:
    times = []
    for _ in range(rounds):
        before()
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def dir_mb(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) / 2**20


def demo_policy(work: Path):
    """The demo's model (untrained: the bytes are what matter), tokenizer and a stepped optimizer."""
    import torch

    from m1flow.tokenizer import build_tokenizer
    from ops.warmstart import WarmStartConfig, build_model

    tok = build_tokenizer()
    model = build_model(tok, WarmStartConfig())  # the demo's hybrid model, native engine
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():  # Adam's two moments per parameter, as a real step leaves them
        p.grad = torch.randn_like(p)
    opt.step()
    return model, tok, opt


def bench_policy(file_root: Path, s3_cfg: StoreConfig, work: Path, rounds: int, cold: bool) -> list[tuple]:
    model, tok, opt = demo_policy(work)
    rows = []
    version = iter(range(1, 10_000))
    stores = {"file": store.CheckpointStore(file_root / "policy"),
              "s3": store.CheckpointStore(f"s3://{BUCKET}/policy", s3_cfg, staging=work / "staging")}
    written: dict[str, store.Stored] = {}
    sha: dict[str, str] = {}
    write_s, read_s = {}, {}
    for side, st in stores.items():
        def write(st=st, side=side) -> None:
            written[side], sha[side] = st.save(model, tok, opt, checkpoint.LearnerState(version=next(version)),
                                               keep=2, grace_s=0.0)
        write_s[side] = timed(write, rounds)
        cache = store.PolicyCache(s3_cfg, work / f"cache-{side}")

        def read(cache=cache, side=side) -> None:
            local = cache.local(written[side].uri)
            checkpoint.verify(local, sha[side])

        def fresh(cache=cache) -> None:  # every read is a replica that has not downloaded it yet
            shutil.rmtree(cache.directory, ignore_errors=True)
            if cold:
                drop_caches()
        read_s[side] = timed(read, rounds, fresh)
    size = dir_mb(written["file"].directory)
    policy = dir_mb(next((work / "cache-s3").iterdir()))  # what a replica fetches: no optimizer state
    label = f"demo policy ({size:.1f} MB checkpoint, {policy:.1f} MB without the optimizer)"
    rows.append((label, "learner write (save + publish)", size, write_s["file"], write_s["s3"]))
    rows.append((label, "rollout read (fetch + sha256)", policy, read_s["file"], read_s["s3"]))
    return rows


def bench_blob(file_root: Path, s3_cfg: StoreConfig, work: Path, mb: int, rounds: int, cold: bool) -> list[tuple]:
    src = work / "blob" / "v000001"
    src.mkdir(parents=True)
    (src / "config.json").write_text(json.dumps({"model_type": "blob"}))
    with open(src / checkpoint.WEIGHTS_FILE, "wb") as fh:
        for _ in range(mb):
            fh.write(os.urandom(1 << 20))
    sha = checkpoint.weights_sha256(src)
    dest = file_root / "blob" / "v000001"
    s3_uri = f"s3://{BUCKET}/blob/v000001"
    s3_store = store.CheckpointStore(f"s3://{BUCKET}/blob", s3_cfg, staging=work / "blob")

    def file_write() -> None:  # what save_checkpoint does with the bytes: temp dir, fsync, rename
        tmp = dest.with_name(".tmp-v000001")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        for p in tmp.iterdir():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(tmp, dest)

    cache = store.PolicyCache(s3_cfg, work / "blob-cache")
    before = (lambda: drop_caches()) if cold else (lambda: None)

    def fresh() -> None:
        shutil.rmtree(cache.directory, ignore_errors=True)
        before()
    rows = [
        (f"{mb} MB blob", "write", mb, timed(file_write, rounds), timed(lambda: s3_store.upload(src, s3_uri), rounds)),
        (f"{mb} MB blob", "read (fetch + sha256)", mb, timed(lambda: checkpoint.verify(dest, sha), rounds, before),
         timed(lambda: checkpoint.verify(cache.local(s3_uri), sha), rounds, fresh)),
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blob-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None, help="where both stores live (default: a temp dir)")
    parser.add_argument("--cold", action="store_true", help="drop the page cache before each read (root; "
                        "slows everything else on the machine): reads from the disk on both sides")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="m1flow-bench-store-"))
    subprocess.run(["bash", str(SCRIPT), "build"], check=True, stdout=subprocess.DEVNULL)
    port = str(free_port())
    up = subprocess.run(["bash", str(SCRIPT), "up", str(work / "s3-data"), port, BUCKET], check=True,
                        capture_output=True, text=True)
    endpoint = up.stdout.strip().splitlines()[-1]
    creds = work / "credentials.json"
    creds.write_text(json.dumps({"access_key_id": os.environ.get("M1FLOW_S3_ACCESS_KEY", "m1flow"),
                                 "secret_access_key": os.environ.get("M1FLOW_S3_SECRET_KEY", "m1flow-secret")}))
    s3_cfg = StoreConfig(endpoint_url=endpoint, credentials_file=creds)
    cold = args.cold and drop_caches()
    try:
        rows = bench_policy(work / "file", s3_cfg, work, args.rounds, cold)
        rows += bench_blob(work / "file", s3_cfg, work, args.blob_mb, args.rounds, cold)
    finally:
        subprocess.run(["bash", str(SCRIPT), "down", port], check=False)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nweight broadcast, median of {args.rounds}; both stores on this machine's disk, s3 = s3s-fs on "
          f"loopback; reads {'after dropping the page cache' if cold else 'with a warm page cache, as a server holds it just after the write'}\n")
    print("| payload | operation | MB | file:// s | s3:// s | s3/file | file:// MB/s | s3:// MB/s |")
    print("|---|---|---|---|---|---|---|---|")
    for label, op, mb, f, s in rows:
        print(f"| {label} | {op} | {mb:.1f} | {f:.3f} | {s:.3f} | {s / f:.2f} | {mb / f:.0f} | {mb / s:.0f} |")


if __name__ == "__main__":
    main()
