"""The Helm chart (deploy/helm/m1flow) as the tests see it: a helm binary, `helm template` parsed
into objects, and the shared settings file read the way compose and the chart read it.

helm comes from M1FLOW_HELM, PATH, or the k8s tier's cache (scripts/k8s_local.sh builds it into
~/.cache/m1flow/k8s/bin/tools/helm-<v>/helm); where none is there and Go is, it is built into that
same cache once (`go install helm.sh/helm/v4/cmd/helm@v4.3.2`, a minute or two warm). Only a
machine with neither skips.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ops import ROOT

CHART = ROOT / "deploy" / "helm" / "m1flow"
SERVICE_ENV = CHART / "files" / "service.env"
HELM_VERSION = os.environ.get("HELM_VERSION", "v4.3.2")
CACHE = Path(os.environ.get("M1FLOW_K8S_CACHE") or Path(os.environ.get("M1FLOW_CACHE", Path.home() / ".cache" / "m1flow")) / "k8s")
TOOLS = CACHE / "bin" / "tools"
BUILD_TIMEOUT = 1800  # cold module downloads and a compile under nice on 2 loaded cores


def find_helm() -> str | None:
    if os.environ.get("M1FLOW_HELM"):
        return os.environ["M1FLOW_HELM"]
    cached = sorted(TOOLS.glob("helm-*/helm")) + sorted((CACHE / "bin").glob("*/helm"))
    return str(cached[0]) if cached else shutil.which("helm")


def helm_binary() -> str:
    """A helm binary, built into the k8s tier's cache if need be; skips only without helm and Go."""
    found = find_helm()
    if found:
        return found
    go = shutil.which("go")
    if go is None:
        pytest.skip("no helm binary (M1FLOW_HELM, PATH, ~/.cache/m1flow/k8s/bin/tools/helm-*/helm) and no Go "
                    "toolchain to build one (go install helm.sh/helm/v4/cmd/helm)")
    with build_lock():  # a background `k8s_local.sh build` (make test) builds helm first: wait for it
        found = find_helm()
        if found:
            return found
        return build_helm(go)


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """scripts/k8s_local.sh's build lock: one build into the cache at a time."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_helm(go: str) -> str:
    target = TOOLS / f"helm-{HELM_VERSION}"
    out = subprocess.run(["nice", "-n", "19", go, "install", "-trimpath", "-ldflags", "-s -w",
                          f"helm.sh/helm/v4/cmd/helm@{HELM_VERSION}"], env={**os.environ, "GOBIN": str(target)},
                         capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    if out.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        pytest.fail(f"building helm {HELM_VERSION} failed:\n{out.stderr[-3000:]}", pytrace=False)
    return str(target / "helm")


def set_args(values: dict[str, object] | None) -> list[str]:
    """--set-json for each dotted key (types stay what Python says: 4 is an integer, "4" a string)."""
    import json
    return [arg for key, value in (values or {}).items() for arg in ("--set-json", f"{key}={json.dumps(value)}")]


def template(helm: str, values: dict[str, object] | None = None, release: str = "m1flow",
             namespace: str = "m1flow", check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([helm, "template", release, str(CHART), "--namespace", namespace, *set_args(values)],
                         capture_output=True, text=True, timeout=120)
    if check and out.returncode != 0:
        raise AssertionError(f"helm template failed ({out.returncode}):\n{out.stderr}")
    return out


def objects(helm: str, values: dict[str, object] | None = None, **kwargs) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(template(helm, values, **kwargs).stdout) if doc]


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod_spec(obj: dict) -> dict:
    """The pod template's spec of a workload (Deployment, StatefulSet, Job, or a JobSet's jobs)."""
    if obj["kind"] == "JobSet":
        raise ValueError("a JobSet has one pod spec per replicated job: use jobset_pods")
    return obj["spec"]["template"]["spec"]


def jobset_pods(obj: dict) -> dict[str, dict]:
    return {rj["name"]: rj["template"]["spec"]["template"] for rj in obj["spec"]["replicatedJobs"]}


_DEFAULT = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*:-(.*)\}$")


def service_env(path: Path = SERVICE_ENV) -> dict[str, str]:
    """files/service.env as both readers take it without host overrides: `${NAME:-default}` is the default."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip("\"'")
        values[key] = _DEFAULT.sub(r"\1", value)
    return values
