"""`m1flow up` and `m1flow down`: the local mini-cluster under a supervisor a person can read.

The supervisor owns the broker and every service process of one run directory. It restarts what
exits (with exponential back-off, each restart logged and counted) and what stays unhealthy after
having been ready (a consumer that stopped making progress, see m1flow/bus/liveness.py), prints a
status line, and keeps `up.json` in the run directory current (pids, restarts), so that
`m1flow down` stops everything even when the supervisor itself is gone. A start that fails
stops what it started; SIGTERM or Ctrl-C stops everything (ops.interrupt: in every phase, the start's
included), and a SIGKILL of the supervisor takes its tethered broker and services with it.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from pydantic import BaseModel, Field

from ops.interrupt import Interrupted, deferred
from ops.launcher import ServiceProcess
from ops.stack import Stack
from m1flow.runtime import health

log = logging.getLogger(__name__)
STATE_FILE = "up.json"


class RestartPolicy(BaseModel):
    backoff_initial_s: float = Field(1.0, gt=0, description="wait before the first restart of a service")
    backoff_max_s: float = Field(60.0, gt=0, description="the back-off doubles up to this")
    healthy_reset_s: float = Field(60.0, gt=0, description="after this long SERVING, the back-off starts afresh")
    unhealthy_restart_s: float = Field(120.0, gt=0,
                                       description="restart a service not SERVING this long after it was ready")
    status_every_s: float = Field(10.0, gt=0, description="how often the status line is printed")
    check_every_s: float = Field(1.0, gt=0, description="how often processes and health are checked")


@dataclass
class Supervised:
    """One service replica and what the supervisor knows of it."""

    proc: ServiceProcess
    restarts: int = 0
    backoff: float = 0.0
    restart_at: float | None = None  # scheduled restart (monotonic), while it is down
    ready_since: float | None = None  # first SERVING after its (re)start
    unhealthy_since: float | None = None
    state: str = "starting"
    history: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.proc.name}-{self.proc.replica}"


class Supervisor:
    def __init__(self, stack: Stack, policy: RestartPolicy | None = None,
                 say: Callable[[str], None] = print) -> None:
        self.stack = stack
        self.policy = policy or RestartPolicy()
        self.say = say
        self.members: dict[str, Supervised] = {}
        self.broker_restarts = 0
        self._last_status = 0.0
        self.state_file = stack.run_dir / STATE_FILE

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Broker, topics, initial policy and every service; on any failure, stop what started."""
        try:
            self.stack.start()
        except BaseException as exc:
            if not isinstance(exc, Interrupted):  # a stop signal is said once, by whoever took it
                self.say(f"start failed while {self.stack.phase}: stopping what was started")
            with deferred():
                self.stack.stop()
                self.state_file.unlink(missing_ok=True)
            raise
        for proc in self.stack.procs:
            self.members[f"{proc.name}-{proc.replica}"] = Supervised(proc, backoff=self.policy.backoff_initial_s,
                                                                     ready_since=time.monotonic(), state="SERVING")
        self.write_state()

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.policy.check_every_s):
            self.tick()

    def stop(self, quiet: bool = False) -> None:
        """Every service, then the broker (unless the stack keeps it); `up.json` goes with them."""
        if not quiet:
            self.say("stopping services" + ("" if self.stack.keep_broker else " and broker"))
        with deferred():
            self.stack.stop()
            self.state_file.unlink(missing_ok=True)

    # ------------------------------------------------------------------ one check
    def tick(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        broker_up = self._check_broker()
        for member in self.members.values():
            self._check(member, now, broker_up)
        if now - self._last_status >= self.policy.status_every_s:
            self._last_status = now
            self.say(self.status_line())

    def _check_broker(self) -> bool:
        if self.stack.broker.running():
            return True
        self.broker_restarts += 1
        self.say(f"broker exited; restarting it (restart {self.broker_restarts})")
        try:
            self.stack.broker.start()
            self.write_state()
            return True
        except Exception as exc:  # noqa: BLE001 - try again next tick, say why
            self.say(f"broker restart failed: {exc}")
            return False

    def _check(self, m: Supervised, now: float, broker_up: bool) -> None:
        if not m.proc.alive():
            self._on_down(m, now)
            return
        status = health.check(m.proc.grpc_address, timeout=1.0) if m.proc.grpc_address else "UNREACHABLE"
        if status == "SERVING":
            m.state, m.unhealthy_since = "SERVING", None
            if m.ready_since is None:
                m.ready_since = now
            if now - m.ready_since >= self.policy.healthy_reset_s:
                m.backoff = self.policy.backoff_initial_s
            return
        m.state = status if m.ready_since is not None else "starting"
        if m.ready_since is None or not broker_up:
            return  # still starting, or nothing a restart could fix
        m.unhealthy_since = m.unhealthy_since or now
        if now - m.unhealthy_since >= self.policy.unhealthy_restart_s:
            self.say(f"{m.key} not SERVING for {now - m.unhealthy_since:.0f}s ({status}); killing it for a restart")
            m.proc.kill()
            m.proc.proc.wait(10)
            self._on_down(m, now)

    def _on_down(self, m: Supervised, now: float) -> None:
        if m.restart_at is None:
            code = m.proc.proc.returncode if m.proc.proc else None
            m.restart_at = now + m.backoff
            m.state = f"exited({code})"
            m.history.append(f"exit {code}")
            self.say(f"{m.key} exited with code {code}; restart {m.restarts + 1} in {m.backoff:.0f}s "
                     f"(log: {m.proc.log_path})")
            m.backoff = min(self.policy.backoff_max_s, m.backoff * 2)
            return
        if now < m.restart_at:
            return
        m.restarts += 1
        m.restart_at, m.ready_since, m.unhealthy_since, m.state = None, None, None, "starting"
        self.stack.procs.remove(m.proc)
        m.proc = self.stack.start_service(m.proc.name, m.proc.replica, wait=False)
        self.write_state()
        self.say(f"{m.key} restarted (pid {m.proc.proc.pid}, restart {m.restarts})")

    # ------------------------------------------------------------------ reporting
    def status_line(self) -> str:
        broker = "up" if self.stack.broker.running() else "DOWN"
        parts = [f"broker {broker}" + (f" (restarts {self.broker_restarts})" if self.broker_restarts else "")]
        for m in self.members.values():
            parts.append(f"{m.key} {m.state}" + (f" (restarts {m.restarts})" if m.restarts else ""))
        return f"[{time.strftime('%H:%M:%S')}] " + " | ".join(parts)

    def write_state(self) -> None:
        state = {"supervisor": _identity(os.getpid()), "run_dir": str(self.stack.run_dir),
                 "bootstrap": self.stack.bootstrap,
                 "services": [{"name": m.proc.name, "replica": m.proc.replica, "log": str(m.proc.log_path),
                               "restarts": m.restarts, **_identity(m.proc.proc.pid)}
                              for m in self.members.values() if m.proc.proc is not None]}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.state_file)


def _identity(pid: int) -> dict:
    """pid and create time: together they name a process even after its pid is reused."""
    try:
        return {"pid": pid, "started_at": psutil.Process(pid).create_time()}
    except psutil.NoSuchProcess:
        return {"pid": pid, "started_at": 0.0}


def _same_process(entry: dict) -> psutil.Process | None:
    try:
        proc = psutil.Process(int(entry["pid"]))
        if abs(proc.create_time() - float(entry.get("started_at", 0))) < 0.01:
            return proc
    except (psutil.NoSuchProcess, KeyError, ValueError):
        pass
    return None


def down(run_dir: Path, timeout: float = 60.0, say: Callable[[str], None] = print) -> int:
    """Stop the supervisor of run_dir (which stops everything), then anything it left; idempotent.

    Returns how many processes were stopped.
    """
    from ops.kafka import Broker

    path = Path(run_dir) / STATE_FILE
    state = json.loads(path.read_text()) if path.exists() else {}
    stopped = 0
    supervisor = _same_process(state["supervisor"]) if "supervisor" in state else None
    if supervisor is not None:
        say(f"stopping the supervisor (pid {supervisor.pid}) and what it runs")
        supervisor.send_signal(signal.SIGTERM)
        try:
            supervisor.wait(timeout)
        except psutil.TimeoutExpired:
            say("the supervisor did not stop in time; stopping its processes directly")
        stopped += 1
    for entry in state.get("services", []):
        proc = _same_process(entry)
        if proc is None:
            continue
        say(f"stopping {entry['name']}-{entry['replica']} (pid {proc.pid})")
        _terminate_group(proc, timeout=30)
        stopped += 1
    broker = Broker(Path(run_dir) / "kafka")
    if broker.running():
        say("stopping the broker")
        broker.stop()
        stopped += 1
    path.unlink(missing_ok=True)
    return stopped


def _terminate_group(proc: psutil.Process, timeout: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout)
            return
        except psutil.TimeoutExpired:
            continue
