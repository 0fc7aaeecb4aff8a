"""The compose mini-cluster in secure mode (`m1flow cluster up --secure`), for real: the broker over
TLS with client certificates and the ACLs, each container with only its own identity. It comes up
healthy (every health probe presents its container's certificate), learns from prompts the host
feeds as `admin`, refuses a client without a certificate at localhost:<kafka_port>, and the reward
principal cannot produce to `policy`. The image is the session's (tests/cluster/conftest.py)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
from kafka import KafkaAdminClient
from kafka.errors import KafkaError, TopicAuthorizationFailedError

from m1flow.bus.producer import Producer
from m1flow.contracts import events
from ops.cluster import Cluster, ClusterConfig
from ops.cluster_secure import MOUNT, identity
from ops.topics_io import read_range
from tests.cluster.running import running
from tests.cluster.test_cluster import free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kafka]
SERVICES = ("svc_sandbox", "svc_reward", "svc_learner", "svc_rollout", "svc_monitor")
PHASES: dict[str, float] = {}


@pytest.fixture(scope="module")
def secure_cluster(services_image, tmp_path_factory):
    config = ClusterConfig(project=f"m1flowsecure{os.getpid()}", kafka_port=free_port(), monitor_port=free_port(),
                           dashboard_port=free_port(), run_volume=str(tmp_path_factory.mktemp("secure-run")),
                           batch_groups=2, run_id="cluster-secure", secure=True,
                           secrets_dir=str(tmp_path_factory.mktemp("secure-secrets")))
    with running(Cluster(config), PHASES, "secure cluster phases") as cluster:
        yield cluster


def list_topics(bootstrap: str, **security) -> list[str]:
    admin = KafkaAdminClient(**security, bootstrap_servers=bootstrap, request_timeout_ms=3000, bootstrap_timeout_ms=3000)
    try:
        return admin.list_topics()
    finally:
        admin.close()


def test_secure_cluster_comes_up_healthy_and_learns(secure_cluster):
    cluster = secure_cluster
    containers = {(c.service, c.replica): c for c in cluster.containers()}
    for service in (*SERVICES, "kafka"):
        replicas = [c for (s, _), c in containers.items() if s == service]
        assert replicas and all(c.state == "running" and c.health == "healthy" for c in replicas), replicas
    init = containers[("kafka_init", 1)]
    assert init.state == "exited" and "Exited (0)" in init.status, init
    # a container holds its own key and no other: reward sees its folder only, and no CA key
    reward = cluster.containers("svc_reward")[0].name
    listed = subprocess.run(["docker", "exec", reward, "ls", MOUNT], capture_output=True, text=True, check=True)
    assert listed.stdout.split() == ["ca.pem", "cert.pem", "key.pem"]

    t = time.monotonic()
    before = cluster.policy_version()  # as admin over TLS
    assert before is not None
    fed = cluster.feed(8, seed=21, group_size=4, prefix="secure")  # 2 groups: one learner step
    version = wait_for(lambda: (v := cluster.policy_version()) is not None and v > before and v, 300,
                       f"a policy version above v{before}")
    with cluster.operator():  # the groups it trained on are the ones fed, scored by the reward principal
        scored = [json.dumps(r.get("value", {})) for r in read_range(cluster.bootstrap, "scored")]
    assert all(any(prompt in row for row in scored) for prompt in fed), (fed, scored[:1])
    PHASES["8 prompts to a new version"] = time.monotonic() - t
    table = cluster.status_table()
    print(table)
    shown = re.search(r"policy v(\d+)", table)
    assert shown and int(shown.group(1)) >= version and "TLS as admin" in table


def test_a_client_without_a_certificate_is_refused(secure_cluster):
    cluster = secure_cluster
    admin = identity(cluster.config.secrets_path, "admin")
    with pytest.raises(KafkaError):  # plaintext to the TLS listener
        list_topics(cluster.bootstrap)
    with pytest.raises(KafkaError):  # TLS trusting the CA, but no client certificate
        list_topics(cluster.bootstrap, security_protocol="SSL", ssl_cafile=str(admin.ca_file))
    assert "policy" in list_topics(cluster.bootstrap, **admin.kafka_python())  # the same call, credentialed


def test_the_reward_principal_cannot_produce_to_policy(secure_cluster):
    cluster = secure_cluster
    reward = identity(cluster.config.secrets_path, "reward")  # the reward containers' own files
    producer = Producer(cluster.bootstrap, "reward-intruder", security=reward)
    try:
        producer.send("policy", b"policy", events.PolicyVersion(version=10_000, checkpoint_uri="file:///tmp/evil"))
        with pytest.raises(TopicAuthorizationFailedError):
            producer.flush(timeout=20)
    finally:
        producer._producer.close(timeout=5)
    assert (cluster.policy_version() or 0) < 10_000
