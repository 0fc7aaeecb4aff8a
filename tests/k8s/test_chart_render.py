"""The Helm chart rendered (`helm template`, `helm lint`) and read back as objects: every workload,
its pool, GPUs, probes, /dev/shm, the learner's torchrun rendezvous, Kafka's topics against the
code's topic table, KEDA's bounds against the partitions, the shared settings file, and the values
that must not render (each with its message) or that the schema refuses.

Needs only a helm binary (tests/k8s/chart.py finds or builds one), no cluster.
"""
from __future__ import annotations

import ast
import base64
import json
import subprocess

import pytest

from m1flow.bus.topics import ALL_TOPICS
from ops import ROOT
from ops.services import SERVICES
from m1flow.runtime.service import Service
from tests.k8s.chart import CHART, by_kind, helm_binary, jobset_pods, objects, pod_spec, service_env, template

GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


@pytest.fixture(scope="module")
def default(helm) -> list[dict]:
    return objects(helm)


HELDOUT = [{"name": "sums", "generator": "arith", "seed": 9, "prompts": 50, "samples": 4}]


@pytest.fixture(scope="module")
def with_source(helm) -> list[dict]:
    """The on-demand services given their settings: the prompt source and svc_eval's held-out sets."""
    return objects(helm, {"source.sources": [{"name": "arith", "generator": "arith", "weight": 1.0}],
                          "eval.sets": HELDOUT})


def registered_health_names() -> dict[str, str]:
    """What each service's register() returns (the names health.set_serving marks SERVING), read
    from the code: the probe must ask for exactly these."""
    names = {}
    for svc in SERVICES:
        tree = ast.parse((ROOT / svc.module / "service.py").read_text())
        names[svc.name] = ""
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "register":
                returned = [n.value for n in ast.walk(node) if isinstance(n, ast.Return)]
                assert len(returned) == 1 and isinstance(returned[0], ast.List), svc.name
                names[svc.name] = returned[0].elts[0].value
    return names


def group_of(name: str) -> str:
    """The consumer group the code gives a service (Service.group_id with no group_id set)."""
    class Stand:  # only what the property reads
        config = type("C", (), {"group_id": ""})()
    Stand.name = name
    return Service.group_id.fget(Stand())


def workloads(docs: list[dict]) -> dict[str, dict]:
    """Service name -> its Deployment or StatefulSet."""
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in docs
            if d["kind"] in ("Deployment", "StatefulSet")}


def container(spec: dict) -> dict:
    return spec["containers"][0]


def env_of(spec: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container(spec).get("env", [])}


def test_lint_passes(helm):
    for extra in ([], ["--set-json", 'source.sources=[{"name": "arith", "generator": "arith"}]']):
        out = subprocess.run([helm, "lint", "--strict", str(CHART), *extra], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr


def test_every_service_has_its_workload_and_the_learner_a_jobset(default, with_source):
    assert set(workloads(default)) == {"rollout", "reward", "sandbox", "monitor"}  # no sources: no source
    got = workloads(with_source)
    assert set(got) == {s.name for s in SERVICES} - {"learner"}
    # Kafka consumers need distinct stable replica indexes (static membership): StatefulSets
    assert {n: w["kind"] for n, w in got.items()} == {
        "source": "StatefulSet", "rollout": "StatefulSet", "reward": "StatefulSet", "monitor": "StatefulSet",
        "eval": "StatefulSet", "sandbox": "Deployment"}
    for name, w in got.items():
        c = container(pod_spec(w))
        assert c["command"] == ["python", "-m", f"svc_{name}"]
        assert c["args"][:2] == ["--bootstrap", "m1flow-kafka-kafka-bootstrap:9092"]
        assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"], name
        assert c["envFrom"][0]["configMapRef"]["name"] == "m1flow-service-env"
    reward_args = container(pod_spec(got["reward"]))["args"]
    assert reward_args[reward_args.index("--sandbox-address") + 1] == "m1flow-sandbox:50051"
    assert by_kind(default, "Service")["m1flow-sandbox"]["spec"]["ports"][0]["port"] == 50051
    (jobset,) = by_kind(default, "JobSet").values()
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert [rj["name"] for rj in jobset["spec"]["replicatedJobs"]] == ["leader", "worker"]


def test_gpu_roles_on_gpu_nodes_with_requests_equal_to_limits(default):
    got = workloads(default)
    rollout = pod_spec(got["rollout"])
    res = container(rollout)["resources"]
    assert res["requests"][GPU] == res["limits"][GPU] == 4
    assert rollout["nodeSelector"] == {"m1flow.io/pool": "gpu"}
    assert {"key": GPU, "operator": "Exists", "effect": "NoSchedule"} in rollout["tolerations"]
    for name in ("reward", "sandbox", "monitor"):
        spec = pod_spec(got[name])
        assert spec["nodeSelector"] == {"m1flow.io/pool": "cpu"}, name
        assert GPU not in container(spec)["resources"].get("limits", {}), name
        assert not spec.get("tolerations"), name
    (jobset,) = by_kind(default, "JobSet").values()
    for role, pod in jobset_pods(jobset).items():
        res = container(pod["spec"])["resources"]
        assert res["requests"][GPU] == res["limits"][GPU] == 4, role
        assert pod["spec"]["nodeSelector"] == {"m1flow.io/pool": "gpu"}
        spread = pod["spec"]["topologySpreadConstraints"][0]
        assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "DoNotSchedule"
        assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "learner"


def test_grpc_probes_ask_for_the_names_the_services_register(with_source):
    names = registered_health_names()
    assert names["rollout"] == "m1flow.v1.RolloutService" and names["source"] == ""
    for name, w in workloads(with_source).items():
        c = container(pod_spec(w))
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            grpc = c[probe]["grpc"]
            assert grpc["port"] == 50051, (name, probe)
            assert grpc.get("service", "") == names[name], (name, probe)
    (jobset,) = by_kind(with_source, "JobSet").values()
    pods = jobset_pods(jobset)
    leader = container(pods["leader"]["spec"])
    assert leader["readinessProbe"]["grpc"] == {"port": 50051, "service": names["learner"]}
    assert "readinessProbe" not in container(pods["worker"]["spec"])  # ranks > 0 serve no gRPC


def test_shm_is_a_memory_volume_of_the_configured_size(helm):
    docs = objects(helm, {"rollout.shm.sizeLimit": "8Gi", "learner.shm.sizeLimit": "32Gi"})
    rollout = pod_spec(workloads(docs)["rollout"])
    (jobset,) = by_kind(docs, "JobSet").values()
    for spec, size in [(rollout, "8Gi"), *((p["spec"], "32Gi") for p in jobset_pods(jobset).values())]:
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": size}
        assert {"name": "shm", "mountPath": "/dev/shm"} in container(spec)["volumeMounts"]
    off = objects(helm, {"rollout.shm.enabled": False})
    assert "shm" not in {v["name"] for v in pod_spec(workloads(off)["rollout"])["volumes"]}


def test_learner_torchrun_rendezvous_at_the_leaders_stable_name(helm, default):
    (jobset,) = by_kind(default, "JobSet").values()
    assert jobset["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": "m1flow-learner",
                                         "publishNotReadyAddresses": True}
    assert "startupPolicy" not in jobset["spec"]  # InOrder would wait for a leader that waits for the ranks
    pods = jobset_pods(jobset)
    master = "m1flow-learner-leader-0-0.m1flow-learner.m1flow.svc"  # <jobset>-<rjob>-<job>-<pod>.<subdomain>
    leader, worker = container(pods["leader"]["spec"]), container(pods["worker"]["spec"])
    assert leader["command"] == ["python", "-m", "torch.distributed.run", "--node-rank=0"]
    # a worker's node rank is JOB_COMPLETION_INDEX + 1 ("$$": the kubelet's "$"); its arguments are "$@"
    assert worker["command"] == ["sh", "-c", 'exec python -m torch.distributed.run '
                                 '--node-rank="$$((JOB_COMPLETION_INDEX + 1))" "$@"', "torchrun"]
    assert leader["args"] == worker["args"] == [
        "--nnodes=2", "--nproc-per-node=4", f"--master-addr={master}", "--master-port=29500", "-m", "svc_learner",
        "--bootstrap", "m1flow-kafka-kafka-bootstrap:9092", "--run-id", "k8s", "--run-dir", "/data/run",
        "--grpc-port", "50051", "--metrics-port", "9100", "--init-checkpoint", "/data/run/policy0",
        "--batch-groups", "16"]
    for role in ("leader", "worker"):
        assert env_of(pods[role]["spec"])["MASTER_ADDR"] == master
    worker_job = jobset["spec"]["replicatedJobs"][1]["template"]["spec"]
    assert worker_job["completions"] == worker_job["parallelism"] == 1 and worker_job["completionMode"] == "Indexed"

    jobs = objects(helm, {"learner.kind": "Job", "learner.nodes": 3})
    assert not by_kind(jobs, "JobSet")
    got = by_kind(jobs, "Job")
    assert got["m1flow-learner-worker"]["spec"]["completions"] == 2
    leader = got["m1flow-learner-leader"]["spec"]["template"]["spec"]
    assert leader["subdomain"] == "m1flow-learner"
    assert "--master-addr=m1flow-learner-leader-0.m1flow-learner.m1flow.svc" in container(leader)["args"]
    headless = by_kind(jobs, "Service")["m1flow-learner"]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True


def test_kafka_topics_follow_the_codes_topic_table(helm, default):
    topics = {t["spec"]["topicName"]: t for t in by_kind(default, "KafkaTopic").values()}
    assert set(topics) == {spec.name for spec in ALL_TOPICS}
    for spec in ALL_TOPICS:
        got = topics[spec.name]
        assert got["spec"]["partitions"] == spec.partitions and got["spec"]["replicas"] == 3, spec.name
        assert (got["spec"].get("config", {}).get("cleanup.policy") == "compact") == spec.compacted, spec.name
        assert got["metadata"]["name"] == spec.name.replace("_", "-")
        for key, value in spec.config.items():
            assert got["spec"]["config"][key] == value
    (pool,) = by_kind(default, "KafkaNodePool").values()
    assert pool["spec"]["replicas"] == 3 and pool["spec"]["roles"] == ["controller", "broker"]
    (kafka,) = by_kind(default, "Kafka").values()
    assert kafka["apiVersion"] == "kafka.strimzi.io/v1"
    assert pool["metadata"]["labels"]["strimzi.io/cluster"] == kafka["metadata"]["name"] == "m1flow-kafka"
    assert kafka["spec"]["kafka"]["config"]["auto.create.topics.enable"] is False
    layout = by_kind(default, "ConfigMap")["m1flow-service-env"]["data"]["M1FLOW_TOPICS"]
    from m1flow.bus.topics import TopicLayout
    parsed = TopicLayout.model_validate_json(layout)  # what the services themselves read
    assert parsed.replication_factor == 3 and parsed.partitions["prompts"] == 4

    external = objects(helm, {"kafka.mode": "external", "kafka.external.bootstrap": "kafka.example:9092"})
    assert not [d for d in external if d["apiVersion"].startswith("kafka.strimzi.io")]
    for w in workloads(external).values():
        assert container(pod_spec(w))["args"][1] == "kafka.example:9092"
    assert all(so["spec"]["triggers"][0]["metadata"]["bootstrapServers"] == "kafka.example:9092"
               for so in by_kind(external, "ScaledObject").values() if so["spec"]["triggers"][0]["type"] == "kafka")


def test_keda_scales_consumer_groups_on_lag_within_the_partitions(default):
    objs = by_kind(default, "ScaledObject")
    partitions = {spec.name: spec.partitions for spec in ALL_TOPICS}
    for name, topic in (("rollout", "prompts"), ("reward", "rollouts")):
        so = objs[f"m1flow-{name}"]["spec"]
        assert so["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": f"m1flow-{name}"}
        (trigger,) = so["triggers"]
        assert trigger["type"] == "kafka"
        assert trigger["metadata"]["consumerGroup"] == group_of(name)  # m1flow-rollout, as the code names it
        assert trigger["metadata"]["topic"] == topic
        assert int(trigger["metadata"]["lagThreshold"]) > 0
        assert so["maxReplicaCount"] <= partitions[topic]
        assert so["cooldownPeriod"] > 0
    rollout = objs["m1flow-rollout"]["spec"]
    assert rollout["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300
    sandbox = objs["m1flow-sandbox"]["spec"]
    assert sandbox["scaleTargetRef"]["kind"] == "Deployment" and sandbox["triggers"][0]["type"] == "cpu"


def test_disruption_budgets(default):
    pdbs = by_kind(default, "PodDisruptionBudget")
    assert {"m1flow-rollout", "m1flow-reward", "m1flow-sandbox", "m1flow-learner"} <= set(pdbs)
    assert pdbs["m1flow-learner"]["spec"]["minAvailable"] == 2  # every rank
    assert pdbs["m1flow-rollout"]["spec"]["maxUnavailable"] == 1


def test_checkpoint_store_file_or_s3(helm, default):
    (jobset,) = by_kind(default, "JobSet").values()
    leader = jobset_pods(jobset)["leader"]["spec"]
    assert env_of(leader)["M1FLOW_CHECKPOINT_URI"] == "file:///data/run/learner/checkpoints"
    pvc = by_kind(default, "PersistentVolumeClaim")["m1flow-run"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert {"name": "run", "persistentVolumeClaim": {"claimName": "m1flow-run"}} in leader["volumes"]

    s3 = objects(helm, {"checkpoints.store": "s3", "checkpoints.s3.uri": "s3://ckpt/run1",
                        "checkpoints.s3.endpoint": "http://minio:9000", "checkpoints.s3.credentialsSecret": "s3-creds",
                        "checkpoints.s3.store": {"virtual_hosted": False}})
    (jobset,) = by_kind(s3, "JobSet").values()
    for spec in (jobset_pods(jobset)["leader"]["spec"], jobset_pods(jobset)["worker"]["spec"],
                 pod_spec(workloads(s3)["rollout"])):
        env = env_of(spec)
        assert env["M1FLOW_CHECKPOINT_URI"] == "s3://ckpt/run1" and env["AWS_ENDPOINT_URL"] == "http://minio:9000"
        assert {"secretRef": {"name": "s3-creds"}} in container(spec)["envFrom"]
        assert json.loads(env["M1FLOW_STORE"]) == {"endpoint_url": "http://minio:9000", "virtual_hosted": False}


def test_the_monitor_reads_its_access_token_from_a_secret(helm, default):
    """The dashboard and Report listen on the pod network: the token comes from a Secret the chart
    makes (a random one) or the user names; never from a value in the rendered spec."""
    monitor = pod_spec(workloads(default)["monitor"])
    assert env_of(monitor)["M1FLOW_ACCESS_TOKEN_FILE"] == "/etc/m1flow/access/token"
    assert {"name": "access-token", "mountPath": "/etc/m1flow/access", "readOnly": True} in container(monitor)["volumeMounts"]
    volume = next(v for v in monitor["volumes"] if v["name"] == "access-token")
    assert volume["secret"]["secretName"] == "m1flow-monitor-access"
    token = base64.b64decode(by_kind(default, "Secret")["m1flow-monitor-access"]["data"]["token"]).decode()
    assert len(token) >= 32 and token not in json.dumps(monitor)
    mine = objects(helm, {"monitor.accessTokenSecret": "my-token"})
    assert "m1flow-monitor-access" not in by_kind(mine, "Secret")
    volume = next(v for v in pod_spec(workloads(mine)["monitor"])["volumes"] if v["name"] == "access-token")
    assert volume["secret"]["secretName"] == "my-token"


def test_security_gives_each_service_a_kafka_user_with_its_row_of_the_acl_table(helm):
    """security.enabled: the KafkaUsers carry exactly ops/acls.py's rows (files/acls.json is
    what the chart reads: a stale file fails here), every Kafka client mounts its own user's Secret,
    the brokers require certificates and authorise, KEDA reads lag over TLS."""
    from ops.acls import strimzi_acls

    docs = objects(helm, {"security.enabled": True, "security.grpc.enabled": False,  # Kafka alone here
                          "source.sources": [{"name": "arith", "generator": "arith", "weight": 1.0}],
                          "eval.sets": HELDOUT})
    users = by_kind(docs, "KafkaUser")
    assert set(users) == {f"m1flow-{n}" for n in ("source", "rollout", "reward", "monitor", "eval", "learner", "admin",
                                                  "keda")}
    for name in ("source", "rollout", "reward", "monitor", "eval", "learner"):
        spec = users[f"m1flow-{name}"]["spec"]
        assert spec["authentication"] == {"type": "tls"}
        assert spec["authorization"]["acls"] == strimzi_acls(name), f"{name}: regenerate files/acls.json " \
            "(python -m ops.acls > deploy/helm/m1flow/files/acls.json)"
    assert "authorization" not in users["m1flow-admin"]["spec"]
    (kafka,) = by_kind(docs, "Kafka").values()
    assert kafka["spec"]["kafka"]["listeners"] == [{"name": "tls", "port": 9093, "type": "internal", "tls": True,
                                                    "authentication": {"type": "tls"}}]
    assert kafka["spec"]["kafka"]["authorization"] == {"type": "simple", "superUsers": ["CN=m1flow-admin"]}
    assert "userOperator" in kafka["spec"]["entityOperator"]
    (jobset,) = by_kind(docs, "JobSet").values()
    specs = {**{n: pod_spec(w) for n, w in workloads(docs).items()},
             "learner": jobset_pods(jobset)["leader"]["spec"], "learner-worker": jobset_pods(jobset)["worker"]["spec"]}
    for name, spec in specs.items():
        env = env_of(spec)
        if name == "sandbox":  # touches no topic: no Kafka identity
            assert "M1FLOW_SECURITY" not in env
            continue
        block = json.loads(env["M1FLOW_SECURITY"])
        assert block["enabled"] and not block["grpc_tls"] and block["key_file"].startswith("/etc/m1flow/kafka-user/")
        user = next(v for v in spec["volumes"] if v["name"] == "kafka-user")
        assert user["secret"]["secretName"] == f"m1flow-{name.removesuffix('-worker')}"
        assert "m1flow-kafka-kafka-bootstrap:9093" in json.dumps(spec)
    for scaled in by_kind(docs, "ScaledObject").values():
        for trigger in scaled["spec"]["triggers"]:
            if trigger["type"] == "kafka":
                assert trigger["metadata"]["tls"] == "enable"
                assert trigger["authenticationRef"] == {"name": "m1flow-kafka-tls"}
    refs = by_kind(docs, "TriggerAuthentication")["m1flow-kafka-tls"]["spec"]["secretTargetRef"]
    assert {(r["parameter"], r["name"]) for r in refs} == {
        ("ca", "m1flow-kafka-cluster-ca-cert"), ("cert", "m1flow-keda"), ("key", "m1flow-keda")}


GRPC_IDENTITIES = ("source", "rollout", "reward", "sandbox", "monitor", "eval", "learner", "admin")


def test_security_grpc_gives_each_pod_its_certificate_and_exec_probes(helm):
    """security.grpc (on with security.enabled): the chart's CA, one certificate per service (CN = its
    name, the DNS names its clients dial) and admin's; each pod's M1FLOW_SECURITY names its own
    mounted files, the sandbox admits only reward, and the probes present the pod's certificate."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    from m1flow.security.config import SecurityConfig

    docs = objects(helm, {"security.enabled": True, "eval.sets": HELDOUT,
                          "source.sources": [{"name": "arith", "generator": "arith", "weight": 1.0}]})
    secrets = by_kind(docs, "Secret")
    ca = x509.load_pem_x509_certificate(base64.b64decode(secrets["m1flow-grpc-ca"]["data"]["tls.crt"]))
    for name in GRPC_IDENTITIES:
        data = secrets[f"m1flow-grpc-{name}"]["data"]
        cert = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == name
        assert cert.issuer == ca.subject and base64.b64decode(data["ca.crt"]) == base64.b64decode(
            secrets["m1flow-grpc-ca"]["data"]["tls.crt"])
        dns = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
        assert {"localhost", f"m1flow-{name}", f"m1flow-{name}.m1flow.svc.cluster.local",
                f"*.m1flow-{name}.m1flow.svc"} <= set(dns)
    health_names = registered_health_names()
    (jobset,) = by_kind(docs, "JobSet").values()
    specs = {**{n: pod_spec(w) for n, w in workloads(docs).items()}, "learner": jobset_pods(jobset)["leader"]["spec"]}
    for name, spec in specs.items():
        block = json.loads(env_of(spec)["M1FLOW_SECURITY"])
        assert set(block) <= set(SecurityConfig.model_fields), name
        assert block["grpc_tls"] and block["grpc_key_file"] == "/etc/m1flow/grpc/tls.key", name
        volume = next(v for v in spec["volumes"] if v["name"] == "grpc-identity")
        assert volume["secret"]["secretName"] == f"m1flow-grpc-{name}"
        probe = container(spec)["readinessProbe"]
        assert "grpc" not in probe and probe["exec"]["command"] == [
            "python", "-m", "m1flow.runtime.probe", "--address", "localhost:50051", "--service", health_names[name]]
    sandbox = json.loads(env_of(specs["sandbox"])["M1FLOW_SECURITY"])
    assert sandbox["grpc_allowed_peers"] == ["reward"] and sandbox["key_file"] == "/etc/m1flow/grpc/tls.key"
    assert not any(v["name"] == "kafka-user" for v in specs["sandbox"]["volumes"])  # no topic, no Kafka identity
    assert "grpc_allowed_peers" not in json.loads(env_of(specs["reward"])["M1FLOW_SECURITY"])
    plain = objects(helm, {"security.enabled": True, "security.grpc.enabled": False})
    assert not [n for n in by_kind(plain, "Secret") if n.startswith("m1flow-grpc-")]
    assert "grpc" in container(pod_spec(workloads(plain)["reward"]))["readinessProbe"]


def test_security_signs_policy_with_a_key_only_the_learner_holds(helm, tmp_path):
    """security.policySigning (on with security.enabled): the chart makes the learner's Ed25519 key;
    the learner's pods mount it and sign, every consumer of `policy` mounts the certificate alone and
    verifies, and loads only from the checkpoint store (the file path, or the S3 prefix). The rendered
    pair works with the code: a record the learner's key signed is admitted by a consumer's Guard,
    the same record changed is refused, and one from another folder is refused."""
    from m1flow.checkpoint import uri_for
    from m1flow.contracts import events
    from m1flow.security.announcements import Guard, sign
    from m1flow.security.config import SecurityConfig

    consumers = ("rollout", "source", "monitor", "eval")
    values = {"security.enabled": True, "eval.sets": HELDOUT,
              "source.sources": [{"name": "arith", "generator": "arith", "weight": 1.0}]}
    docs = objects(helm, values)
    (jobset,) = by_kind(docs, "JobSet").values()
    specs = {**{n: pod_spec(w) for n, w in workloads(docs).items()},
             "learner": jobset_pods(jobset)["leader"]["spec"], "learner-worker": jobset_pods(jobset)["worker"]["spec"]}
    assert set(consumers) <= set(specs)
    for name, spec in specs.items():
        block = json.loads(env_of(spec)["M1FLOW_SECURITY"])
        volume = next((v for v in spec["volumes"] if v["name"] == "policy-signing"), None)
        if name.startswith("learner"):
            assert block["policy_signing_key"] == "/etc/m1flow/policy-signing/tls.key", name
            assert volume["secret"] == {"secretName": "m1flow-policy-signing", "defaultMode": 0o400}
        elif name in consumers:
            assert block["policy_verify_key"] == "/etc/m1flow/policy-signing/tls.crt", name
            assert block["checkpoint_roots"] == ["/data/run/learner/checkpoints"], name
            assert volume["secret"]["items"] == [{"key": "tls.crt", "path": "tls.crt"}], name  # never the key
        else:  # reward, sandbox: read no `policy`
            assert volume is None and "policy_verify_key" not in block, name
        assert "policy_signing_key" not in block or name.startswith("learner"), name

    data = by_kind(docs, "Secret")["m1flow-policy-signing"]["data"]
    (tmp_path / "tls.key").write_bytes(base64.b64decode(data["tls.key"]))
    (tmp_path / "tls.crt").write_bytes(base64.b64decode(data["tls.crt"]))
    root = tmp_path / "data" / "run" / "learner" / "checkpoints"
    guard = Guard(SecurityConfig(policy_verify_key=tmp_path / "tls.crt", checkpoint_roots=[root]))
    record = sign(events.PolicyVersion(version=3, checkpoint_uri=uri_for(root / "v000003"), sha256="a" * 64,
                                       batch_groups=16), tmp_path / "tls.key")
    assert guard.admits(record)
    record.batch_groups = 1_000_000
    assert not guard.admits(record)
    elsewhere = sign(events.PolicyVersion(version=4, checkpoint_uri=uri_for(tmp_path / "data" / "run" / "secrets")),
                     tmp_path / "tls.key")
    assert not guard.admits(elsewhere)

    s3 = objects(helm, {**values, "checkpoints.store": "s3", "checkpoints.s3.uri": "s3://ckpt/run-1",
                        "checkpoints.s3.credentialsSecret": "s3-creds"})
    rollout = json.loads(env_of(pod_spec(workloads(s3)["rollout"]))["M1FLOW_SECURITY"])
    assert rollout["checkpoint_roots"] == ["s3://ckpt/run-1"]
    off = objects(helm, {**values, "security.policySigning.enabled": False})
    assert "m1flow-policy-signing" not in by_kind(off, "Secret")
    assert "policy_verify_key" not in json.loads(env_of(pod_spec(workloads(off)["rollout"]))["M1FLOW_SECURITY"])


def test_the_charts_grpc_certificates_work_with_the_code(helm, tmp_path):
    """The rendered Secrets as the pods mount them, served by the code's own gRPC server: reward
    reaches the sandbox at the name it dials (m1flow-sandbox), rollout is refused, admin's health
    check answers, and the sandbox's exec probe (its own certificate, localhost) too."""
    import grpc

    from m1flow.runtime import health
    from m1flow.security import grpc_tls
    from m1flow.security.config import SecurityConfig
    from tests.security.test_grpc_mtls import Echo

    secrets = by_kind(objects(helm, {"security.enabled": True}), "Secret")

    def mounted(name: str, **extra) -> SecurityConfig:
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        for key, value in secrets[f"m1flow-grpc-{name}"]["data"].items():
            (folder / key).write_bytes(base64.b64decode(value))
        files = {"ca_file": folder / "ca.crt", "cert_file": folder / "tls.crt", "key_file": folder / "tls.key"}
        return SecurityConfig(enabled=True, **files, **{f"grpc_{k}": v for k, v in files.items()}, **extra)

    server, port, servicer = health.grpc_server("127.0.0.1", 0, 2, mounted("sandbox"), {"/test.Echo/Who": ["reward"]})
    server.add_generic_rpc_handlers((Echo(),))
    health.set_serving(servicer, [], True)
    server.start()
    as_dialled = [("grpc.ssl_target_name_override", "m1flow-sandbox")]  # the sandbox's Service name

    def who(security: SecurityConfig) -> bytes:
        with grpc_tls.channel(f"127.0.0.1:{port}", options=as_dialled, security=security) as ch:
            return ch.unary_unary("/test.Echo/Who", request_serializer=bytes, response_deserializer=bytes)(b"", timeout=10)

    try:
        assert who(mounted("reward")) == b"reward"
        with pytest.raises(grpc.RpcError) as err:
            who(mounted("rollout"))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert health.check(f"localhost:{port}", timeout=10, security=mounted("admin")) == "SERVING"
        assert health.check(f"localhost:{port}", timeout=10, security=mounted("sandbox")) == "SERVING"  # its probe
    finally:
        server.stop(0)


def test_the_grpc_method_table_renders_as_the_codes_and_every_pod_enforces_it(helm, tmp_path):
    """Who may call each gRPC method is ops/acls.py's GRPC, shown in the rendered service-env ConfigMap
    (M1FLOW_GRPC_METHODS) that every pod takes; served with the chart's own certificates, every method
    answers exactly its row's identities (the base servicers answer UNIMPLEMENTED once let through)."""
    import grpc

    from m1flow.contracts import rpc
    from m1flow.runtime import health
    from m1flow.security.config import SecurityConfig
    from ops.acls import grpc_methods
    from tests.security.test_grpc_methods import SERVICERS, call

    docs = objects(helm, {"security.enabled": True, "eval.sets": HELDOUT,
                          "source.sources": [{"name": "arith", "generator": "arith", "weight": 1.0}]})
    table = json.loads(by_kind(docs, "ConfigMap")["m1flow-service-env"]["data"]["M1FLOW_GRPC_METHODS"])
    assert table == grpc_methods()
    (jobset,) = by_kind(docs, "JobSet").values()
    specs = {**{n: pod_spec(w) for n, w in workloads(docs).items()}, "learner": jobset_pods(jobset)["leader"]["spec"]}
    assert set(specs) == {s.name for s in SERVICES}
    for name, spec in specs.items():
        assert {"configMapRef": {"name": "m1flow-service-env"}} in container(spec)["envFrom"], name
    secrets = by_kind(docs, "Secret")

    def mounted(name: str) -> SecurityConfig:
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        for key, value in secrets[f"m1flow-grpc-{name}"]["data"].items():
            (folder / key).write_bytes(base64.b64decode(value))
        return SecurityConfig(enabled=True, ca_file=folder / "ca.crt", cert_file=folder / "tls.crt",
                              key_file=folder / "tls.key")

    server, port, servicer = health.grpc_server("127.0.0.1", 0, 2, mounted("reward"), table)
    for cls, add in SERVICERS.values():
        add(cls(), server)
    health.set_serving(servicer, [], True)
    server.start()
    streaming = {f"/{s.full_name}/{m.name}" for s in rpc.DESCRIPTOR.services_by_name.values() for m in s.methods
                 if m.server_streaming}
    try:
        got = {(method, name): call(f"localhost:{port}", mounted(name), method, streaming=method in streaming)
               for method in table for name in GRPC_IDENTITIES}
    finally:
        server.stop(0)
    assert got == {(m, n): grpc.StatusCode.UNIMPLEMENTED if n in table[m] else grpc.StatusCode.PERMISSION_DENIED
                   for m in table for n in GRPC_IDENTITIES}


def test_network_policies_let_only_reward_reach_the_sandbox(helm, default):
    assert not by_kind(default, "NetworkPolicy")  # off by default: a CNI must enforce them
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    docs = objects(helm, {"networkPolicy.enabled": True, "networkPolicy.metricsFrom": peers})
    policies = by_kind(docs, "NetworkPolicy")
    assert set(policies) == {f"m1flow-{n}" for n in ("source", "rollout", "reward", "sandbox", "monitor", "eval",
                                                     "learner")}

    def rule(name: str, port: int) -> dict:
        (found,) = [r for r in policies[f"m1flow-{name}"]["spec"]["ingress"] if r["ports"][0]["port"] == port]
        return found

    release = {"app.kubernetes.io/name": "m1flow", "app.kubernetes.io/instance": "m1flow"}
    assert rule("sandbox", 50051)["from"] == [{"podSelector": {"matchLabels": {**release, "app.kubernetes.io/component": "reward"}}}]
    assert rule("reward", 50051)["from"] == [{"podSelector": {"matchLabels": release}}]
    assert rule("learner", 29500)["from"] == [{"podSelector": {"matchLabels": {**release, "app.kubernetes.io/component": "learner"}}}]
    assert rule("rollout", 9100)["from"] == peers and "from" not in rule("monitor", 8080)  # dashboard: any (token)
    for name, policy in policies.items():  # each selects exactly its own pods
        component = policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        assert name == f"m1flow-{component}"


def test_the_service_settings_are_the_files_that_compose_reads(default):
    """One source of truth: the chart's ConfigMap is files/service.env, which docker-compose.yml
    reads as env_file (tests/cluster/test_compose_files.py checks compose's side)."""
    data = by_kind(default, "ConfigMap")["m1flow-service-env"]["data"]
    shared = service_env()
    assert {k: v for k, v in data.items() if k != "M1FLOW_TOPICS"} == shared
    assert shared["M1FLOW_EXIT_UNHEALTHY_AFTER_S"] == "120" and shared["M1FLOW_REPLICA"] == "auto"
    compose = (ROOT / "docker-compose.yml").read_text()
    assert "./deploy/helm/m1flow/files/service.env" in compose


def test_source_gets_its_config_only_when_given(with_source):
    cm = by_kind(with_source, "ConfigMap")["m1flow-source"]
    assert "generator: arith" in cm["data"]["source.yaml"]
    args = container(pod_spec(workloads(with_source)["source"]))["args"]
    assert args[-2:] == ["--config", "/config/source.yaml"]


def test_the_eval_stage_reads_the_held_out_sets_the_source_drops(helm, default, with_source):
    """svc_eval and svc_source read one run config: the sets svc_eval samples are the rows svc_source
    keeps out of training. Each service's settings load it as the code reads it."""
    import yaml

    from svc_eval.config import EvalConfig
    from svc_source.config import SourceConfig

    assert "eval" not in workloads(default) and "m1flow-source" not in by_kind(default, "ConfigMap")
    run = yaml.safe_load(by_kind(with_source, "ConfigMap")["m1flow-source"]["data"]["source.yaml"])
    assert [s.set_name for s in EvalConfig.model_validate(run).eval_sets] == ["sums"]
    assert SourceConfig.model_validate(run).eval_sets == EvalConfig.model_validate(run).eval_sets
    spec = pod_spec(workloads(with_source)["eval"])
    c = container(spec)
    assert c["args"][-2:] == ["--config", "/config/source.yaml"]
    assert {"name": "source-config", "mountPath": "/config", "readOnly": True} in c["volumeMounts"]
    assert c["resources"]["requests"][GPU] == c["resources"]["limits"][GPU] == 1  # the rollout engines
    assert spec["nodeSelector"] == {"m1flow.io/pool": "gpu"}
    assert env_of(spec)["M1FLOW_CHECKPOINT_URI"].startswith("file://")  # loads checkpoints as rollout does
    only_eval = objects(helm, {"eval.sets": HELDOUT})  # held-out sets without the source: still their config
    assert "eval" in workloads(only_eval) and "source" not in workloads(only_eval)
    assert "sources" not in yaml.safe_load(by_kind(only_eval, "ConfigMap")["m1flow-source"]["data"]["source.yaml"])


@pytest.mark.parametrize("values, message", [
    ({"rollout.autoscaling.maxReplicaCount": 8},
     "rollout.autoscaling.maxReplicaCount (8) exceeds the partitions of its topic prompts (kafka.topics.partitions.prompts = 4)"),
    ({"reward.autoscaling.maxReplicaCount": 4, "kafka.topics.partitions.rollouts": 2},
     "reward.autoscaling.maxReplicaCount (4) exceeds the partitions of its topic rollouts (kafka.topics.partitions.rollouts = 2)"),
    ({"rollout.autoscaling.enabled": False, "rollout.replicas": 5},
     "rollout.replicas (5) exceeds the partitions of its topic prompts"),
    ({"rollout.gpus": 16}, "rollout.gpus (16) exceeds nodes.gpusPerNode (8)"),
    ({"learner.gpusPerNode": 9}, "learner.gpusPerNode (9) exceeds nodes.gpusPerNode (8)"),
    ({"checkpoints.store": "s3", "checkpoints.s3.uri": "s3://b/p"},
     "checkpoints.store is s3 but checkpoints.s3.credentialsSecret is empty"),
    ({"kafka.mode": "external"}, "kafka.mode is external: set kafka.external.bootstrap"),
    ({"kafka.topics.replicationFactor": 3, "kafka.strimzi.replicas": 1},
     "kafka.topics.replicationFactor (3) exceeds the brokers (kafka.strimzi.replicas = 1)"),
    ({"learner.batchGroups": 2}, "learner.batchGroups (2) cannot feed 8 ranks"),
    ({"eval.sets": HELDOUT, "eval.gpus": 9}, "eval.gpus (9) exceeds nodes.gpusPerNode (8)"),
    ({"security.enabled": True, "kafka.mode": "external", "kafka.external.bootstrap": "k:9093"},
     "security.enabled makes a Strimzi KafkaUser per service: it needs kafka.mode strimzi"),
])
def test_values_that_cannot_work_fail_to_render(helm, values, message):
    out = template(helm, values, check=False)
    assert out.returncode != 0, f"rendered although it cannot work: {values}"
    assert message in out.stderr, out.stderr


@pytest.mark.parametrize("values, where", [
    ({"rollout.gpus": "four"}, "rollout"),
    ({"kafka.topics.partitions.prompts": "many"}, "prompts"),
    ({"learner.kind": "Deployment"}, "kind"),
    ({"nodes.gpusPerNode": 0}, "gpusPerNode"),
    ({"rollout.autoscaling.lagThreshold": 1.5}, "lagThreshold"),
    ({"checkpoints.store": "gcs"}, "store"),
    ({"rollout.gpu": 2}, "gpu"),  # a misspelt key is refused, not ignored
])
def test_schema_refuses_wrong_types(helm, values, where):
    out = template(helm, values, check=False)
    assert out.returncode != 0, f"rendered with {values}"
    assert "schema" in out.stderr.lower() and where in out.stderr, out.stderr
