"""The Kubernetes test tier: one real control plane per test session, started by the project's
own script (scripts/k8s_local.sh: etcd, kube-apiserver, controller-manager, scheduler, kwok nodes,
the CRDs) in a temporary run directory on free ports, and stopped at the end even on failure.

Only a machine without a Go toolchain skips (the binaries are built from Go modules). A build or
start that fails is a test error that shows the end of the script's output and of the components'
logs: a broken tier must not look like a skipped one.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops import ROOT
from tests.k8s.kube import Kube

SCRIPT = ROOT / "scripts" / "k8s_local.sh"
PORT_VARS = ("ETCD_PORT", "ETCD_PEER_PORT", "API_PORT", "KCM_PORT", "SCHED_PORT", "KWOK_PORT")
BUILD_TIMEOUT = 1800  # a cold build is 15 to 20 min on 2 loaded cores (docs/deploy.md); cached, seconds
UP_TIMEOUT = 600  # the first start on a loaded machine is slow; the script's own waits are 180 s each


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def logs_tail(run_dir: Path, lines: int = 15) -> str:
    parts = []
    for log in sorted((run_dir / "logs").glob("*.log")):
        parts.append(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
    return "\n".join(parts)


def script(env: dict[str, str], *subcommands: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *subcommands], env=env, capture_output=True, text=True,
                          timeout=timeout)


def cluster_env(run_dir: Path) -> dict[str, str]:
    """The script's environment: this run dir, free ports, HELM's state inside the run dir."""
    env = dict(os.environ, K8S_RUN=str(run_dir), HELM_CACHE_HOME=str(run_dir / "helm" / "cache"),
               HELM_CONFIG_HOME=str(run_dir / "helm" / "config"), HELM_DATA_HOME=str(run_dir / "helm" / "data"))
    env.update(zip(PORT_VARS, map(str, free_ports(len(PORT_VARS)))))
    return env


def apply_exports(env: dict[str, str], exports: str) -> dict[str, str]:
    """Apply `export NAME=value` lines (scripts/k8s_local.sh env) to a copy of env."""
    env = dict(env)
    for line in exports.splitlines():
        if line.startswith("export ") and "=" in line:
            name, _, value = line[len("export "):].partition("=")
            env[name] = value.replace("$PATH", env.get("PATH", ""))
    return env


def must(out: subprocess.CompletedProcess, what: str, run_dir: Path) -> None:
    if out.returncode != 0:
        pytest.fail(f"scripts/k8s_local.sh {what} failed ({out.returncode}):\n{out.stderr[-4000:]}\n"
                    f"{logs_tail(run_dir)}", pytrace=False)


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain (go) on PATH: the test cluster is built from Go modules "
                    "(scripts/k8s_local.sh build)")
    run_dir = tmp_path_factory.mktemp("k8s")
    env = cluster_env(run_dir)
    must(script(env, "build", "crds", timeout=BUILD_TIMEOUT), "build crds", run_dir)
    try:
        must(script(env, "up", timeout=UP_TIMEOUT), "up", run_dir)
        out = script(env, "env", timeout=60)
        must(out, "env", run_dir)
        env = apply_exports(env, out.stdout)
        yield Kube(run_dir=run_dir, kubeconfig=Path(env["KUBECONFIG"]), env=env)
    finally:
        down = script(env, "down", timeout=600)
        assert down.returncode == 0, f"scripts/k8s_local.sh down failed:\n{down.stderr[-3000:]}"
