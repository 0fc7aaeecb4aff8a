"""The Docker socket proxy: the backend works through it; nothing that gives root on the host does.

The policy is checked on create bodies without an engine; the proxy program itself
(`python -m svc_sandbox.docker_proxy`) is checked against a real engine where one answers.
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from m1flow.status import Status
from svc_sandbox.api import ExecRequest, Limits
from svc_sandbox.backends.docker import SANDBOX_LABEL, DockerBackend, DockerConfig
from svc_sandbox.docker_proxy import Policy, Refused, check_create
from svc_sandbox.sandbox import Sandbox
from tests.sandbox.test_docker import LIMITS, run_containers, run_image  # noqa: F401  (fixture)

ROOT = Path(__file__).parents[2]
IMAGE = "m1flow-sandbox:latest"
HOSTILE_HOST_CONFIG = {  # HostConfig changes that would give a run the host
    "Privileged": True,
    "Binds": ["/:/host"],
    "Mounts": [{"Type": "bind", "Source": "/", "Target": "/host"}],
    "Devices": [{"PathOnHost": "/dev/sda", "PathInContainer": "/dev/sda", "CgroupPermissions": "rwm"}],
    "DeviceRequests": [{"Count": -1, "Capabilities": [["gpu"]]}],
    "CapAdd": ["SYS_ADMIN"],
    "NetworkMode": "host",
    "PidMode": "host",
    "IpcMode": "host",
    "UTSMode": "host",
    "UsernsMode": "host",
    "CgroupnsMode": "host",
    "SecurityOpt": ["seccomp=unconfined"],
    "MaskedPaths": [],
    "ReadonlyPaths": [],
    "VolumesFrom": ["kafka"],
    "Sysctls": {"kernel.core_pattern": "|/tmp/x"},
    "GroupAdd": ["docker"],
    "CgroupParent": "/",
    "Runtime": "runc-unconfined",
    "ReadonlyRootfs": False,
    "CapDrop": [],
    "PortBindings": {"22/tcp": [{"HostPort": "2222"}]},
}


def backend_body() -> dict:
    """The create body the Docker backend sends, as the SDK builds it."""
    import docker
    from docker.models.containers import _create_container_args
    api = docker.APIClient(base_url="unix:///nonexistent/docker.sock", version="1.41")
    backend = DockerBackend(client=docker.DockerClient(base_url="unix:///nonexistent/docker.sock", version="1.41"))
    kwargs = backend.container_kwargs(["python3", "main.py"], Limits(), 2_000_000_001)
    return api.create_container_config(**_create_container_args({**kwargs, "version": "1.41"}))


def test_the_backends_create_body_passes():
    check_create(backend_body(), [IMAGE], SANDBOX_LABEL)


@pytest.mark.parametrize("key", sorted(HOSTILE_HOST_CONFIG))
def test_a_create_asking_for_the_host_is_refused(key):
    body = copy.deepcopy(backend_body())
    body["HostConfig"][key] = HOSTILE_HOST_CONFIG[key]
    with pytest.raises(Refused):
        check_create(body, [IMAGE], SANDBOX_LABEL)


@pytest.mark.parametrize("change", [{"Image": "alpine"}, {"User": ""}, {"User": "0:0"}, {"User": "root"},
                                    {"User": "1000:0"}, {"Labels": {}}, {"Volumes": {"/data": {}}},
                                    {"ExposedPorts": {"22/tcp": {}}}, {"Healthcheck": {"Test": ["CMD", "sh"]}}])
def test_a_create_with_another_image_root_or_extras_is_refused(change):
    with pytest.raises(Refused):
        check_create({**backend_body(), **change}, [IMAGE], SANDBOX_LABEL)


def test_only_the_backends_calls_on_its_own_containers_go_through():
    policy = Policy(frozenset([IMAGE]))
    mine, other = "a" * 64, "b" * 64
    policy.created_one(mine)
    assert policy.route("GET", "/_ping") == policy.route("GET", "/v1.41/version") == "info"
    assert policy.route("GET", f"/v1.41/images/{IMAGE}/json") == "info"
    assert policy.route("POST", "/v1.41/containers/create") == "create"
    for verb in ("attach", "start", "kill", "wait"):
        assert policy.route("POST", f"/v1.41/containers/{mine}/{verb}") == "container"
    assert policy.route("GET", f"/v1.41/containers/{mine}/json") == "container"
    assert policy.route("DELETE", f"/v1.41/containers/{mine}") == "remove"
    for method, path in [("POST", f"/v1.41/containers/{other}/kill"), ("GET", f"/containers/{other}/json"),
                         ("POST", f"/v1.41/containers/{mine}/exec"), ("GET", "/v1.41/containers/json"),
                         ("POST", "/v1.41/images/create"), ("GET", "/v1.41/images/alpine/json"),
                         ("POST", "/v1.41/build"), ("POST", f"/v1.41/containers/{mine}/archive"),
                         ("PUT", f"/v1.41/containers/{mine}/archive"), ("POST", "/v1.41/volumes/create"),
                         ("GET", f"/v1.41/containers/{mine}/../../images/json"), ("POST", "/session")]:
        with pytest.raises(Refused):
            policy.route(method, path)
    policy.removed(mine)
    with pytest.raises(Refused):
        policy.route("POST", f"/v1.41/containers/{mine}/start")


@pytest.fixture(scope="module")
def proxy(run_image, tmp_path_factory):  # noqa: F811
    """The proxy program on a unix socket, allowing only the run image."""
    socket_path = tmp_path_factory.mktemp("proxy") / "docker.sock"
    proc = subprocess.Popen([sys.executable, "-m", "svc_sandbox.docker_proxy", "--listen", f"unix://{socket_path}",
                             "--engine", "unix:///var/run/docker.sock", "--allow-image", run_image],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    give_up = time.monotonic() + 30
    while not socket_path.exists() and time.monotonic() < give_up and proc.poll() is None:
        time.sleep(0.05)
    assert socket_path.exists(), "the proxy did not start"
    yield f"unix://{socket_path}"
    proc.terminate()
    proc.wait(10)


def test_the_backend_runs_through_the_proxy(proxy, run_image):  # noqa: F811
    config = DockerConfig(image=run_image, engine=proxy)
    assert DockerBackend.available(config) == ""
    sandbox = Sandbox(DockerBackend(config))
    r = sandbox(ExecRequest(code="print(input()[::-1])", stdin=b"abc\n", limits=LIMITS))
    assert (r.status, r.stdout) == (Status.OK, b"cba\n"), r
    r = sandbox(ExecRequest(code="import sys\nwhile True: sys.stdout.write('y' * 65536)", limits=LIMITS))
    assert r.status is Status.OUTPUT_LIMIT, r
    r = sandbox(ExecRequest(language="c", code='#include <stdio.h>\nint main(){puts("hi");}', limits=LIMITS))
    assert (r.status, r.stdout) == (Status.OK, b"hi\n"), r


def test_hostile_calls_through_the_proxy_are_refused_and_create_nothing(proxy, run_image):  # noqa: F811
    import docker
    through, engine = docker.DockerClient(base_url=proxy, version="auto"), docker.from_env()
    token = f"m1flow-hostile-{time.monotonic_ns()}"
    outsider = engine.containers.create(run_image, ["sleep", "30"])
    try:
        hostile = [dict(privileged=True), dict(volumes={"/": {"bind": "/host", "mode": "rw"}}),
                   dict(network_mode="host"), dict(pid_mode="host"), dict(cap_add=["SYS_ADMIN"]),
                   dict(devices=["/dev/null:/dev/x:rwm"]), dict(security_opt=["seccomp=unconfined"])]
        safe = dict(user="2000000000", read_only=True, cap_drop=["ALL"], mem_limit="64m", pids_limit=8,
                    network_mode="none", security_opt=["no-new-privileges"], labels={SANDBOX_LABEL: "run"})
        through.containers.create(run_image, ["true", token], **safe).remove()  # the same, minus the hostile part
        for kwargs in hostile:
            with pytest.raises(docker.errors.APIError, match="refused"):
                through.containers.create(run_image, ["true", token], **{**safe, **kwargs})
        with pytest.raises(docker.errors.APIError, match="refused"):
            through.containers.get(outsider.id)
        with pytest.raises(docker.errors.APIError, match="refused"):
            through.api.kill(outsider.id)
        with pytest.raises(docker.errors.APIError, match="refused"):
            through.containers.list()
        with pytest.raises(docker.errors.APIError, match="refused"):
            through.images.pull("alpine")
    finally:
        outsider.remove(force=True)
        through.close()
    assert run_containers(token) == []
    engine.close()
