"""The uid a run gets is its own on the whole host: two sandbox processes (replicas, test workers) never
hand out the same uid at once, and a holder that dies, however it dies, frees its uid."""
from __future__ import annotations

import subprocess
import sys
import time

from svc_sandbox.backends.base import UidPool, UidRange


def test_two_pools_never_lease_the_same_uid_at_once(tmp_path):
    uids = UidRange(first=3_000_000_000, count=4, lock_dir=tmp_path / "locks")
    a, b = UidPool(uids), UidPool(uids)  # as two processes would (an flock is per open file)
    with a.lease() as x1, b.lease() as y1, a.lease() as x2, b.lease() as y2:
        assert sorted({x1, y1, x2, y2}) == list(range(3_000_000_000, 3_000_000_004))
    with a.lease() as x, b.lease() as y:  # all free again
        assert x != y


def test_a_pool_waits_for_the_uid_another_holds_and_gets_it_when_freed(tmp_path):
    uids = UidRange(first=3_000_000_100, count=1, lock_dir=tmp_path / "locks")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from svc_sandbox.backends.base import UidPool, UidRange\n"
        f"pool = UidPool(UidRange(first=3_000_000_100, count=1, lock_dir=Path({str(tmp_path / 'locks')!r})))\n"
        "with pool.lease():\n    print('held', flush=True)\n    time.sleep(300)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        pool = UidPool(uids)
        t = time.monotonic()
        holder.kill()  # kill -9: no code of the holder runs, the kernel drops its lock
        with pool.lease() as uid:
            assert uid == 3_000_000_100
        assert time.monotonic() - t < 10
    finally:
        holder.kill()
        holder.wait()
