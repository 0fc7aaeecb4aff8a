"""The Docker backend, where a Docker engine answers (skipped with the reason elsewhere)."""
from __future__ import annotations

import pytest

from m1flow.status import Status
from svc_sandbox.api import MB, ExecRequest, Limits
from svc_sandbox.backends import choose_backend
from svc_sandbox.backends.docker import DockerBackend
from svc_sandbox.sandbox import Sandbox

needs_engine = pytest.mark.skipif(not DockerBackend.available(),
                                  reason="no Docker engine answers a ping here (the CLI alone is not enough)")
LIMITS = Limits(cpu_seconds=1, wall_seconds=5, memory_bytes=128 * MB, max_processes=32,
                max_output_bytes=64 * 1024)


@pytest.fixture(scope="module")
def docker_sandbox() -> Sandbox:
    return Sandbox(DockerBackend())


def run(sandbox: Sandbox, code: str, **kw):
    return sandbox(ExecRequest(code=code, limits=LIMITS, **kw))


@needs_engine
def test_auto_choice_prefers_docker():
    assert choose_backend("auto").name == "docker"


@needs_engine
def test_stdin_files_and_exit_codes(docker_sandbox):
    r = run(docker_sandbox, "import os\nprint(input()[::-1], open('data.txt').read(), os.getuid())",
            stdin=b"abc\n", files={"data.txt": b"hi"})
    assert (r.status, r.stdout_text) == (Status.OK, "cba hi 65534\n"), r
    r = run(docker_sandbox, "raise SystemExit(4)")
    assert (r.status, r.exit_code) == (Status.RUNTIME_ERROR, 4)


@needs_engine
def test_limits(docker_sandbox):
    assert run(docker_sandbox, "while True: pass").status is Status.TIME_LIMIT
    assert run(docker_sandbox, "import time\ntime.sleep(60)").status is Status.TIME_LIMIT
    assert run(docker_sandbox, "x = bytearray(1 << 30)\nx[::4096] = b'1' * len(x[::4096])").status is Status.MEMORY_LIMIT
    r = run(docker_sandbox, "import sys\nwhile True: sys.stdout.write('y' * 65536)")
    assert r.status is Status.OUTPUT_LIMIT and len(r.stdout) == LIMITS.max_output_bytes


@needs_engine
def test_no_network_and_read_only_root(docker_sandbox):
    code = """
import socket
try:
    socket.create_connection(("1.1.1.1", 53), timeout=1)
    print("connected")
except OSError:
    print("blocked")
try:
    open("/usr/pwned", "w")
except OSError:
    print("read-only")
"""
    assert run(docker_sandbox, code).stdout_text == "blocked\nread-only\n"


def test_container_spec_is_accepted_by_the_docker_sdk():
    """Runs without an engine: the SDK itself validates every create() argument we pass."""
    import docker
    from docker.models.containers import _create_container_args

    api = docker.APIClient(base_url="unix:///nonexistent/docker.sock", version="1.44")
    backend = DockerBackend(client=docker.DockerClient(base_url="unix:///nonexistent/docker.sock", version="1.44"))
    kwargs = backend.container_kwargs(["python3", "main.py"], LIMITS)
    args = _create_container_args({**kwargs, "version": api._version})  # what containers.create does
    config = api.create_container_config(**args)
    host = config["HostConfig"]
    assert config["NetworkDisabled"] is False and host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"]
    assert host["Memory"] == LIMITS.memory_bytes and host["PidsLimit"] == LIMITS.max_processes
    assert config["User"] == "65534:65534" and "/sandbox" in host["Tmpfs"]
    assert config["Cmd"][-3:] == ["sh", "python3", "main.py"]
