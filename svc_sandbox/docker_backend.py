"""The production backend: one throw-away Docker container per run.

The container has no network, a read-only root, a tmpfs work dir, memory/CPU/pids limits, no
capabilities, no-new-privileges, rlimits for CPU time, file size and open files, and runs as
uid 65534. Files and stdin travel as one tar archive on the container's stdin (the work dir is a
tmpfs, which `docker cp` cannot reach before start); the container unpacks it, prints the
STARTED byte and execs the program with its stdin from the archive. Output is streamed and cut at
the byte limit, the container is killed at the wall deadline, then removed.
"""
from __future__ import annotations

import io
import socket
import tarfile
import threading
import time
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from svc_sandbox.backend import WORK_DIR, BoundedOutput, RunOutcome, announce_start, classify
from svc_sandbox.limits import MB, ExecResult, Limits

_STDIN_FILE = ".m1flow-stdin"


class DockerConfig(BaseModel):
    image: str = Field("python:3.11-slim", description="image with the interpreters/compilers tasks need")
    python: str = Field("python3", description="Python interpreter inside the image")
    tmp_bytes: int = Field(16 * MB, gt=0, description="size of the private /tmp")
    ping_timeout_s: float = Field(2.0, gt=0, description="how long to wait for the engine to answer")


def _archive(files: Mapping[str, bytes], stdin: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in {**files, _STDIN_FILE: stdin}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class DockerBackend:
    name = "docker"

    def __init__(self, config: DockerConfig | None = None, client=None):
        import docker
        self.config = config or DockerConfig()
        self.python = self.config.python
        self._client = client or docker.from_env()

    @staticmethod
    def available(config: DockerConfig | None = None) -> bool:
        """True only when an engine answers a ping; an installed CLI or SDK is not enough."""
        config = config or DockerConfig()
        try:
            import docker
            client = docker.from_env(timeout=max(1, int(config.ping_timeout_s)))
            try:
                return bool(client.ping())
            finally:
                client.close()
        except Exception:  # noqa: BLE001 - any failure means: no usable engine here
            return False

    def container_kwargs(self, argv: Sequence[str], limits: Limits) -> dict:
        """Arguments of `containers.create` for one run (image and command included)."""
        from docker.types import Ulimit
        cpu = max(1, int(limits.cpu_seconds + 0.999))
        unpack = f'tar -x -f - -C {WORK_DIR} && exec "$@" < {WORK_DIR}/{_STDIN_FILE}'
        return dict(
            image=self.config.image, command=["/bin/sh", "-c", unpack, "sh", *announce_start(argv)],
            stdin_open=True, working_dir=WORK_DIR, user=f"{limits.uid}:{limits.uid}",
            network_mode="bridge" if limits.network else "none", read_only=True,
            tmpfs={WORK_DIR: f"rw,exec,nosuid,nodev,size={limits.work_dir_bytes},mode=1777",
                   "/tmp": f"rw,nosuid,nodev,size={self.config.tmp_bytes},mode=1777"},
            mem_limit=limits.memory_bytes, memswap_limit=limits.memory_bytes,
            nano_cpus=int(limits.cpus * 1e9), pids_limit=limits.max_processes,
            cap_drop=["ALL"], security_opt=["no-new-privileges"], ipc_mode="none",
            environment={"HOME": WORK_DIR, "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"},
            ulimits=[Ulimit(name="cpu", soft=cpu, hard=cpu + 1), Ulimit(name="core", soft=0, hard=0),
                     Ulimit(name="fsize", soft=limits.max_file_bytes, hard=limits.max_file_bytes),
                     Ulimit(name="nofile", soft=limits.max_open_files, hard=limits.max_open_files)])

    def run(self, argv: Sequence[str], files: Mapping[str, bytes], stdin: bytes,
            limits: Limits) -> ExecResult:
        import docker
        try:
            container = self._client.containers.create(**self.container_kwargs(argv, limits))
        except docker.errors.DockerException as err:
            return ExecResult.sandbox_error(f"docker: {err}")
        try:
            return self._run(container, _archive(files, stdin), limits)
        except (docker.errors.DockerException, OSError) as err:
            return ExecResult.sandbox_error(f"docker: {type(err).__name__}: {err}")
        finally:
            try:
                container.remove(force=True)
            except docker.errors.DockerException:
                pass

    def _run(self, container, archive: bytes, limits: Limits) -> ExecResult:
        stdin = container.attach_socket(params={"stdin": 1, "stream": 1})
        output = container.attach(stdout=True, stderr=True, stream=True, logs=True, demux=True)
        start = time.monotonic()
        container.start()
        raw = getattr(stdin, "_sock", stdin)
        raw.sendall(archive)
        raw.shutdown(socket.SHUT_WR)
        stdin.close()
        reader = _StreamReader(output, limits.max_output_bytes, on_overflow=container.kill)
        thread = threading.Thread(target=reader.read, daemon=True)
        thread.start()
        thread.join(limits.wall_seconds)
        timed_out = thread.is_alive() and not reader.overflow
        if thread.is_alive():
            container.kill()
            thread.join(5)
        state = container.wait(timeout=10)
        container.reload()
        return classify(RunOutcome(
            started=reader.started, timed_out=timed_out, overflow=reader.overflow,
            exit_code=state.get("StatusCode"), stdout=bytes(reader.stdout), stderr=bytes(reader.stderr),
            wall=time.monotonic() - start, oom_killed=bool(container.attrs["State"].get("OOMKilled")),
            note="cpu time and memory peak are not measured by the docker backend"), limits)


class _StreamReader(BoundedOutput):
    """Consumes the demuxed attach stream, keeping at most `limit` bytes per stream."""

    def __init__(self, stream, limit: int, on_overflow):
        super().__init__(limit)
        self.stream, self.on_overflow = stream, on_overflow

    def _add(self, buffer: bytearray, data: bytes) -> None:
        if self.add(buffer, data):
            self.on_overflow()

    def read(self) -> None:
        for out, err in self.stream:
            if out:
                self._add(self.stdout, out)
            if err:
                self._add(self.stderr, err)
            if self.overflow:
                return
