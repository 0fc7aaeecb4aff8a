"""What a real Kubernetes control plane enforces on m1flow's manifests, with no kubelet: the
scheduler's GPU accounting and taints against kwok's fake GPU nodes, and the API server's
validation of our custom resources (Strimzi, KEDA, JobSet: schema types, required fields, CEL
rules) and of core objects (a GPU request must equal its limit). Schema-only checkers miss the CEL
rule and the GPU rule (docs/deploy.md "The test cluster"), which is why this tier is a real server.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.k8s.kube import Kube, until

MANIFESTS = Path(__file__).parent / "manifests"
NS = "m1flow-tier"
GPU_NODES = {"gpu-node-0", "gpu-node-1"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
WAIT = 180  # seconds; the server and kwok answer in a few, unless the machine is loaded


@pytest.fixture(scope="module")
def ns(kube: Kube) -> str:
    kube.kubectl("create", "namespace", NS)
    return NS


def deployment(name: str, gpus: int = 0, pool: str = "gpu") -> dict:
    """A one-replica Deployment; with gpus > 0 it asks for them (limit only: the request follows)."""
    pod: dict = {"nodeSelector": {"m1flow.io/pool": pool},
                 "containers": [{"name": "c", "image": "m1flow:local", "resources": {}}]}
    if gpus:
        pod["tolerations"] = [GPU_TOLERATION]
        pod["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": pod}}}


def apply(kube: Kube, ns: str, obj: dict, *flags: str):
    return kube.kubectl("-n", ns, "apply", *flags, "-f", "-", input=json.dumps(obj), check=not flags)


def pods_of(kube: Kube, ns: str, app: str) -> list[dict]:
    return json.loads(kube.kubectl("-n", ns, "get", "pods", "-l", f"app={app}", "-o", "json").stdout)["items"]


def node_of_ready_pod(kube: Kube, ns: str, app: str) -> str | None:
    for pod in pods_of(kube, ns, app):
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
        if ready:
            return pod["spec"]["nodeName"]
    return None


def test_the_nodes_are_ready_and_the_gpu_nodes_have_8_gpus(kube: Kube):
    nodes = {n["metadata"]["name"]: n for n in json.loads(kube.kubectl("get", "nodes", "-o", "json").stdout)["items"]}
    assert set(nodes) == {"cpu-node-0", *GPU_NODES}
    for name, node in nodes.items():
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True", name
        labels = node["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == name
        gpu = name in GPU_NODES
        assert labels["m1flow.io/pool"] == ("gpu" if gpu else "cpu")
        assert node["status"]["allocatable"].get("nvidia.com/gpu") == ("8" if gpu else None)
        taints = [(t["key"], t["value"], t["effect"]) for t in node["spec"].get("taints", [])]
        assert (("nvidia.com/gpu", "present", "NoSchedule") in taints) == gpu
    assert {n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes.values()} == {"zone-a", "zone-b"}


def test_a_gpu_deployment_runs_on_a_gpu_node_and_a_cpu_one_off_them(kube: Kube, ns: str):
    apply(kube, ns, deployment("gpu-fits", gpus=4))
    apply(kube, ns, deployment("cpu-only", pool="cpu"))
    gpu_node = until(lambda: node_of_ready_pod(kube, ns, "gpu-fits"), WAIT, "gpu-fits pod Ready")
    assert gpu_node in GPU_NODES
    cpu_node = until(lambda: node_of_ready_pod(kube, ns, "cpu-only"), WAIT, "cpu-only pod Ready")
    assert cpu_node == "cpu-node-0"


def failed_scheduling(kube: Kube, ns: str, app: str) -> list[str]:
    events = json.loads(kube.kubectl("-n", ns, "get", "events", "--field-selector", "reason=FailedScheduling",
                                     "-o", "json").stdout)["items"]
    return [e["message"] for e in events if e["involvedObject"]["name"].startswith(app + "-")]


def test_a_pod_asking_for_more_gpus_than_a_node_has_stays_pending(kube: Kube, ns: str):
    apply(kube, ns, deployment("gpu-too-big", gpus=9))
    messages = until(lambda: failed_scheduling(kube, ns, "gpu-too-big"), WAIT, "a FailedScheduling event")
    assert any("Insufficient nvidia.com/gpu" in m for m in messages), messages
    (pod,) = pods_of(kube, ns, "gpu-too-big")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")


def test_the_crds_are_established(kube: Kube):
    crds = json.loads(kube.kubectl("get", "crd", "-o", "json").stdout)["items"]
    established = {c["metadata"]["name"] for c in crds
                   if any(x["type"] == "Established" and x["status"] == "True" for x in c["status"]["conditions"])}
    assert {"kafkas.kafka.strimzi.io", "kafkatopics.kafka.strimzi.io", "kafkausers.kafka.strimzi.io",
            "kafkanodepools.kafka.strimzi.io", "scaledobjects.keda.sh", "scaledjobs.keda.sh",
            "triggerauthentications.keda.sh", "jobsets.jobset.x-k8s.io",
            "leaderworkersets.leaderworkerset.x-k8s.io"} <= established


def test_our_custom_resources_validate_server_side(kube: Kube, ns: str):
    out = kube.kubectl("-n", ns, "apply", "--dry-run=server", "-f", str(MANIFESTS / "custom-resources.yaml"))
    for kind in ("kafkanodepool", "kafka.kafka.strimzi.io", "kafkatopic", "triggerauthentication",
                 "scaledobject", "jobset"):
        assert kind in out.stdout, out.stdout


def pod_gpu_request_not_limit() -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad-gpu"},
            "spec": {"containers": [{"name": "c", "image": "m1flow:local", "resources": {
                "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}}]}}


def jobset_in_order_with_depends_on() -> dict:
    job = {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "bad-jobset"},
            "spec": {"startupPolicy": {"startupPolicyOrder": "InOrder"},
                     "replicatedJobs": [{"name": "a", "template": job},
                                        {"name": "b", "dependsOn": [{"name": "a", "status": "Ready"}],
                                         "template": job}]}}


INVALID = {
    "kafkatopic-partitions-not-an-integer": (
        {"apiVersion": "kafka.strimzi.io/v1", "kind": "KafkaTopic",
         "metadata": {"name": "bad-topic", "labels": {"strimzi.io/cluster": "m1flow-kafka"}},
         "spec": {"partitions": "four", "replicas": 3}},
        "spec.partitions in body must be of type integer"),
    "scaledobject-without-triggers": (
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "bad-so"},
         "spec": {"scaleTargetRef": {"name": "svc-rollout"}}},
        "spec.triggers: Required value"),
    "jobset-cel-startup-policy-with-depends-on": (
        jobset_in_order_with_depends_on(), "StartupPolicy and DependsOn APIs are mutually exclusive"),
    "pod-gpu-request-not-its-limit": (
        pod_gpu_request_not_limit(), "must be equal to nvidia.com/gpu limit of 2"),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_the_server_rejects_an_invalid_object(kube: Kube, ns: str, case: str):
    obj, message = INVALID[case]
    out = apply(kube, ns, obj, "--dry-run=server")
    assert out.returncode != 0, f"{case} was accepted:\n{out.stdout}"
    assert message in out.stderr, out.stderr


def write_chart(root: Path) -> Path:
    """A one-template chart: a Deployment on a GPU node (the Helm chart proper is deploy/'s)."""
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text("apiVersion: v2\nname: smoke\nversion: 0.1.0\n")
    (root / "templates" / "deployment.yaml").write_text(json.dumps(deployment("{{ .Release.Name }}-gpu", gpus=2)))
    return root


def test_helm_installs_a_chart_and_waits_for_it(kube: Kube, ns: str, tmp_path: Path):
    chart = write_chart(tmp_path / "smoke")
    kube.helm("upgrade", "--install", "smoke", str(chart), "-n", ns, "--wait", "--timeout", f"{WAIT}s")
    status = json.loads(kube.helm("status", "smoke", "-n", ns, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    assert node_of_ready_pod(kube, ns, "smoke-gpu") in GPU_NODES
    kube.helm("uninstall", "smoke", "-n", ns, "--wait")
