"""The chart with hostile values (issue 38): no value reaches a shell, and values.schema.json bounds
the strings that name things.

A value the schema refuses fails `helm template` with the schema's error at its key. A value it
allows reaches a container as one item of its command/args list: the test takes the rendered
lists, expands them as the kubelet does ($(VAR) references, "$$" its escape), and executes them
with a real `sh` for the `sh -c` wrapper, `python` on PATH being a recorder of the argv it is
given; the value must come back as one literal argument and no injected command may have run.
Every `sh -c` script must be the same text whatever the values: scripts carry no values.

Needs only a helm binary (tests/k8s/chart.py finds or builds one; skips without helm and Go).
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.chart import helm_binary, objects, template

# Shell and kubelet syntax a value may carry: command separators, substitutions of both kinds,
# both quotes, a kubelet $(VAR) reference to a variable the learner pod defines, and a lone "$".
HOSTILE_PATH = "/models/a b;touch semi|touch pipe&`touch tick`$(touch dollar)'q'\"dq\"$(MASTER_ADDR)$HOME\\x$"
# What the schema must refuse, at its key (helm names it: at '/runId').
REFUSED = [
    ("runId", "x; id"), ("runId", "$(id)"), ("runId", "`id`"), ("runId", "x'y"), ("runId", 'x"y'),
    ("runId", "x\nid"), ("runId", "Run1"), ("runId", "run_1"), ("runId", "a" * 64), ("runId", ""),
    ("image.tag", "local; id"), ("image.tag", "local\n      securityContext: {privileged: true}"),
    ("image.repository", "m1flow$(id)"), ("imagePullSecrets", ["reg cred"]),
    ("kafka.external.bootstrap", "kafka:9092; id"), ("kafka.strimzi.clusterName", "$(id)"),
    ("kafka.strimzi.clusterName", "k" * 48), ("kafka.strimzi.version", "4.3.1\nid"),
    ("kafka.strimzi.storage.storageClass", "fast'ssd"), ("persistence.existingClaim", "run;id"),
    ("persistence.storageClass", "`id`"), ("checkpoints.s3.credentialsSecret", "creds\nid"),
    ("checkpoints.s3.uri", "s3://bucket/a b"), ("checkpoints.s3.endpoint", "http://minio:9000 id"),
    ("checkpoints.path", "/data/run\nid"), ("monitor.accessTokenSecret", "tok$(id)"),
    ("nodes.gpu.nodeSelector", {"m1flow.io/pool": "gpu; id"}), ("clusterDomain", "cluster.local; id"),
    ("rollout.pdb.maxUnavailable", "1\nfoo: bar"), ("learner.initCheckpoint", "/models/x\nid"),
]


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


def pod_containers(node: object) -> Iterator[dict]:
    """Every container and init container anywhere in a rendered object."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from value
            else:
                yield from pod_containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from pod_containers(item)


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's expansion of a command or args item (k8s.io/kubernetes third_party/forked/golang/
    expansion Expand): "$$" is "$", "$(NAME)" the variable or itself when undefined, any other "$" itself."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = text.find(")", i + 2)
                if close != -1:
                    name = text[i + 2:close]
                    out.append(env.get(name, f"$({name})"))
                    i = close + 1
                    continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def sh_scripts(docs: list[dict]) -> list[str]:
    """The script of every `sh -c` command in the rendered objects."""
    return sorted(c["command"][2] for d in docs for c in pod_containers(d)
                  if c.get("command", [])[:2] == ["sh", "-c"])


def executed_argv(c: dict, work: Path, job_index: int = 0) -> list[str]:
    """What `python` receives when the kubelet starts container c: its command and args expanded
    with the container's env, run for real (a `sh -c` wrapper by sh) with a recorder as `python`."""
    env = {e["name"]: e["value"] for e in c.get("env") or [] if "value" in e}
    argv = [kubelet_expand(item, env) for item in c.get("command", []) + c.get("args", [])]
    work.mkdir()
    bin_dir = work / "bin"
    bin_dir.mkdir()
    recorder = bin_dir / "python"
    recorder.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                        "json.dump(sys.argv[1:], open(os.environ['ARGV_OUT'], 'w'))\n")
    recorder.chmod(0o755)
    out = work / "argv.json"
    subprocess.run(argv, cwd=work, check=True, timeout=30,
                   env={"PATH": f"{bin_dir}:/usr/bin:/bin", "ARGV_OUT": str(out), "HOME": str(work),
                        "JOB_COMPLETION_INDEX": str(job_index)})
    assert sorted(p.name for p in work.iterdir()) == ["argv.json", "bin"], "an injected command ran"
    return ["python", *json.loads(out.read_text())]


def learner_containers(docs: list[dict]) -> dict[str, dict]:
    """role -> the learner container of that role (a JobSet's replicated jobs or the plain Jobs)."""
    found = {}
    for d in docs:
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "learner":
            continue
        if d["kind"] == "JobSet":
            for rj in d["spec"]["replicatedJobs"]:
                found[rj["name"]] = rj["template"]["spec"]["template"]["spec"]["containers"][0]
        elif d["kind"] == "Job":
            found[d["metadata"]["name"].rsplit("-", 1)[1]] = d["spec"]["template"]["spec"]["containers"][0]
    return found


@pytest.mark.parametrize("key, value", REFUSED, ids=[f"{k}={v!r}"[:60] for k, v in REFUSED])
def test_the_schema_refuses_strings_that_are_no_name(helm, key, value):
    out = template(helm, {key: value}, check=False)
    assert out.returncode != 0, f"rendered with {key}={value!r}"
    at = "/" + key.replace(".", "/")
    assert "schema" in out.stderr.lower() and f"at '{at}" in out.stderr, out.stderr


def test_a_namespace_that_is_no_dns_label_fails_the_render(helm):
    out = template(helm, namespace="x; id", check=False)
    assert out.returncode != 0
    assert 'the namespace "x; id" is not a DNS-1123 label' in out.stderr, out.stderr


def test_names_that_kafka_and_kubernetes_both_accept_render(helm):
    """The bounds refuse no ordinary value: a run id of 63, a registry with a port, a bootstrap list."""
    docs = objects(helm, {"runId": "r" * 62 + "7", "image.repository": "registry.example:5000/team/m1flow",
                          "image.tag": "v1.2.3_rc-1", "kafka.mode": "external",
                          "kafka.external.bootstrap": "kafka-0.kafka.svc:9092,[fd00::1]:9092",
                          "rollout.pdb.maxUnavailable": "50%", "imagePullSecrets": ["reg.cred"]})
    args = [c.get("args", []) for d in docs for c in pod_containers(d)]
    assert any(a[a.index("--run-id") + 1] == "r" * 62 + "7" for a in args if "--run-id" in a)
    assert {c["image"] for d in docs for c in pod_containers(d)} == {"registry.example:5000/team/m1flow:v1.2.3_rc-1"}


@pytest.mark.parametrize("kind", ["JobSet", "Job"])
def test_a_hostile_value_reaches_the_learner_as_one_literal_argument(helm, kind, tmp_path):
    """learner.initCheckpoint is a path: the schema allows any printable text, so this one carries
    every shell and kubelet metacharacter. Run as the kubelet and sh would run it, torchrun gets it
    whole, nothing injected runs, and the worker's node rank is still computed."""
    docs = objects(helm, {"learner.kind": kind, "learner.nodes": 3, "learner.initCheckpoint": HOSTILE_PATH,
                          "runId": "run-7", "kafka.mode": "external",
                          "kafka.external.bootstrap": "kafka-0.kafka.svc:9092,[fd00::1]:9092"},
                   release="r1", namespace="team-a")
    roles = learner_containers(docs)
    assert set(roles) == {"leader", "worker"}
    prefix = "r1-m1flow-learner-leader-0-0" if kind == "JobSet" else "r1-m1flow-learner-leader-0"
    tail = ["--nnodes=3", "--nproc-per-node=4", f"--master-addr={prefix}.r1-m1flow-learner.team-a.svc",
            "--master-port=29500", "-m", "svc_learner", "--bootstrap", "kafka-0.kafka.svc:9092,[fd00::1]:9092",
            "--run-id", "run-7", "--run-dir", "/data/run", "--grpc-port", "50051", "--metrics-port", "9100",
            "--init-checkpoint", HOSTILE_PATH, "--batch-groups", "16"]
    for role, rank, index in (("leader", 0, 0), ("worker", 2, 1)):
        got = executed_argv(roles[role], tmp_path / role, job_index=index)
        assert got == ["python", "-m", "torch.distributed.run", f"--node-rank={rank}", *tail], role
    # the wrapper's script as shlex reads it: fixed words, the arguments as one "$@"
    script = roles["worker"]["command"][2]
    assert HOSTILE_PATH not in script and shlex.split(script)[-1] == "$@"


def test_the_services_get_their_values_as_arguments(helm, tmp_path):
    """Every service's container, executed as the kubelet starts it: --bootstrap and --run-id come
    through as the values, each one argument (the services' args are a list: no shell at all)."""
    bootstrap = "kafka-0.kafka.svc:9092,[fd00::1]:9092"
    docs = objects(helm, {"runId": "run-7", "kafka.mode": "external", "kafka.external.bootstrap": bootstrap,
                          "source.sources": [{"name": "arith", "generator": "arith", "weight": 1.0}]},
                   release="r1", namespace="team-a")
    ran = 0
    for d in docs:
        if d["kind"] not in ("StatefulSet", "Deployment"):
            continue
        (c,) = d["spec"]["template"]["spec"]["containers"]
        assert c["command"][:2] != ["sh", "-c"], c["name"]
        got = executed_argv(c, tmp_path / c["name"])
        assert got[:3] == ["python", "-m", f"svc_{c['name']}"]
        assert got[got.index("--bootstrap") + 1] == bootstrap and got[got.index("--run-id") + 1] == "run-7"
        ran += 1
    assert ran == 5  # source, rollout, reward, sandbox, monitor


def test_no_shell_script_carries_a_value(helm):
    """The `sh -c` scripts (the learner worker's rank, policy0 and its wait) are the same text for the
    defaults and for other values of everything that reaches a command: none is built from a value."""
    base = sh_scripts(objects(helm))
    other = sh_scripts(objects(helm, {"learner.initCheckpoint": HOSTILE_PATH, "runId": "run-7",
                                      "image.tag": "v2", "learner.masterPort": 29600, "learner.batchGroups": 32,
                                      "kafka.mode": "external", "kafka.external.bootstrap": "k:9092"},
                               release="r1", namespace="team-a"))
    assert base == other and len(base) == 3, base
