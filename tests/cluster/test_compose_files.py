"""What docker-compose.yml and its GPU override promise, read back through `docker compose config`."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from ops import ROOT
from ops.services import ON_DEMAND
from ops.services import SERVICES as LISTED

SERVICES = tuple(s.container for s in LISTED)


def config(*files: str, **env: str) -> dict:
    """The resolved file, on-demand services included (each is behind the compose profile of its name)."""
    args = [arg for f in files for arg in ("-f", str(ROOT / f))]
    env = {**os.environ, "COMPOSE_PROFILES": ",".join(ON_DEMAND), **env}
    out = subprocess.run(["docker", "compose", *args, "config", "--format", "json"], cwd=ROOT, text=True,
                         capture_output=True, env=env, check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def compose(docker_engine) -> dict:
    return config("docker-compose.yml")


def test_one_service_builds_the_image_every_service_runs(compose):
    services = compose["services"]
    # policy0 builds the services' image; sandbox_image the sandbox's run image; nothing else builds
    assert sorted(name for name, s in services.items() if "build" in s) == ["policy0", "sandbox_image"]
    image = services["policy0"]["image"]
    assert all(services[name]["image"] == image for name in (*SERVICES, "docker_proxy"))
    assert services["policy0"]["build"]["args"]["BASE_IMAGE"] == "python:3.11-slim"
    assert services["sandbox_image"]["build"]["context"].endswith("docker/sandbox")


def test_only_the_socket_proxy_holds_the_engine_socket(compose):
    services = compose["services"]
    holders = [name for name, s in services.items()
               if any(v.get("source") == "/var/run/docker.sock" for v in s.get("volumes", ()))]
    assert holders == ["docker_proxy"]
    assert set(services["docker_proxy"]["networks"]) == {"sandbox-engine"}  # svc_sandbox's network only
    assert compose["networks"]["sandbox-engine"]["internal"] is True
    assert {name for name, s in services.items() if "sandbox-engine" in (s.get("networks") or {})} == {
        "docker_proxy", "svc_sandbox"}
    settings = json.loads(services["svc_sandbox"]["environment"]["M1FLOW_DOCKER"])
    assert settings == {"engine": "tcp://docker-proxy:2375", "image": "m1flow-sandbox:latest"}


def test_base_images_and_ca_bundle_come_from_variables(docker_engine):
    got = config("docker-compose.yml", M1FLOW_BASE_IMAGE="local/python:1", M1FLOW_KAFKA_IMAGE="local/kafka:1",
                 M1FLOW_CA_BUNDLE="/etc/hostname", M1FLOW_IMAGE="m1flow:abc")
    assert got["services"]["policy0"]["build"]["args"]["BASE_IMAGE"] == "local/python:1"
    assert got["services"]["kafka"]["image"] == "local/kafka:1"
    assert got["services"]["svc_reward"]["image"] == "m1flow:abc"
    assert got["secrets"]["ca_bundle"]["file"] == "/etc/hostname"
    # the bundle reaches the build as a secret and the containers as a mounted file, never a layer
    assert got["services"]["policy0"]["build"]["secrets"][0]["source"] == "ca_bundle"
    assert all(got["services"][name]["secrets"][0]["source"] == "ca_bundle" for name in SERVICES)


def test_metrics_and_monitor_ports_are_published_on_loopback(compose):
    for name in SERVICES:
        ports = {p["target"]: p for p in compose["services"][name]["ports"]}
        assert ports[9100]["host_ip"] == "127.0.0.1" and not ports[9100].get("published"), name
    monitor = {p["target"]: p for p in compose["services"]["svc_monitor"]["ports"]}
    assert monitor[50051]["published"] == "50055" and monitor[8080]["published"] == "8080"
    assert compose["services"]["svc_monitor"]["environment"]["M1FLOW_DASHBOARD_HOST"] == "0.0.0.0"


def test_every_replica_derives_its_own_index_and_exits_when_stuck(compose):
    assert all(compose["services"][name]["environment"]["M1FLOW_REPLICA"] == "auto" for name in SERVICES)
    # Docker restarts on exits, never on a failing health check
    assert all(compose["services"][name]["environment"]["M1FLOW_EXIT_UNHEALTHY_AFTER_S"] == "120" for name in SERVICES)
    assert all(compose["services"][name]["restart"] == "unless-stopped" for name in SERVICES)


def test_every_service_gets_the_settings_file_the_helm_chart_reads(compose):
    """One source of truth: compose's shared settings are deploy/helm/m1flow/files/service.env
    (env_file), which the chart's ConfigMap loads too (tests/k8s/test_chart_render.py)."""
    from tests.k8s.chart import service_env
    shared = service_env()
    assert shared, "files/service.env is empty"
    for name in (*SERVICES, "policy0"):
        environment = compose["services"][name]["environment"]
        assert {key: environment.get(key) for key in shared} == shared, name
    # a host variable still overrides what the file marks ${NAME:-default}
    got = config("docker-compose.yml", M1FLOW_EXIT_UNHEALTHY_AFTER_S="300")
    assert got["services"]["svc_reward"]["environment"]["M1FLOW_EXIT_UNHEALTHY_AFTER_S"] == "300"


def test_gpu_override_reserves_gpus_for_rollout_and_learner_only(docker_engine):
    got = config("docker-compose.yml", "docker-compose.gpu.yml", M1FLOW_ROLLOUT_GPUS="2")
    reserved = {name: s.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices")
                for name, s in got["services"].items()}
    assert {name for name, devices in reserved.items() if devices} == {"svc_rollout", "svc_learner"}
    assert reserved["svc_rollout"][0]["driver"] == "nvidia" and reserved["svc_rollout"][0]["count"] == 2
    assert reserved["svc_learner"][0]["capabilities"] == ["gpu"]


def test_topic_layout_reaches_every_service_only_when_given(compose, docker_engine):
    assert all(compose["services"][name]["environment"].get("M1FLOW_TOPICS") is None for name in SERVICES)
    layout = '{"partitions": {"rollouts": 8}}'
    got = config("docker-compose.yml", M1FLOW_TOPICS=layout)
    assert all(got["services"][name]["environment"]["M1FLOW_TOPICS"] == layout for name in SERVICES)


def test_secure_override_gives_each_container_only_its_own_identity(docker_engine, tmp_path):
    """docker-compose.secure.yml: the broker TLS-only with client certificates and the authorizer, the
    init job before every Kafka service, each container its own folder (read-only) and a block naming it."""
    from ops.cluster_secure import MOUNT, POLICY_CONSUMERS, make_secrets

    secrets = make_secrets(tmp_path / "secrets")
    got = config("docker-compose.yml", "docker-compose.secure.yml", M1FLOW_SECRETS_DIR=str(secrets))["services"]
    kafka = got["kafka"]["environment"]
    assert "PLAINTEXT" not in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
    assert kafka["KAFKA_SSL_CLIENT_AUTH"] == "required" and kafka["KAFKA_SUPER_USERS"] == "User:broker;User:admin"
    assert kafka["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    assert "--command-config" in got["kafka"]["healthcheck"]["test"][-1]

    def mounted(name: str) -> list[str]:
        return [v["source"] for v in got[name].get("volumes", ()) if v["target"] == MOUNT]

    assert mounted("kafka") == [str(secrets / "broker")] and mounted("kafka_init") == [str(secrets / "admin")]
    for service in LISTED:
        container = got[service.container]
        assert mounted(service.container) == [str(secrets / service.name)], service.name
        assert all(v["read_only"] for v in container["volumes"] if v["target"] == MOUNT)
        if service.name != "sandbox":
            assert container["depends_on"]["kafka_init"]["condition"] == "service_completed_successfully"
        # the probe reads M1FLOW_SECURITY and presents the container's certificate
        assert container["healthcheck"]["test"][1:4] == ["python", "-m", "m1flow.runtime.probe"]
    blocks = {s.name: json.loads(got[s.container]["environment"]["M1FLOW_SECURITY"]) for s in LISTED}
    assert all(b["enabled"] and b["key_file"] == f"{MOUNT}/key.pem" for b in blocks.values())
    # who may call what over gRPC: the one table of ops/acls.py, every container (files/service.env)
    from ops.acls import grpc_methods

    assert all(json.loads(got[s.container]["environment"]["M1FLOW_GRPC_METHODS"]) == grpc_methods() for s in LISTED)
    assert grpc_methods()["/m1flow.v1.SandboxService/Execute"] == ["reward"]
    assert blocks["rollout"]["checkpoint_roots"] == ["/data/run/learner/checkpoints"]  # not the whole run volume
    assert blocks["learner"]["policy_signing_key"] == f"{MOUNT}/sign.key"
    for name in POLICY_CONSUMERS:  # every consumer of `policy` acts only on what the learner signed
        assert blocks[name]["policy_verify_key"] == f"{MOUNT}/sign.pub", name
        assert blocks[name]["checkpoint_roots"] == ["/data/run/learner/checkpoints"], name  # never the run volume
        assert (secrets / name / "sign.pub").is_file(), name
    assert all("policy_signing_key" not in b for name, b in blocks.items() if name != "learner")
    # what each folder holds on the host: its own key and no other, keys owner-only
    assert sorted(p.name for p in (secrets / "reward").iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
    assert sorted(p.name for p in (secrets / "learner").iterdir()) == ["ca.pem", "cert.pem", "key.pem", "sign.key"]
    keys = [p for p in secrets.rglob("*") if p.name.endswith((".key", "key.pem", "bundle.pem"))]
    assert keys and all(p.stat().st_mode & 0o077 == 0 for p in keys)
    assert (secrets / "ca" / "ca.key").exists() and all(str(secrets / "ca") not in mounted(name) for name in got)
