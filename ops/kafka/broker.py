"""Run one combined broker+controller KRaft node as a child process, for tests, demos and `m1flow up`.

Everything the node owns lives under one run directory (config, data, logs, pid, ports), so a
crashed or leftover broker is found and cleaned up by the next start instead of blocking it, and a
stopped broker restarts on the same ports and data (the broker-outage test relies on that).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Literal

import psutil

from m1flow.runtime.ports import free_port
from m1flow.runtime.tether import require_main_thread
from ops.interrupt import deferred
from ops.kafka.config import BrokerState, write_config
from ops.tethered import command as tethered_command

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger(__name__)


class BrokerError(RuntimeError):
    pass


def jar_dir() -> Path:
    """The cached Kafka jars, fetched from Maven Central on first use."""
    out = subprocess.run(["bash", str(ROOT / "scripts" / "kafka_jars.sh")], check=True,
                         capture_output=True, text=True)
    return Path(out.stdout.strip())


def _open_out(path: Path, private: bool):  # noqa: ANN201 - a binary file object
    """The node's stdout file for appending; 0600 when `private` (an older file narrowed too)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600 if private else 0o644)
    if private:
        os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


class Broker:
    """One KRaft node under `run_dir`; `start()` is idempotent and `stop()` always leaves it dead."""

    def __init__(self, run_dir: str | Path, heap: str = "512m", secrets: str | Path | None = None,
                 tethered: bool = False, jit: Literal["c1", "tiered"] = "c1") -> None:
        """secrets: a CA folder (m1flow.security.pki) to serve TLS with client certificates and
        ACLs from (its `broker` and `admin` identities are the super users); None: plaintext.
        tethered: the node is killed by the kernel when the process that starts it dies, SIGKILL included
        (`m1flow up`, a tool's private broker: m1flow.runtime.tether; started from the main thread only);
        its data stays and a later start recovers it.
        jit: "c1", the JVM's quick compiler only: this broker lives for a test, a bench or a demo, and C2
        compiling Kafka's hot paths was much of its CPU (bench/broker_start.py: a third less CPU to
        ready; bench/learning.py's broker a third fewer CPU-seconds a version); "tiered", the JVM's
        default, for a broker that runs for days (the image's, docker/kafka, keeps it)."""
        self.run_dir = Path(run_dir).resolve()
        self.heap = heap
        self.jit = jit
        self.tethered = tethered
        self.secrets = Path(secrets).resolve() if secrets is not None else None
        self.state_file = self.run_dir / "broker.json"
        self._child: subprocess.Popen | None = None  # the process this object started, if any
        known = self.state()
        if self.secrets is None and known is not None and known.secrets:
            self.secrets = Path(known.secrets)  # a secure broker stays secure when found again

    # ----------------------------------------------------------------- state
    def state(self) -> BrokerState | None:
        if not self.state_file.exists():
            return None
        return BrokerState(**json.loads(self.state_file.read_text()))

    def _save(self, state: BrokerState) -> None:
        self.state_file.write_text(json.dumps(state.__dict__))

    @property
    def admin_security(self):  # noqa: ANN201 - a SecurityConfig; imported late to keep this module light
        """The super user's client block (off for a plaintext broker): what creates topics and ACLs."""
        from m1flow.security.config import SecurityConfig
        from m1flow.security.pki import CertificateAuthority

        if self.secrets is None:
            return SecurityConfig()
        admin = CertificateAuthority(self.secrets).identity("admin")
        return SecurityConfig(enabled=True, ca_file=admin.ca, cert_file=admin.cert, key_file=admin.key)

    @property
    def bootstrap(self) -> str:
        state = self.state()
        if state is None:
            raise BrokerError(f"no broker under {self.run_dir}")
        return state.bootstrap

    def _process(self) -> psutil.Process | None:
        """The broker process of this run dir, identified by its pid and create time.

        Not by its command line: right after the launcher forks, the child is still the Python
        parent until it execs java, and a busy machine can keep it there for a while.
        """
        state = self.state()
        if not state or not state.pid:
            return None
        try:
            proc = psutil.Process(state.pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                proc.wait(0)
                return None
            if state.started_at:
                return proc if abs(proc.create_time() - state.started_at) < 0.01 else None  # pid reused
            return proc if "kafka.Kafka" in " ".join(proc.cmdline()) else None  # state of an older m1flow
        except (psutil.NoSuchProcess, psutil.TimeoutExpired, psutil.AccessDenied):
            return None

    def running(self) -> bool:
        if self._child is not None:
            return self._child.poll() is None
        return self._process() is not None

    # ------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 90.0, attempts: int = 3) -> str:
        """Start (or find running) the node and return its bootstrap address once it serves requests.

        A free port can be taken by another process between choosing it and the JVM binding it;
        such a start is retried on new ports, keeping the data (a KRaft node's log does not depend
        on its listeners' ports). A start that fails for any reason stops what it started.
        """
        for attempt in range(attempts):
            try:
                return self._start(timeout)
            except BrokerError as exc:
                if "Address already in use" not in str(exc) or attempt == attempts - 1:
                    raise
                self._move_ports("a port was taken while the broker started")
        raise AssertionError("unreachable")

    def _move_ports(self, why: str) -> BrokerState:
        old = self.state()
        state = BrokerState(free_port(), free_port(), old.cluster_id if old else uuid.uuid4().hex[:22],
                            secrets=str(self.secrets or ""))
        self._save(state)
        if old is not None:
            log.warning("broker under %s moves from port %s to %s (%s); its data is kept",
                        self.run_dir, old.port, state.port, why)
        return state

    def _start(self, timeout: float) -> str:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.running():
            self.wait_ready(timeout)
            return self.bootstrap
        state = self.state()
        if state is None:
            state = self._move_ports("first start")
        elif not (_port_free(state.port) and _port_free(state.controller_port)):
            state = self._move_ports(f"port {state.port} or {state.controller_port} is taken by another process")
        if str(self.secrets or "") != state.secrets:
            raise BrokerError(f"the broker under {self.run_dir} was made {'with TLS' if state.secrets else 'plaintext'}"
                              f"; start it the same way or remove {self.run_dir}")
        props = write_config(self.run_dir, state, self.secrets)
        classpath = str(jar_dir() / "*")
        java = ["java", f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseSerialGC",
                *(["-XX:TieredStopAtLevel=1"] if self.jit == "c1" else []), "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.run_dir / 'log4j2.yaml'}",
                f"-Dkafka.logs.dir={self.run_dir / 'logs'}", "-cp", classpath]
        private = self.secrets is not None
        if private:  # a node made before this rule: its logs narrowed to the owner as well
            for path in (self.run_dir / "logs").glob("*"):
                path.chmod(0o600 if path.is_file() else 0o700)
        fmt = subprocess.run(self._tethered(java + ["kafka.tools.StorageTool", "format", "-t", state.cluster_id,
                                                    "-c", str(props), "--ignore-formatted"]),
                             capture_output=True, text=True, env=self._env(), umask=0o077 if private else -1)
        if fmt.returncode != 0:
            raise BrokerError(f"formatting the log dir failed: {fmt.stdout}{fmt.stderr}")
        # secure: the node's logs and data are its owner's only (0600 files, 0700 folders)
        with _open_out(self.run_dir / "broker.out", private) as out, deferred():  # started is recorded
            self._child = subprocess.Popen(self._tethered(java + ["kafka.Kafka", str(props)]), stdout=out,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True, env=self._env(),
                                           umask=0o077 if private else -1)
            state.pid = self._child.pid
            state.started_at = psutil.Process(self._child.pid).create_time()
            self._save(state)
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return state.bootstrap

    def _tethered(self, argv: list[str]) -> list[str]:
        """The command as run: when tethered, through ops.tethered, which sets PR_SET_PDEATHSIG and execs it
        (the JVM is then this process's own child, killed by the kernel with it; no preexec_fn, see there)."""
        if not self.tethered:
            return argv
        require_main_thread(f"broker under {self.run_dir}")
        return tethered_command(os.getpid(), argv)

    @staticmethod
    def _env() -> dict[str, str]:
        """The environment, with the checkout on PYTHONPATH for the tethering wrapper (java ignores it)."""
        return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}

    def wait_ready(self, timeout: float) -> None:
        """Block until an admin client can list topics (the only readiness signal worth trusting)."""
        from kafka import KafkaAdminClient

        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if not self.running():
                code = self._child.returncode if self._child is not None else "unknown"
                raise BrokerError(f"broker process exited during start-up (exit code {code}):\n{self._errors()}")
            if not _listening(self.bootstrap):  # an admin client against a closed port spends seconds probing
                time.sleep(0.1)
                continue
            try:
                admin = KafkaAdminClient(**self.admin_security.kafka_python(), bootstrap_servers=self.bootstrap,
                                         request_timeout_ms=5000,
                                         client_id="m1flow-ready")
                try:
                    admin.list_topics()
                    return
                finally:
                    admin.close()
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                last_error = exc
                time.sleep(0.5)
        raise BrokerError(f"broker not ready after {timeout:.0f}s: {last_error}")

    def _errors(self) -> str:
        """The ERROR/FATAL lines and exceptions of the broker's logs (the config dump hides them)."""
        lines = []
        for path in (self.run_dir / "broker.out", self.run_dir / "logs" / "server.log"):
            if path.exists():
                lines += [ln for ln in path.read_text(errors="replace").splitlines()
                          if " ERROR " in ln or " FATAL " in ln or "Exception" in ln]
        return "\n".join(lines[-20:]) or _tail(self.run_dir / "broker.out")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; safe to call when nothing runs."""
        pid = self._child.pid if self._child is not None and self._child.poll() is None else None
        if pid is None:
            proc = self._process()
            pid = proc.pid if proc is not None else None
        if pid is None:
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        if not _wait_gone(pid, self._child, timeout):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _wait_gone(pid, self._child, 10)
        self._child = None


def _listening(bootstrap: str) -> bool:
    """Whether the broker's port takes connections yet: a cheap test that lets readiness be checked
    every 0.1 s (kafka-python's admin client, built against a closed port, probed for ~2.5 s a try, so
    a broker up in 3 s was seen ready at 5.5 or 8: bench/broker_start.py)."""
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM binds: TIME_WAIT is free
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _wait_gone(pid: int, child: subprocess.Popen | None, timeout: float) -> bool:
    """Wait for the process to exit (reaping it if it is our child); True when it is gone."""
    if child is not None and child.pid == pid:
        try:
            child.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        return False
    return True


def _tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
