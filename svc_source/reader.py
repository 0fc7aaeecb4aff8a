"""Blocks read ahead in a reader process: each source's next block read, checked and encoded
(m1flow.source.prompt_bodies) while the service sends the one before.

Why: reading, checking and encoding a row and sending it are both CPU bound Python, and the
machine has two cores; one process did both in turn (bench/source.py, bench/README.md). The
reader is a program of its own (`python -m svc_source.reader`, like svc_reward's math worker):
`spawn` would re-run the service's unguarded __main__ in it and `fork` would copy a threaded
service. It opens the same DatasetConfigs, answers requests in order, and dies with the service
(PR_SET_PDEATHSIG, and its pipe closing). What a block holds is what the service would have read
itself: the same bodies and the same errors, so the order, the ids and the bad rows do not depend
on where a block was read.
"""
from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import sys
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from m1flow.data.dataset import DatasetConfig
from m1flow.runtime.pipes import PipeWorker, WorkerGone, with_checkout_on_path
from m1flow.runtime.tether import die_with_parent

log = logging.getLogger(__name__)
Block = tuple[int, int, int]  # (source index, start, stop)
READY = b"ready"  # the reader's first answer, once its sources are open


class ReaderGone(WorkerGone):
    """The reader process exited; the service stops (its supervisor restarts it)."""


class ReadAhead:
    """The service's side: ask for a block early (`ahead`), take it when the cursor gets there."""

    def __init__(self, datasets: list[DatasetConfig], group_size: int, paths: list[str],
                 startup_timeout_s: float = 120.0) -> None:
        setup = json.dumps({"sources": [d.model_dump(mode="json") for d in datasets], "group_size": group_size,
                            "paths": paths}).encode()
        parent = str(os.getpid())
        self.worker = PipeWorker(
            lambda jobs, blocks: [sys.executable, "-m", "svc_source.reader", parent, str(jobs), str(blocks)],
            ready=READY, startup_timeout_s=startup_timeout_s, what="the source's reader process",
            env=with_checkout_on_path(), setup=setup, gone=ReaderGone)
        self.asked: list[Block] = []  # requested, answers not yet received, in order
        self.got: dict[Block, Any] = {}

    def _recv(self) -> Any:
        try:
            return pickle.loads(self.worker.recv())
        except (EOFError, OSError) as exc:
            raise ReaderGone(f"the source's reader process is gone (exit {self.worker.process.poll()})") from exc

    def ahead(self, j: int, start: int, stop: int) -> None:
        """Start reading rows start..stop of source j, unless that is under way."""
        block = (j, start, stop)
        if block not in self.got and block not in self.asked:
            self.worker.send(pickle.dumps(block))
            self.asked.append(block)

    def read(self, j: int, start: int, stop: int) -> Iterator[tuple[int, Any]]:
        """The block's (row, body or error) pairs; a read that broke re-raises its error after the
        rows it gave, as the source's own records() would."""
        block = (j, start, stop)
        self.ahead(j, start, stop)
        while block not in self.got:
            self.got[self.asked.pop(0)] = self._recv()
        rows, failure = self.got.pop(block)
        yield from rows
        if failure is not None:
            raise failure

    def close(self) -> None:
        self.worker.close()


# ---- the reader process -------------------------------------------------------------------------
def _tether(parent: int) -> None:
    """Killed by the kernel when the service dies, a SIGKILL included (Linux)."""
    die_with_parent()
    if os.getppid() != parent:
        sys.exit(1)


def _picklable(exc: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - an error type that cannot cross: its text still does
        return ValueError(str(exc))


def main(parent: int, jobs_fd: int, blocks_fd: int) -> None:
    from m1flow.data.dataset import open_source
    from m1flow.source import prompt_bodies

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the service stops it by closing the pipe
    _tether(parent)
    jobs, blocks = Connection(jobs_fd, writable=False), Connection(blocks_fd, readable=False)
    setup = json.loads(jobs.recv_bytes())
    sources = [open_source(DatasetConfig.model_validate(d)) for d in setup["sources"]]
    group_size, paths = setup["group_size"], setup["paths"]
    blocks.send_bytes(READY)
    while True:
        try:
            j, start, stop = pickle.loads(jobs.recv_bytes())
        except EOFError:
            return
        rows, failure = [], None
        try:
            for row, item in prompt_bodies(sources[j], start, stop, group_size, paths[j]):
                rows.append((row, _picklable(item) if isinstance(item, Exception) else item))
        except (OSError, ValueError) as exc:
            failure = _picklable(exc)
        blocks.send_bytes(pickle.dumps((rows, failure), protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
