"""What every backend shares: the interface, the run's uid, cancellation, bounded output, verdicts.

Why split this way: a backend only knows how to run one command line in a fresh, limited sandbox
with some files and stdin (`Backend.run`). Everything language-specific lives once in
`svc_sandbox.sandbox`, and the verdict rule (`classify`) once here, so the local jail and Docker
behave the same.
"""
from __future__ import annotations

import fcntl
import os
import random
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field

from m1flow.status import Status
from svc_sandbox.api import ExecResult, Limits

WORK_DIR = "/sandbox"
STARTED = b"s"
MISSING_TOOL_EXIT = 127  # what a shell returns for a command it cannot find
_MEMORY_ERRORS = (b"MemoryError", b"std::bad_alloc", b"Cannot allocate memory", b"out of memory")


class Cancel(threading.Event):
    """Set when nobody waits for the run any more (the call was cancelled or its deadline passed).

    Backends look at it at least every `Cancel.POLL_S` and then kill the run at once.
    """
    POLL_S = 0.1


class Backend(Protocol):
    name: str
    python: str  # the Python interpreter as seen inside the sandbox

    def run(self, argv: Sequence[str], files: Mapping[str, bytes], stdin: bytes,
            limits: Limits, cancel: Cancel | None = None, env_dir: Path | None = None) -> ExecResult:
        """Run argv in a fresh sandbox whose work dir (WORK_DIR, also the cwd) holds `files`; env_dir: a
        repository environment (m1flow.data.swe_env) visible read-only at the same path."""
        ...


class UidRange(BaseModel):
    """The uids runs get, one each while it runs: nothing keyed by uid in the kernel is shared."""
    first: int = Field(2_000_000_000, ge=1000, description="first uid (no host account should use the range)")
    count: int = Field(65_536, ge=1, description="how many; at least the most runs at once")
    lock_dir: Path = Field(Path(tempfile.gettempdir()) / "m1flow-sandbox-uids",
                           description="one lock file a uid: every sandbox process of this host must share it")


class UidPool:
    """Hands each run a uid no running run on this host holds, the least recently used first.

    Why rotate: uid-keyed kernel state (keyrings, per-user counters) that a run leaves behind is
    not seen by the next runs; with the seccomp filter closing those channels too, a uid is reused
    only after `count` other runs. Why host-wide: the kernel's per-user counters (RLIMIT_NPROC above
    all, the process cap of a jail without a pids cgroup) are shared by every process of a uid, so two
    sandbox processes on one host (replicas, test workers) handing out the same uid at once would cap
    each other's runs. A uid is held by an flock on its file in `lock_dir`, which the kernel drops when
    the holder exits, however it exits; each process starts at its own place in the range.
    """

    WAIT_S = 0.05

    def __init__(self, uids: UidRange) -> None:
        start = random.SystemRandom().randrange(uids.count)
        order = list(range(uids.first, uids.first + uids.count))
        self._free = deque(order[start:] + order[:start])
        self._ready = threading.Condition()
        self._lock_dir = uids.lock_dir
        self._lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    @contextmanager
    def lease(self) -> Iterator[int]:
        uid, fd = self._take()
        try:
            yield uid
        finally:
            os.close(fd)  # drops the host-wide lock
            with self._ready:
                self._free.append(uid)
                self._ready.notify()

    def _take(self) -> tuple[int, int]:
        """The first free uid whose host-wide lock this process gets (waiting while every one is held)."""
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._free)
                for _ in range(len(self._free)):
                    uid = self._free.popleft()
                    fd = os.open(self._lock_dir / str(uid), os.O_CREAT | os.O_RDWR, 0o600)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        os.close(fd)
                        self._free.append(uid)  # another process runs with it: later
                        continue
                    return uid, fd
            time.sleep(self.WAIT_S)


def announce_start(argv: Sequence[str]) -> list[str]:
    """Prefix argv so the sandbox writes STARTED on stdout right before exec'ing the program.

    Why: a setup failure is ours (SANDBOX_ERROR, dropped by the learner) while a program failure
    scores 0. The program cannot forge the byte: it is on stdout before the program exists. A
    program the image lacks (an interpreter, a compiler) is a setup failure too: checked first.
    """
    check = f'command -v "$1" >/dev/null || {{ echo "m1flow: $1: not found in the sandbox" >&2; ' \
            f'exit {MISSING_TOOL_EXIT}; }}'
    return ["/bin/sh", "-c", f'{check}; printf {STARTED.decode()} && exec "$@"', "sh", *argv]


class BoundedOutput:
    """A run's stdout and stderr, each kept to `limit` bytes, with the STARTED marker stripped.

    Both backends read their streams through it, so output limits and start detection are one rule.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.stdout, self.stderr = bytearray(), bytearray()
        self.started = self.overflow = False

    def add(self, buffer: bytearray, data: bytes) -> bool:
        """Append `data` to `buffer` (self.stdout or self.stderr); True when this call first overflowed."""
        if buffer is self.stdout and not self.started:
            self.started, data = data[:1] == STARTED, data[1:]
        room = self.limit - len(buffer)
        buffer.extend(data[:max(room, 0)])
        first = len(data) > room and not self.overflow
        self.overflow = self.overflow or len(data) > room
        return first


@dataclass
class RunOutcome:
    """What a backend saw of one run; `classify` turns it into a verdict alike for all backends."""
    started: bool  # STARTED was read first on stdout (and stripped from `stdout`)
    timed_out: bool  # we killed it at the wall deadline
    overflow: bool  # we killed it for writing past max_output_bytes
    exit_code: int | None  # of the sandbox's top process; a program killed by signal n shows 128+n
    stdout: bytes
    stderr: bytes
    wall: float
    cpu: float = 0.0  # the whole run's CPU seconds, where measured
    memory_peak: int = 0
    oom_killed: bool = False
    cpu_exceeded: bool = False  # we killed it when the run's total CPU time reached the limit
    cancelled: bool = False  # we killed it because nobody waits for it any more
    note: str = ""


def _says_out_of_memory(stderr: bytes) -> bool:
    """An allocation refused under RLIMIT_AS surfaces as an error message, not as a signal."""
    return any(marker in stderr[-2000:] for marker in _MEMORY_ERRORS)


def classify(run: RunOutcome, limits: Limits) -> ExecResult:
    def verdict(status: Status, detail: str = "", **codes: int | None) -> ExecResult:
        return ExecResult(status=status, detail=detail, stdout=run.stdout, stderr=run.stderr, wall_seconds=run.wall,
                          cpu_seconds=run.cpu, memory_peak_bytes=run.memory_peak, **codes)

    if run.cancelled:
        return verdict(Status.SANDBOX_ERROR, "cancelled: the caller stopped waiting")
    if not run.started:
        why = "did not start before the deadline" if run.timed_out else "setup failed"
        return verdict(Status.SANDBOX_ERROR, f"sandbox {why}: {run.stderr[-500:].decode(errors='replace')}")
    if run.cpu_exceeded:
        return verdict(Status.TIME_LIMIT, f"CPU time of the run over {limits.cpu_seconds}s")
    if run.timed_out:
        return verdict(Status.TIME_LIMIT, f"wall time over {limits.wall_seconds}s")
    if run.overflow:
        return verdict(Status.OUTPUT_LIMIT, f"output over {limits.max_output_bytes} bytes")
    if run.exit_code is None:  # the sandbox itself was killed, and not by us
        status = Status.MEMORY_LIMIT if run.oom_killed else Status.SANDBOX_ERROR
        return verdict(status, "sandbox killed from outside")
    code = run.exit_code
    sig = code - 128 if code > 128 and (code - 128) in signal.valid_signals() else None
    out_of_memory = run.oom_killed or _says_out_of_memory(run.stderr)
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and run.cpu >= limits.cpu_seconds):
        return verdict(Status.TIME_LIMIT, f"CPU time over {limits.cpu_seconds}s", exit_code=code, signal=sig)
    if code != 0:
        status = Status.MEMORY_LIMIT if out_of_memory else Status.RUNTIME_ERROR
        detail = {signal.SIGXFSZ: "file size limit"}.get(sig, f"killed by signal {sig}" if sig else "")
        return verdict(status, detail or (run.note if out_of_memory else ""), exit_code=code, signal=sig)
    return verdict(Status.OK, exit_code=0)
