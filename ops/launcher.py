"""Start services as local processes and wait until they are ready (readiness file + gRPC health).

Used by `m1flow up`, the demo and the integration tests, so all three run the real entry points.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ops import ROOT
from ops.interrupt import deferred
from ops.services import service
from m1flow.runtime import health
from m1flow.runtime.service import ready_file


def open_log(path: Path):  # noqa: ANN201 - a binary file object
    """A service's log for appending, readable by its owner only (0600, an older file narrowed too):
    a log can hold what a service was sent, and in secure mode it sits beside the run's secrets."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


@dataclass
class ServiceProcess:
    name: str
    replica: int
    run_dir: Path
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    entry: list[str] = field(default_factory=list)  # e.g. torchrun's; default: python -m <its module>
    proc: subprocess.Popen | None = None
    launched_at: float = 0.0
    # what it started in sessions of their own (torchrun starts each rank so): a signal to its process
    # group misses them, and a rank whose leader died waited for it for good (found 55 min after its test)
    others: list[psutil.Process] = field(default_factory=list)

    @property
    def log_path(self) -> Path:
        return self.run_dir / "logs" / f"{self.name}-{self.replica}.log"

    def start(self) -> "ServiceProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        ready_file(self.run_dir, self.name, self.replica).unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **self.env}
        self.launched_at = time.time()
        with open_log(self.log_path) as log, deferred():  # a stop signal waits until the process is recorded
            self.proc = subprocess.Popen(self.command(), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def command(self) -> list[str]:
        entry = self.entry or [sys.executable, "-m", service(self.name).module]
        return [*entry, "--run-dir", str(self.run_dir), "--replica", str(self.replica), *self.args]

    def info(self) -> dict:
        """The readiness file's contents; {} before the service is ready or once it removed the file
        on its way out (which can happen between any two looks: the chaos run's SIGTERM of `m1flow up`
        once failed with FileNotFoundError from an exists() then read_text())."""
        try:
            return json.loads(ready_file(self.run_dir, self.name, self.replica).read_text())
        except FileNotFoundError:
            return {}

    @property
    def grpc_address(self) -> str:
        return self.info().get("grpc", "")

    def wait_ready(self, timeout: float = 180.0) -> "ServiceProcess":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name}-{self.replica} exited with {self.proc.returncode}:\n{self.tail()}")
            info = self.info()
            if info.get("started", 0) >= self.launched_at and health.check(info["grpc"]) == "SERVING":
                return self
            time.sleep(0.3)
        raise TimeoutError(f"{self.name}-{self.replica} not ready after {timeout:.0f}s:\n{self.tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal its process group; SIGKILL also kills what it started outside the group."""
        if self.alive():
            self._note_others()
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:  # it exited since alive() looked
                pass
        if sig == signal.SIGKILL:
            self._kill_others(0.0)

    def _note_others(self) -> None:
        """Its descendants now, while the tree still leads to them (an orphan is re-parented to init)."""
        try:
            found = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        known = {p.pid for p in self.others}
        self.others += [p for p in found if p.pid not in known]

    def _kill_others(self, wait_s: float) -> None:
        """Give its descendants `wait_s` to exit as its shutdown asked, then SIGKILL the rest."""
        _, alive = psutil.wait_procs([p for p in self.others if p.is_running()], timeout=max(wait_s, 0.0))
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=10)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (graceful: finish, commit, close), SIGKILL if it does not exit in time."""
        if not self.alive():
            return self.proc.returncode if self.proc else None
        self.kill(signal.SIGTERM)
        return self.wait_stopped(timeout)

    def wait_stopped(self, timeout: float) -> int | None:
        """Wait for the exit a SIGTERM asked for; SIGKILL (its process group) if it does not come in time.

        The leader's exit is not the group's: torchrun exits on SIGTERM while a rank may still be in its
        own shutdown (one was found alive 32 minutes after its test, its broker gone), so the rest of the
        group gets the same time and then SIGKILL."""
        if self.proc is None:
            return None
        deadline = time.monotonic() + max(timeout, 0.0)
        try:
            code = self.proc.wait(max(timeout, 0.0))
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
            code = self.proc.wait(10)
        while group_members(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if group_members(self.proc.pid):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # the last one exited since
                pass
            gone = time.monotonic() + 10
            while group_members(self.proc.pid) and time.monotonic() < gone:  # the kernel's, a moment
                time.sleep(0.05)
        self._kill_others(deadline - time.monotonic())
        return code

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited while we looked
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def stop_together(procs: list[ServiceProcess], timeout: float = 30.0) -> None:
    """SIGTERM every one of them at once, then wait for all (SIGKILL for those still there after
    `timeout`): a graceful stop takes the longest one's time, not the sum of all."""
    for proc in procs:
        proc.kill(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        proc.wait_stopped(deadline - time.monotonic())


def torchrun(name: str, nproc: int) -> list[str]:
    """The entry of a service run data-parallel on `nproc` local processes."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", service(name).module]


def launch(name: str, run_dir: Path, bootstrap: str, args: list[str] | None = None, replica: int = 0,
           run_id: str = "local", wait: bool = True, env: dict[str, str] | None = None,
           entry: list[str] | None = None) -> ServiceProcess:
    proc = ServiceProcess(name, replica, Path(run_dir),
                          ["--bootstrap", bootstrap, "--run-id", run_id, *(args or [])], env or {}, entry or [])
    proc.start()
    return proc.wait_ready() if wait else proc
