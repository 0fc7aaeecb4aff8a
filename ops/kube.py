"""`m1flow kube render|install|status|uninstall`: the Helm chart (deploy/helm/m1flow) against the
current kube context, with a status table like `m1flow cluster status`'s.

Why a command over plain `helm`: an operator wants one place that renders with the chart's checks
(a KEDA bound over the partitions, a GPU request over the node size, a missing secret fail here,
before anything reaches the cluster), installs and waits, and then answers "is it running": pods per
role, the node each landed on, readiness (the services' gRPC health, through the probes) and, given
a bootstrap address the operator reaches, the consumer lag per group.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ops import ROOT

CHART = ROOT / "deploy" / "helm" / "m1flow"
TOOL_CACHE = Path(os.environ.get("M1FLOW_K8S_CACHE")  # where scripts/k8s_local.sh builds them
                  or Path(os.environ.get("M1FLOW_CACHE", Path.home() / ".cache" / "m1flow")) / "k8s") / "bin"
COMPONENT = "app.kubernetes.io/component"
INSTANCE = "app.kubernetes.io/instance"


class KubeError(RuntimeError):
    """A helm or kubectl call failed; the message carries its own words."""


def tool(name: str) -> str:
    """`helm` or `kubectl` from PATH, else the one scripts/k8s_local.sh built."""
    built = sorted(glob.glob(str(TOOL_CACHE / "*" / name)) + glob.glob(str(TOOL_CACHE / "tools" / f"{name}-*" / name)),
                   reverse=True)
    found = shutil.which(name) or next(iter(built), None)
    if found is None:
        raise KubeError(f"{name} not found on PATH or under {TOOL_CACHE} (bash scripts/k8s_local.sh build)")
    return found


@dataclass
class Release:
    name: str = "m1flow"
    namespace: str = "m1flow"
    values: tuple[Path, ...] = ()
    sets: tuple[str, ...] = ()
    kubeconfig: str | None = None
    set_json: tuple[str, ...] = ()

    def _run(self, argv: list[str], check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        if self.kubeconfig:
            env["KUBECONFIG"] = self.kubeconfig
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
        if check and out.returncode:
            raise KubeError(f"{Path(argv[0]).name} {argv[1]} failed: {(out.stderr or out.stdout).strip()}")
        return out

    def _chart_args(self) -> list[str]:
        args = [self.name, str(CHART), "--namespace", self.namespace]
        for v in self.values:
            args += ["-f", str(v)]
        for s in self.sets:
            args += ["--set", s]
        for s in self.set_json:
            args += ["--set-json", s]
        return args

    def render(self) -> str:
        """The manifests; the chart's own checks fail here with their message."""
        return self._run([tool("helm"), "template", *self._chart_args()]).stdout

    def install(self, wait_s: int = 600) -> str:
        return self._run([tool("helm"), "upgrade", "--install", "--create-namespace", "--wait",
                          "--timeout", f"{wait_s}s", *self._chart_args()], timeout=wait_s + 60).stdout

    def uninstall(self, wait_s: int = 300) -> str:
        return self._run([tool("helm"), "uninstall", self.name, "--namespace", self.namespace, "--wait",
                          "--timeout", f"{wait_s}s"], timeout=wait_s + 60).stdout

    def pods(self) -> list[dict]:
        out = self._run([tool("kubectl"), "get", "pods", "--namespace", self.namespace, "-l",
                         f"{INSTANCE}={self.name}", "-o", "json"])
        return json.loads(out.stdout)["items"]

    def status(self, bootstrap: str | None = None) -> str:
        return status_table(self.pods(), lag_by_group(bootstrap) if bootstrap else None)


def pod_row(pod: dict) -> tuple[str, str, str, str, str, int]:
    """(role, pod, node, phase, ready, restarts) of one pod from `kubectl get pods -o json`."""
    meta, spec, st = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
    ready = next((c["status"] for c in st.get("conditions", []) if c["type"] == "Ready"), "Unknown")
    phase = st.get("phase", "?")
    if phase == "Pending":
        unschedulable = next((c for c in st.get("conditions", []) if c["type"] == "PodScheduled"
                              and c["status"] == "False"), None)
        if unschedulable:
            phase = f"Pending ({unschedulable.get('reason', '')})"
    restarts = sum(c.get("restartCount", 0) for c in st.get("containerStatuses", []))
    return (meta.get("labels", {}).get(COMPONENT, "?"), meta["name"], spec.get("nodeName", "-"), phase,
            "yes" if ready == "True" else "no", restarts)


def lag_by_group(bootstrap: str) -> dict[str, int | None]:
    """Total consumer lag per m1flow consumer group (the ones KEDA scales on); None: not known."""
    from m1flow.bus.lag import GroupLag
    from m1flow.bus.topics import PROMPTS, ROLLOUTS, SCORED

    lag = GroupLag(bootstrap, "m1flow-kube-status")
    try:
        return {group: lag.lag(group, topic)
                for group, topic in (("m1flow-rollout", PROMPTS.name), ("m1flow-reward", ROLLOUTS.name),
                                     ("m1flow-learner", SCORED.name))}
    finally:
        lag.close()


def status_table(pods: list[dict], lag: dict[str, int | None] | None = None) -> str:
    rows = sorted(pod_row(p) for p in pods)
    lines = [f"{'role':<10}{'pod':<44}{'node':<14}{'phase':<34}{'ready':<7}{'restarts':>8}"]
    lines += [f"{r:<10}{p:<44}{n:<14}{ph:<34}{rd:<7}{rs:>8}" for r, p, n, ph, rd, rs in rows]
    if lag is not None:
        lines.append("")
        lines += [f"lag {group:<18}{'-' if value is None else value:>10}" for group, value in lag.items()]
    return "\n".join(lines)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`m1flow kube ...` (the hook ops/cli.py calls)."""
    k = sub.add_parser("kube", help="the Helm chart on the current kube context: render, install, status, uninstall")
    k.add_argument("action", choices=["render", "install", "status", "uninstall"])
    k.add_argument("--release", default="m1flow")
    k.add_argument("--namespace", default="m1flow")
    k.add_argument("-f", "--values", action="append", type=Path, default=[], help="a values file (repeatable)")
    k.add_argument("--set", action="append", default=[], dest="sets", help="key=value (repeatable)")
    k.add_argument("--set-json", action="append", default=[], help="key=JSON value (repeatable)")
    k.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG or ~/.kube/config")
    k.add_argument("--wait-s", type=int, default=600, help="install/uninstall: how long to wait")
    k.add_argument("--lag-bootstrap", default=None, help="status: a Kafka address to read consumer lag from")
    k.set_defaults(func=cmd_kube)


def cmd_kube(args: argparse.Namespace) -> int:
    release = Release(args.release, args.namespace, tuple(args.values), tuple(args.sets), args.kubeconfig,
                      tuple(args.set_json))
    try:
        if args.action == "render":
            print(release.render(), end="")
        elif args.action == "install":
            release.install(args.wait_s)
            print(release.status(args.lag_bootstrap))
        elif args.action == "status":
            print(release.status(args.lag_bootstrap))
        else:
            print(release.uninstall(args.wait_s), end="")
    except (KubeError, subprocess.TimeoutExpired) as exc:
        print(f"m1flow kube {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0
