"""The production backend: one throw-away Docker container per run.

The container has no network, a read-only root, a tmpfs work dir owned by the run's own uid,
memory/CPU/pids limits, no capabilities, no-new-privileges, the engine's default seccomp profile,
rlimits for CPU time, file size and open files, and the engine's init (tini) as PID 1, so the
program is an ordinary process that gets SIGXCPU at its CPU limit and whose orphans are reaped.
The rlimit is per process, so a run that forks N busy processes would get N budgets: the
container's CPU time, read while it runs from its cgroup (backends/cgroups.py; the engine's stats
where the engine is not on this host), is the run's total, and the run is killed when that total
reaches the limit.
Files and stdin travel as one tar archive on the container's stdin (the work dir is a tmpfs,
which `docker cp` cannot reach before start); the container unpacks it, prints the STARTED byte
and execs the program with its stdin from the archive. Output is streamed and cut at the byte
limit; the reader keeps draining (and dropping) past it, because an engine whose attach stream
is not read cannot kill the container. The container is killed at the wall deadline or when
the caller stops waiting, then removed.
"""
from __future__ import annotations

import io
import socket
import tarfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from svc_sandbox.api import MB, ExecResult, Limits
from svc_sandbox.backends.base import (WORK_DIR, BoundedOutput, Cancel, RunOutcome, UidPool, UidRange,
                                       announce_start, classify)
from svc_sandbox.backends.cgroups import RunCgroup

_STDIN_FILE = ".m1flow-stdin"
SANDBOX_LABEL = "m1flow.sandbox"  # on every run container: what the socket proxy lets us touch


class DockerConfig(BaseModel):
    image: str = Field("m1flow-sandbox:latest",
                       description="run image with the toolchains tasks need (docker/sandbox/Dockerfile)")
    python: str = Field("/usr/bin/python3", description="Python interpreter inside the image (with pytest)")
    engine: str = Field("", description="engine or socket-proxy URL (unix:///path, tcp://host:port); "
                                        "empty: DOCKER_HOST or the default socket")
    tmp_bytes: int = Field(16 * MB, gt=0, description="size of the private /tmp")
    ping_timeout_s: float = Field(2.0, gt=0, description="how long to wait for the engine to answer")
    kill_timeout_s: float = Field(10.0, gt=0, description="how long a killed container may take to stop")
    uids: UidRange = Field(default_factory=UidRange, description="each run's own uid comes from here")
    stats_poll_s: float = Field(0.25, gt=0, description="how often the run's CPU time is read from the engine's "
                                                         "stats (a remote engine; they publish about once a second)")
    cgroup_poll_s: float = Field(0.02, gt=0, description="how often it is read from the run's cgroup files (a local "
                                                          "engine); a run may pass its CPU limit by this times its CPUs")


def _archive(files: Mapping[str, bytes], stdin: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in {**files, _STDIN_FILE: stdin}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _client(config: DockerConfig, timeout: float | None = None):
    import docker
    kwargs = {"timeout": max(1, int(timeout))} if timeout else {}
    if config.engine:
        return docker.DockerClient(base_url=config.engine, version="auto", **kwargs)
    return docker.from_env(**kwargs)


class DockerBackend:
    name = "docker"

    def __init__(self, config: DockerConfig | None = None, client=None):
        self.config = config or DockerConfig()
        self.python = self.config.python
        self.uids = UidPool(self.config.uids)
        self._client = client or _client(self.config)

    @staticmethod
    def available(config: DockerConfig | None = None) -> str:
        """Empty when an engine answers and holds the run image, else why not (a CLI or SDK is not enough)."""
        config = config or DockerConfig()
        try:
            client = _client(config, config.ping_timeout_s)
            try:
                client.ping()
                client.images.get(config.image)
            finally:
                client.close()
        except Exception as err:  # noqa: BLE001 - any failure means: no usable engine or image here
            return f"{type(err).__name__}: {err}"[:300]
        return ""

    def container_kwargs(self, argv: Sequence[str], limits: Limits, uid: int, env_dir: Path | None = None) -> dict:
        """Arguments of `containers.create` for one run (image and command included); env_dir: a repository
        environment bound read-only at its own path (built over the image's interpreter, on the engine's host)."""
        from docker.types import Ulimit
        cpu = max(1, int(limits.cpu_seconds + 0.999))
        unpack = f'cd {WORK_DIR} && tar -x -f - && exec "$@" < {WORK_DIR}/{_STDIN_FILE}'
        owned = f"uid={uid},gid={uid},mode=0700"  # a tmpfs owned by the run: it can write its own dir
        kwargs = dict(
            image=self.config.image, command=["/bin/sh", "-c", unpack, "sh", *announce_start(argv)],
            stdin_open=True, working_dir="/", user=f"{uid}:{uid}", init=True,
            network_mode="bridge" if limits.network else "none", read_only=True, labels={SANDBOX_LABEL: "run"},
            tmpfs={WORK_DIR: f"rw,exec,nosuid,nodev,size={limits.work_dir_bytes},{owned}",
                   "/tmp": f"rw,nosuid,nodev,size={self.config.tmp_bytes},{owned}"},
            mem_limit=limits.memory_bytes, memswap_limit=limits.memory_bytes,
            nano_cpus=int(limits.cpus * 1e9), pids_limit=limits.max_processes,
            cap_drop=["ALL"], security_opt=["no-new-privileges"], ipc_mode="none",
            environment={"HOME": WORK_DIR, "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
                         "PATH": "/usr/local/bin:/usr/bin:/bin"},
            ulimits=[Ulimit(name="cpu", soft=cpu, hard=cpu + 1), Ulimit(name="core", soft=0, hard=0),
                     Ulimit(name="fsize", soft=limits.max_file_bytes, hard=limits.max_file_bytes),
                     Ulimit(name="nofile", soft=limits.max_open_files, hard=limits.max_open_files)])
        if env_dir is not None:  # the socket proxy lets it through only under an allowed root (--allow-env-root)
            kwargs["volumes"] = {str(env_dir): {"bind": str(env_dir), "mode": "ro"}}
        return kwargs

    def run(self, argv: Sequence[str], files: Mapping[str, bytes], stdin: bytes,
            limits: Limits, cancel: Cancel | None = None, env_dir: Path | None = None) -> ExecResult:
        import docker
        with self.uids.lease() as uid:
            try:
                container = self._client.containers.create(**self.container_kwargs(argv, limits, uid, env_dir))
            except docker.errors.DockerException as err:
                return ExecResult.sandbox_error(f"docker: {err}")
            try:
                return self._run(container, _archive(files, stdin), limits, cancel)
            except (docker.errors.DockerException, OSError) as err:
                return ExecResult.sandbox_error(f"docker: {type(err).__name__}: {err}")
            finally:
                try:
                    container.remove(force=True)
                except docker.errors.DockerException:
                    pass

    def _run(self, container, archive: bytes, limits: Limits, cancel: Cancel | None) -> ExecResult:
        stdin = container.attach_socket(params={"stdin": 1, "stream": 1})
        output = container.attach(stdout=True, stderr=True, stream=True, logs=True, demux=True)
        reader = _StreamReader(output, limits.max_output_bytes)
        try:
            start = time.monotonic()
            container.start()
            raw = getattr(stdin, "_sock", stdin)
            raw.sendall(archive)
            raw.shutdown(socket.SHUT_WR)
        finally:
            stdin.close()
        thread = threading.Thread(target=reader.read, daemon=True, name="docker-output")
        thread.start()
        meter = _RunMeter(container, limits.cpu_seconds, self.config, reader.wake)
        meter.start()
        stopped = reader.wait(start + limits.wall_seconds, cancel)
        meter.stop()
        if stopped or reader.overflow or meter.exceeded:
            _kill(container)
        state = container.wait(timeout=self.config.kill_timeout_s)
        thread.join(self.config.kill_timeout_s)
        container.reload()
        return classify(RunOutcome(
            started=reader.started, timed_out=stopped == "wall", overflow=reader.overflow,
            exit_code=state.get("StatusCode"), stdout=bytes(reader.stdout), stderr=bytes(reader.stderr),
            wall=time.monotonic() - start, oom_killed=bool(container.attrs["State"].get("OOMKilled")),
            cancelled=stopped == "cancel", cpu=meter.cpu, memory_peak=meter.memory_peak,
            cpu_exceeded=meter.exceeded and not stopped,
            note=f"CPU time and memory peak sampled {meter.source}"), limits)


def _kill(container) -> None:
    """Kill a run that may have just ended on its own (the engine answers 409: not running)."""
    import docker
    try:
        container.kill()
    except docker.errors.APIError as err:
        if err.status_code != 409:
            raise


class _RunMeter:
    """The whole container's CPU time and memory peak, sampled while it runs: from its cgroup files
    where the engine is on this host, else from the engine's stats.

    Sets `exceeded` and wakes the waiting run when the CPU time reaches the limit. A stats call on a
    container that has exited reads zeros (and its cgroup is gone), so the last sample taken while it
    ran is what counts.
    """

    def __init__(self, container, cpu_limit: float, config: DockerConfig, wake: threading.Event):
        self.container, self.cpu_limit, self.config, self.wake = container, cpu_limit, config, wake
        self.poll_s = config.stats_poll_s
        self.source = f"from the engine's stats every {config.stats_poll_s}s"
        self.cpu = 0.0
        self.memory_peak = 0
        self.exceeded = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="docker-meter")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.poll_s + 5.0)

    def _run(self) -> None:
        import docker
        try:
            self.container.reload()
            cgroup = RunCgroup.of_container(self.container.id, int(self.container.attrs["State"].get("Pid") or 0))
        except (docker.errors.DockerException, OSError):
            cgroup = None
        if cgroup is not None:
            self.poll_s = self.config.cgroup_poll_s
            self.source = f"from the run's cgroup every {self.poll_s}s"
        while not self._stop.is_set():
            try:
                cpu, memory = cgroup.usage() if cgroup is not None else self._engine_stats()
            except (docker.errors.DockerException, OSError, ValueError):
                return  # the container is gone: the run is over
            self.cpu, self.memory_peak = max(self.cpu, cpu), max(self.memory_peak, memory)
            if self.cpu >= self.cpu_limit:
                self.exceeded = True
                self.wake.set()
                return
            self._stop.wait(self.poll_s)

    def _engine_stats(self) -> tuple[float, int]:
        stats = self.container.stats(stream=False, one_shot=True)
        memory = stats.get("memory_stats", {})
        return (stats.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage", 0) / 1e9,
                int(memory.get("max_usage") or memory.get("usage") or 0))


class _StreamReader(BoundedOutput):
    """Consumes the demuxed attach stream to its end, keeping at most `limit` bytes per stream."""

    def __init__(self, stream, limit: int):
        super().__init__(limit)
        self.stream = stream
        self.done = threading.Event()  # the stream ended
        self.wake = threading.Event()  # the stream ended or overflowed

    def read(self) -> None:
        try:
            for out, err in self.stream:
                if (out and self.add(self.stdout, out)) or (err and self.add(self.stderr, err)):
                    self.wake.set()
        finally:
            self.done.set()
            self.wake.set()

    def wait(self, deadline: float, cancel: Cancel | None) -> str:
        """"" when the stream ended or overflowed, else why we must stop the run: "wall" or "cancel"."""
        while not self.wake.wait(min(max(deadline - time.monotonic(), 0.0), Cancel.POLL_S)):
            if cancel is not None and cancel.is_set():
                return "cancel"
            if time.monotonic() >= deadline:
                return "wall"
        return ""
