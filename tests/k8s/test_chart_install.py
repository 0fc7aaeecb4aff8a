"""The chart installed on the k8s tier's real API server (tests/k8s/conftest.py's `kube`: etcd,
kube-apiserver, controller-manager, scheduler, kwok nodes cpu-node-0 and gpu-node-0/1 with 8
nvidia.com/gpu each, the Strimzi, KEDA and JobSet CRDs): `helm install --wait`, every pod on its
pool, a Pending pod once the GPUs run out, and the server's validation of every object the default
values render (the JobSet and Strimzi CRs included).

No operator runs there, so the Strimzi and KEDA objects are only stored, and the learner is
installed as plain Indexed Jobs (`learner.kind=Job`: the built-in Job controller makes its rank
pods) so that its ranks really get scheduled; the JobSet form is checked with --dry-run=server.
kwok pods become Ready without running an image.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.k8s.chart import CHART, set_args, template

from tests.k8s.kube import until

NS = "m1flow-chart"
STORAGE_CLASS = "m1flow-chart-rwx"
GPU = "nvidia.com/gpu"
VALUES = {
    "persistence.storageClass": STORAGE_CLASS,
    "learner.kind": "Job",
    "rollout.autoscaling.minReplicaCount": 2,  # no KEDA runs: the StatefulSet keeps this count
    "source.sources": [{"name": "arith", "generator": "arith", "weight": 1.0}],
}
# A statically provisioned ReadWriteMany volume for the run claim (the test cluster has no
# provisioner; the controller-manager's binder binds the claim to it; kwok mounts nothing).
RUN_PV = {
    "apiVersion": "v1", "kind": "PersistentVolume",
    "metadata": {"name": "m1flow-chart-run"},
    "spec": {"capacity": {"storage": "200Gi"}, "accessModes": ["ReadWriteMany"],
             "storageClassName": STORAGE_CLASS, "persistentVolumeReclaimPolicy": "Retain",
             "nfs": {"server": "nfs.invalid", "path": "/m1flow"}},
}


def pods(kube) -> list[dict]:
    out = kube.kubectl("-n", NS, "get", "pods", "-l", "app.kubernetes.io/instance=m1flow", "-o", "json")
    return json.loads(out.stdout)["items"]


def node_pools(kube) -> dict[str, str]:
    nodes = json.loads(kube.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"].get("m1flow.io/pool", "") for n in nodes}


@pytest.fixture(scope="module")
def release(kube):
    kube.kubectl("create", "namespace", NS)
    kube.kubectl("apply", "-f", "-", input=json.dumps(RUN_PV))
    try:
        start = time.monotonic()
        kube.helm("install", "m1flow", str(CHART), "--namespace", NS, *set_args(VALUES),
                  "--wait", "--timeout", "10m", timeout=900)
        print(f"helm install --wait: {time.monotonic() - start:.1f}s to every workload ready")
        yield kube
    finally:
        kube.helm("uninstall", "m1flow", "--namespace", NS, "--wait", check=False, timeout=600)
        kube.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        kube.kubectl("delete", "pv", "m1flow-chart-run", "--wait=false", check=False)


def test_every_pod_is_scheduled_on_its_pool(release):
    kube = release
    pools = node_pools(kube)
    got = pods(kube)
    where: dict[str, list[str]] = {}
    for pod in got:
        component = pod["metadata"]["labels"]["app.kubernetes.io/component"]
        node = pod["spec"].get("nodeName")
        assert node, f"{pod['metadata']['name']} not scheduled: {pod['status'].get('conditions')}"
        where.setdefault(component, []).append(node)
    assert {"rollout", "reward", "sandbox", "monitor", "source", "learner", "policy0"} <= set(where)
    for component in ("rollout", "learner"):
        assert {pools[n] for n in where[component]} == {"gpu"}, (component, where[component])
    for component in ("reward", "sandbox", "monitor", "source", "policy0"):
        assert set(where[component]) == {"cpu-node-0"}, (component, where[component])
    # one learner rank per GPU node (the spread is DoNotSchedule on the hostname)
    assert len(set(where["learner"])) == len(where["learner"]) == 2
    ready = [p["metadata"]["name"] for p in got
             if p["metadata"]["labels"]["app.kubernetes.io/component"] in ("rollout", "reward", "sandbox", "monitor", "source")
             and not any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
    assert not ready, f"not Ready: {ready}"


def test_rollout_past_the_gpus_leaves_a_pod_pending(release):
    kube = release

    def learner_settled() -> bool:  # kwok completes Job pods; completed ranks hold no GPUs
        return all(p["status"].get("phase") in ("Succeeded", "Failed") for p in pods(kube)
                   if p["metadata"]["labels"]["app.kubernetes.io/component"] == "learner")
    try:
        until(learner_settled, 60, "learner ranks completed")
    except AssertionError:
        pass  # ranks still running hold their GPUs, which the count below includes
    allocatable = json.loads(kube.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    total = sum(int(n["status"]["allocatable"].get(GPU, 0)) for n in allocatable)
    running = [p for p in pods(kube) if p["status"].get("phase") in ("Pending", "Running")
               and p["spec"].get("nodeName")]
    used = sum(int(c["resources"].get("limits", {}).get(GPU, 0)) for p in running for c in p["spec"]["containers"])
    free = total - used
    per_pod = 4
    want = 2 + free // per_pod + 1  # one more than the GPUs left allow
    kube.kubectl("-n", NS, "scale", "statefulset/m1flow-rollout", f"--replicas={want}")

    def pending() -> list[dict]:
        return [p for p in pods(kube) if p["metadata"]["labels"]["app.kubernetes.io/component"] == "rollout"
                and any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
                        for c in p["status"].get("conditions", []))]

    stuck = until(pending, 120, f"a rollout pod Pending once {want} x {per_pod} GPUs exceed the {free} free")
    message = stuck[0]["status"]["conditions"][0]["message"]
    assert f"Insufficient {GPU}" in message, message
    scheduled = [p for p in pods(kube) if p["metadata"]["labels"]["app.kubernetes.io/component"] == "rollout"
                 and p["spec"].get("nodeName")]
    assert len(scheduled) == want - 1
    kube.kubectl("-n", NS, "scale", "statefulset/m1flow-rollout", "--replicas=2")


SERVER_CASES = {
    "defaults": ({}, ("jobset.jobset.x-k8s.io", "kafka.kafka.strimzi.io", "kafkanodepool.kafka.strimzi.io",
                      "kafkatopic.kafka.strimzi.io", "scaledobject.keda.sh", "statefulset.apps", "deployment.apps",
                      "poddisruptionbudget.policy", "persistentvolumeclaim", "job.batch", "configmap", "service")),
    "s3 store, a source": ({"checkpoints.store": "s3", "checkpoints.s3.uri": "s3://ckpt/run",
                            "checkpoints.s3.credentialsSecret": "s3-creds", "learner.nodes": 3,
                            "source.sources": [{"name": "arith", "generator": "arith"}]},
                           ("jobset.jobset.x-k8s.io", "statefulset.apps")),
    "external Kafka, Indexed Jobs, no autoscaling": (
        {"kafka.mode": "external", "kafka.external.bootstrap": "kafka.example:9092", "learner.kind": "Job",
         "rollout.autoscaling.enabled": False, "reward.autoscaling.enabled": False,
         "sandbox.autoscaling.enabled": False}, ("job.batch", "statefulset.apps")),
    "Kafka over mTLS with ACLs, NetworkPolicies": (
        {"security.enabled": True, "networkPolicy.enabled": True,
         "source.sources": [{"name": "arith", "generator": "arith"}]},
        ("kafkauser.kafka.strimzi.io", "triggerauthentication.keda.sh", "kafka.kafka.strimzi.io",
         "scaledobject.keda.sh", "networkpolicy.networking.k8s.io")),
}


@pytest.mark.parametrize("case", list(SERVER_CASES))
def test_the_server_validates_every_object_the_chart_renders(kube, case):
    """--dry-run=server of the render: the JobSet, Kafka, KafkaNodePool, KafkaTopics and
    ScaledObjects against their CRDs' schemas and CEL rules, and the core objects (GPU request ==
    limit, probes, PDBs) against the API server's own validation."""
    from tests.k8s.chart import helm_binary
    values, expected = SERVER_CASES[case]
    ns = f"m1flow-dry-{list(SERVER_CASES).index(case)}"  # empty: every object is a create, none a patch of the release
    manifest = template(helm_binary(), values, namespace=ns).stdout
    kube.kubectl("create", "namespace", ns, check=False)
    try:
        out = kube.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-", input=manifest)
    finally:
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    kinds = {line.split("/")[0] for line in out.stdout.splitlines() if "/" in line}
    for kind in expected:
        assert kind in kinds, (kind, out.stdout)
    assert len(out.stdout.splitlines()) == manifest.count("\nkind: "), out.stdout


def test_the_server_refuses_a_cr_of_the_wrong_shape(kube):
    """What the chart's schema cannot see once rendered, the CRD's does: a KafkaTopic's partitions as a string."""
    from tests.k8s.chart import helm_binary
    ns = "m1flow-dry-bad"
    manifest = template(helm_binary(), namespace=ns).stdout
    kube.kubectl("create", "namespace", ns, check=False)
    try:
        bad = manifest.replace("partitions: 4", "partitions: \"four\"", 1)
        refused = kube.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-", input=bad, check=False)
    finally:
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    assert refused.returncode != 0 and "partitions" in refused.stderr, refused.stderr


def m1flow_kube(kube, *args: str) -> subprocess.CompletedProcess:
    from ops import ROOT

    return subprocess.run([sys.executable, "-m", "ops", "kube", *args, "--namespace", NS,
                           "--kubeconfig", str(kube.kubeconfig)], env=kube.env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_m1flow_kube_status_is_a_table_of_the_releases_pods(release):
    kube = release
    out = m1flow_kube(kube, "status")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:] if line.strip()]
    by_pod = {row[1]: row for row in rows}
    for pod in pods(kube):
        name = pod["metadata"]["name"]
        assert name in by_pod, f"{name} missing from:\n{out.stdout}"
        role, _, node = by_pod[name][:3]
        assert role == pod["metadata"]["labels"]["app.kubernetes.io/component"]
        assert node == pod["spec"].get("nodeName", "-")
    assert any(row[0] == "rollout" and row[2].startswith("gpu-node-") for row in rows), out.stdout


def test_m1flow_kube_render_fails_with_the_charts_message(kube):
    out = m1flow_kube(kube, "render", "--set", "rollout.gpus=16")
    assert out.returncode == 1
    assert "rollout.gpus (16) exceeds nodes.gpusPerNode (8)" in out.stderr, out.stderr
