"""The mini-cluster of docker-compose.yml, for real: built, brought up healthy, the loop run in
containers, scaled, then chaos (docker kill of services and the broker) with the guarantees checked
from the topics and the learner's checkpoints. One cluster for the module; tests run in order.
Sized for 2 cores: the whole module takes about 10 minutes once the image exists."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request

import grpc
import pytest

from m1flow.bus.admin import admin_client
from ops.cluster import Cluster, ClusterConfig
from tests.cluster.running import running
from m1flow.contracts import rpc, rpc_grpc

pytestmark = [pytest.mark.slow, pytest.mark.kafka]
SERVICES = ("svc_sandbox", "svc_reward", "svc_learner", "svc_rollout", "svc_monitor")  # with /metrics
BATCH_GROUPS = 4
PHASES: dict[str, float] = {}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 2.0):  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def chaos_service_env() -> dict[str, str]:
    """The service settings the chaos run of `m1flow up` uses to recover within a test's budget."""
    from ops.chaos.run import ChaosConfig

    return ChaosConfig().env


@pytest.fixture(scope="module")
def cluster(services_image, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cluster-run")
    config = ClusterConfig(project=f"m1flowtest{os.getpid()}", kafka_port=free_port(), monitor_port=free_port(),
                           dashboard_port=free_port(), run_volume=str(run_dir), batch_groups=BATCH_GROUPS,
                           run_id="cluster-test", service_env=chaos_service_env())
    cluster = Cluster(config)
    t = time.monotonic()
    cluster.prepare()
    PHASES["engine, Compose, base images"] = time.monotonic() - t
    PHASES["image build (session)"] = services_image
    with running(cluster, PHASES, "cluster test phases"):
        yield cluster


def wait_version(cluster: Cluster, above: int, timeout: float = 300) -> int:
    return wait_for(lambda: (v := cluster.policy_version()) is not None and v > above and v, timeout,
                    f"a policy version above v{above}")


def test_cluster_comes_up_healthy_and_runs_the_loop(cluster):
    containers = {(c.service, c.replica): c for c in cluster.containers()}
    for service in SERVICES:
        replicas = [c for (s, _), c in containers.items() if s == service]
        assert replicas and all(c.state == "running" and c.health == "healthy" for c in replicas), replicas
    assert containers[("kafka", 1)].health == "healthy"
    assert containers[("policy0", 1)].state == "exited" and "Exited (0)" in containers[("policy0", 1)].status
    dangling = subprocess.run(["docker", "images", "-q", "-f", "dangling=true", "-f", "label=org.m1flow.image=services"],
                              capture_output=True, text=True, check=True).stdout.split()
    assert dangling == [], "a build left a dangling copy of the services' image"

    for c in containers.values():  # every replica's /metrics answers on the host
        if c.service in SERVICES:
            with urllib.request.urlopen(c.metrics_url, timeout=10) as page:
                assert b"# TYPE" in page.read(), c.name
    # the monitor listens on the containers' network: its dashboard and Report want the token it made
    dashboard = f"http://127.0.0.1:{cluster.config.dashboard_port}/"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(dashboard, timeout=10)
    assert refused.value.code == 401
    token = cluster.access_token()
    request = urllib.request.Request(dashboard, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as page:
        assert page.status == 200 and b"<html" in page.read().lower()  # the monitor's dashboard

    t = time.monotonic()
    cluster.feed(24, seed=11, group_size=4, prefix="up")
    version = wait_version(cluster, 1)
    PHASES["24 prompts to v2"] = time.monotonic() - t
    with grpc.insecure_channel(f"127.0.0.1:{cluster.config.monitor_port}") as channel:
        stub = rpc_grpc.MonitorServiceStub(channel)
        with pytest.raises(grpc.RpcError) as unauthenticated:
            stub.Report(rpc.ReportRequest(), timeout=10)
        assert unauthenticated.value.code() == grpc.StatusCode.UNAUTHENTICATED
        auth = (("authorization", f"Bearer {token}"),)
        rows = wait_for(lambda: list(stub.Report(rpc.ReportRequest(), timeout=10, metadata=auth).rows),
                        120, "the monitor's report to have rows")
    assert max(r.policy_version for r in rows) >= 0 and sum(r.groups for r in rows) > 0
    table = cluster.status_table()
    print(table)
    shown = re.search(r"policy v(\d+)", table)
    assert shown and int(shown.group(1)) >= version
    assert all(service in table for service in SERVICES)


SANDBOX_CALL = """
from svc_sandbox.api import ExecRequest
from svc_sandbox.client import SandboxClient
client = SandboxClient("sandbox:50051")
r = client(ExecRequest(language="c", code='#include <stdio.h>\\nint main(){printf("%d", 6*7);return 0;}'))
print(r.status.name, r.stdout.decode())
"""


def test_reward_reaches_the_sandbox_whose_runs_go_through_the_socket_proxy(cluster):
    """A C program compiled and run in the sandbox's run image, called from a reward container the way
    the code verifier calls it: svc_reward -> svc_sandbox (no socket) -> docker_proxy -> engine."""
    reward = cluster.containers("svc_reward")[0].name
    out = subprocess.run(["docker", "exec", reward, "python", "-c", SANDBOX_CALL], capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.split() == ["OK", "42"], out.stdout + out.stderr
    proxy = cluster.containers("docker_proxy")[0]
    assert proxy.state == "running" and proxy.health == "healthy"
    mounts = subprocess.run(["docker", "inspect", "-f", "{{range .Mounts}}{{.Source}} {{end}}",
                             cluster.containers("svc_sandbox")[0].name], capture_output=True, text=True).stdout
    assert "docker.sock" not in mounts


def members(bootstrap: str, group: str) -> dict[str, list[int]]:
    """client id -> partitions assigned, for one consumer group."""
    admin = admin_client(bootstrap)
    try:
        described = admin.describe_groups([group])[group]
    finally:
        admin.close()
    return {m["client_id"]: sorted(p for a in m["member_assignment"]["assigned_partitions"] for p in a["partitions"])
            for m in described["members"]}


def replica_in_logs(container: str) -> set[int]:
    logs = subprocess.run(["docker", "logs", container], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True).stdout
    return {json.loads(line)["replica"] for line in logs.splitlines() if line.startswith("{") and '"replica"' in line}


def test_scaled_replicas_spread_partitions_and_the_loop_goes_on(cluster):
    t = time.monotonic()
    cluster.up(scale={"svc_reward": 3, "svc_rollout": 3}, build=False)
    PHASES["--scale reward=3 rollout=3"] = time.monotonic() - t
    for service, client, group in (("svc_reward", "reward", "m1flow-reward"), ("svc_rollout", "rollout", "m1flow-rollout")):
        replicas = cluster.containers(service)
        assert [c.replica for c in replicas] == [1, 2, 3]
        for c in replicas:  # each replica logs its own index, the one in its container's name
            assert replica_in_logs(c.name) == {c.replica}, c.name
        got = wait_for(lambda: (m := members(cluster.bootstrap, group)) and len(m) == 3 and all(m.values()) and m, 120,
                       f"3 members of {group} sharing the partitions")
        assert set(got) == {f"{client}-1", f"{client}-2", f"{client}-3"}  # distinct client ids
        assert sorted(p for parts in got.values() for p in parts) == [0, 1, 2, 3]
    before = cluster.policy_version() or 0
    t = time.monotonic()
    cluster.feed(24, seed=12, group_size=4, prefix="scaled")
    wait_version(cluster, before)
    PHASES["24 prompts, scaled"] = time.monotonic() - t
    cluster.up(scale={"svc_reward": 2, "svc_rollout": 2}, build=False)  # back to compose's own counts


@pytest.mark.timeout(1500)
def test_chaos_at_cluster_scale(cluster):
    from ops.chaos.cluster import ClusterChaos, ClusterChaosConfig

    t = time.monotonic()
    report = ClusterChaos(cluster, cluster.config.run_volume, BATCH_GROUPS, ClusterChaosConfig(seed=3)).run()
    PHASES["chaos (2 cycles) + settle"] = time.monotonic() - t
    assert report.ok, report.table()
