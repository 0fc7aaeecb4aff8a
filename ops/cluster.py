"""`m1flow cluster up|status|down`: the mini-cluster of docker-compose.yml, with the images chosen
for this machine and a status table; `--secure` adds docker-compose.secure.yml (TLS with a
certificate per container and the ACLs: ops/cluster_secure.py, docs/security.md).

`docker compose up` alone works where the public images can be pulled. This command also makes the
engine answer (scripts/docker_engine.sh), picks local stand-in images where no registry answers
(scripts/docker_images.sh), builds the sandbox's run image (scripts/sandbox_image.sh), tags
the services' image by the hash of what its heavy layers are built from, passes the CA bundle the
host's pip trusts to the build and the containers, and removes the dangling images its builds leave.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from m1flow.bus.topics import TopicLayout
from ops import ROOT
from m1flow.security import config as security
from m1flow.security.config import SecurityConfig

SCRIPTS = ROOT / "scripts"
# The image's heavy layers (system packages, pip requirements) are built from these files.
IMAGE_INPUTS = ("Dockerfile", "requirements.txt", "scripts/system_deps.sh", "docker/entrypoint.sh")
# Where the host's own pip / HTTPS clients find the CA bundle they trust (a TLS proxy's included).
CA_BUNDLE_VARS = ("M1FLOW_CA_BUNDLE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


class ClusterError(RuntimeError):
    """The cluster cannot be set up or a compose command failed; the message says which and why."""


class ClusterConfig(BaseModel):
    """Knobs of `m1flow cluster`; each maps to a variable docker-compose.yml reads."""

    project: str = Field("m1flow", description="compose project name (containers m1flow-<service>-<n>)")
    gpu: bool = Field(False, description="add docker-compose.gpu.yml (GPUs for rollout and learner)")
    kafka_port: int = Field(29092, description="host port of the broker (loopback)")
    monitor_port: int = Field(50055, description="host port of Monitor.Report (loopback)")
    dashboard_port: int = Field(8080, description="host port of the monitor's dashboard (loopback)")
    run_volume: str = Field("", description="host directory for /data/run (default: a named volume)")
    run_id: str = Field("compose", description="trace run id of every service")
    batch_groups: int = Field(16, ge=1, description="groups per learner step")
    topics: TopicLayout | None = Field(None, description="partitions per topic, replication factor")
    ca_bundle: str = Field("", description="PEM bundle builds and containers trust (default: the host pip's)")
    torch_index: str = Field("", description="extra pip index for torch, e.g. the CPU wheels")
    service_env: dict[str, str] = Field(default_factory=dict,
                                        description="further M1FLOW_<FIELD> settings for every service")
    secure: bool = Field(False, description="add docker-compose.secure.yml: the broker over TLS with client "
                         "certificates and ACLs, each container its own identity (docs/security.md)")
    secrets_dir: str = Field("", description="host folder of the secure cluster's CA and identities "
                             "(default: $M1FLOW_CACHE/docker/<project>-secrets)")

    @property
    def secrets_path(self) -> Path:
        return Path(self.secrets_dir).resolve() if self.secrets_dir else _state_dir() / f"{self.project}-secrets"

    def compose_env(self) -> dict[str, str]:
        env = {"M1FLOW_KAFKA_PORT": str(self.kafka_port), "M1FLOW_MONITOR_PORT": str(self.monitor_port),
               "M1FLOW_DASHBOARD_PORT": str(self.dashboard_port), "M1FLOW_RUN_ID": self.run_id,
               "M1FLOW_BATCH_GROUPS": str(self.batch_groups), "TORCH_INDEX": self.torch_index}
        if self.run_volume:
            env["M1FLOW_RUN_VOLUME"] = str(Path(self.run_volume).resolve())
        if self.topics is not None:
            env["M1FLOW_TOPICS"] = self.topics.model_dump_json()
        if self.service_env:
            env["M1FLOW_ENV_FILE"] = str(_env_file(self.project, self.service_env))
        bundle = self.ca_bundle or next((os.environ[v] for v in CA_BUNDLE_VARS if os.environ.get(v)), "")
        if bundle:
            env["M1FLOW_CA_BUNDLE"] = bundle
        if self.secure:
            env["M1FLOW_SECRETS_DIR"] = str(self.secrets_path)
        return env


@dataclass
class Container:
    name: str
    service: str
    replica: int
    state: str  # running, exited, restarting, paused, created
    health: str  # healthy, unhealthy, starting, or "" without a health check
    status: str  # docker's own words ("Up 2 minutes (healthy)")
    ports: dict[int, int] = field(default_factory=dict)  # container port -> host port

    @property
    def metrics_url(self) -> str:
        port = self.ports.get(9100)
        return f"http://127.0.0.1:{port}/metrics" if port else "-"


class Cluster:
    def __init__(self, config: ClusterConfig | None = None, say=None) -> None:  # noqa: ANN001
        self.config = config or ClusterConfig()
        self.say = say or (lambda text: print(text, file=sys.stderr))
        self._env: dict[str, str] | None = None

    @property
    def bootstrap(self) -> str:
        return f"localhost:{self.config.kafka_port}"

    @property
    def admin_security(self) -> SecurityConfig | None:
        """The operator's identity on a secure cluster (None in plaintext): what feed, status and
        policy_version connect to localhost:<kafka_port> as."""
        if not self.config.secure:
            return None
        from ops.cluster_secure import identity

        return identity(self.config.secrets_path, "admin")

    @contextmanager
    def operator(self) -> Iterator[None]:
        """Within: the library's Kafka clients act as `admin` on a secure cluster (restored after)."""
        block = self.admin_security
        if block is None:
            yield
            return
        before = security.current()
        security.activate(block)
        try:
            yield
        finally:
            security.activate(before)

    # ---------------------------------------------------------------- set-up
    def prepare(self) -> dict[str, str]:
        """Engine, Compose v2 and base images; returns (and keeps) the environment compose runs with."""
        if self._env is not None:
            return self._env
        _script("docker_engine.sh")
        env = {**os.environ, **self.config.compose_env()}
        for line in _script("docker_images.sh").splitlines():  # what the caller set wins
            key, _, value = line.partition("=")
            env.setdefault(key, value)
        # svc_sandbox's run image (compilers, git, patch, pytest)
        tag = _script("sandbox_image.sh", {"M1FLOW_SANDBOX_BASE": env["M1FLOW_SANDBOX_BASE"]})
        env["M1FLOW_SANDBOX_IMAGE"] = tag.strip().splitlines()[-1]
        env.setdefault("M1FLOW_IMAGE", f"m1flow:{image_key(env['M1FLOW_BASE_IMAGE'])}")
        self._env = env
        return env

    def _light_env(self) -> dict[str, str]:
        """Enough for commands that build and create nothing (ps, down): no images made or looked up."""
        if self._env is not None:
            return self._env
        _script("docker_engine.sh")
        return {**os.environ, **self.config.compose_env()}

    def compose(self, *args: str, capture: bool = False, check: bool = True,
                timeout: float | None = None, light: bool = False) -> subprocess.CompletedProcess:
        files = ["-f", str(ROOT / "docker-compose.yml")]
        if self.config.gpu:
            files += ["-f", str(ROOT / "docker-compose.gpu.yml")]
        if self.config.secure:
            files += ["-f", str(ROOT / "docker-compose.secure.yml")]
        cmd = ["docker", "compose", "-p", self.config.project, *files, *args]
        out = subprocess.run(cmd, cwd=ROOT, env=self._light_env() if light else self.prepare(), text=True,
                             timeout=timeout, capture_output=capture)
        if check and out.returncode != 0:
            detail = f":\n{(out.stdout or '')[-2000:]}{(out.stderr or '')[-2000:]}" if capture else ""
            raise ClusterError(f"`docker compose {' '.join(args)}` exited with {out.returncode}{detail}")
        return out

    def build(self, quiet: bool = False, keep: int = 2) -> None:
        """Build the services' image (once: only policy0 names the build), drop the copy it replaced,
        and all but the `keep` newest images of other requirement sets (other checkouts may use them)."""
        self.compose("build", "policy0", capture=quiet)  # the sandbox image: scripts/sandbox_image.sh
        subprocess.run(["docker", "image", "prune", "-f", "--filter", "label=org.m1flow.image=services"],
                       capture_output=True, check=False)
        listed = subprocess.run(["docker", "images", "--filter", "label=org.m1flow.image=services",
                                 "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True)
        current = self.prepare()["M1FLOW_IMAGE"]
        older = [tag for tag in listed.stdout.split() if tag != current][max(0, keep - 1):]  # newest first
        if older:  # an image a container still uses stays (docker refuses without -f)
            subprocess.run(["docker", "rmi", *older], capture_output=True, check=False)

    # ---------------------------------------------------------------- lifecycle
    def up(self, scale: dict[str, int] | None = None, build: bool = True, timeout_s: float = 900,
           quiet: bool = False) -> None:
        """Everything up and healthy (compose's --wait), the initial policy included. Secure: the
        CA and identities first (made once, reused after), and the mode recorded for the other actions."""
        if self.config.secure:
            from ops.cluster_secure import make_secrets

            make_secrets(self.config.secrets_path)
        _record_mode(self.config)
        if build:
            self.build(quiet)
        args = ["up", "-d", "--wait", "--wait-timeout", str(int(timeout_s))]
        for service, count in (scale or {}).items():
            args += ["--scale", f"{service}={count}"]
        try:
            self.compose(*args, capture=True)
        except ClusterError as exc:  # say why: the last lines of what failed or is unhealthy
            raise ClusterError(f"{exc}{self._failed_logs()}") from None

    def _failed_logs(self, lines: int = 15) -> str:
        out = []
        for c in self.containers():
            if c.health == "unhealthy" or (c.state == "exited" and "Exited (0)" not in c.status):
                logs = subprocess.run(["docker", "logs", "--tail", str(lines), c.name], capture_output=True, text=True)
                out.append(f"\n--- {c.name} ({c.status}):\n{(logs.stdout + logs.stderr).strip()}")
        return "".join(out)

    def down(self, volumes: bool = True) -> None:
        """Stop and remove the containers (and with `volumes`, the run and broker volumes: then the
        recorded mode too). A secure cluster's secrets folder stays, for the next `up --secure`."""
        self.compose("down", "--remove-orphans", "-t", "20", *(["-v"] if volumes else []), capture=True,
                     light=True)
        if volumes:
            _mode_file(self.config.project).unlink(missing_ok=True)

    def feed(self, n: int, seed: int = 1, group_size: int = 8, prefix: str = "arith") -> list[str]:
        """Publish n arithmetic prompts from the host; returns their prompt ids."""
        from m1flow.bus import Producer
        from ops.feed import publish
        from m1flow.tasks.arith import problems
        from ops.warmstart import WarmStartConfig

        producer = Producer(self.bootstrap, "cluster-feed", security=self.admin_security)
        try:
            items = problems(seed=seed, n=n, max_operand=WarmStartConfig().max_operand, prefix=prefix)
            return publish(producer, items, group_size=group_size, run_id=self.config.run_id)
        finally:
            producer.close()

    # ---------------------------------------------------------------- inspection
    def containers(self, service: str | None = None) -> list[Container]:
        out = self.compose("ps", "--all", "--format", "json", *([service] if service else []), capture=True,
                           light=True)
        rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip().startswith("{")]
        found = []
        for row in rows:
            ports = {p["TargetPort"]: p["PublishedPort"] for p in row.get("Publishers") or () if p.get("PublishedPort")}
            replica = int(row["Name"].rsplit("-", 1)[-1]) if row["Name"].rsplit("-", 1)[-1].isdigit() else 0
            found.append(Container(row["Name"], row["Service"], replica, row["State"], row.get("Health", ""),
                                   row.get("Status", ""), ports))
        return sorted(found, key=lambda c: (c.service, c.replica))

    def policy_version(self) -> int | None:
        """The newest version announced on `policy`, or None when the broker does not answer."""
        from ops.topics_io import read_range

        try:
            with self.operator():
                versions = [int(r["value"].get("version", 0)) for r in read_range(self.bootstrap, "policy")
                            if "value" in r]
        except Exception:  # noqa: BLE001 - a status table must show a broker that is down, not die of it
            return None
        return max(versions, default=0)

    def access_token(self) -> str:
        """The token the monitor made for its dashboard and Monitor.Report (they listen on the
        containers' network, beyond loopback: svc_monitor.client.TOKEN_FILE), read from the run volume."""
        from svc_monitor.client import TOKEN_FILE

        out = self.compose("exec", "-T", "svc_monitor", "cat", f"/data/run/{TOKEN_FILE}", capture=True, light=True)
        return out.stdout.strip()

    def status_table(self) -> str:
        containers = self.containers()
        broker_up = any(c.service == "kafka" and c.state == "running" for c in containers)
        version = self.policy_version() if broker_up else None
        mode = f" (TLS as admin, {self.config.secrets_path})" if self.config.secure else ""
        lines = [f"project {self.config.project}   broker {self.bootstrap}{mode}   "
                 f"policy {('v' + str(version)) if version is not None else 'unknown (broker down)'}",
                 f"monitor Monitor.Report 127.0.0.1:{self.config.monitor_port}   "
                 f"dashboard http://127.0.0.1:{self.config.dashboard_port}/?token=<token> "
                 f"(token: `m1flow cluster token`)",
                 f"{'service':<14}{'replica':>7}  {'state':<10}{'health':<11}{'metrics':<36}status"]
        for c in containers:
            lines.append(f"{c.service:<14}{c.replica:>7}  {c.state:<10}{c.health or '-':<11}{c.metrics_url:<36}{c.status}")
        return "\n".join(lines)


def image_key(base_image: str) -> str:
    """A tag for the services' image: it changes when what its heavy layers are built from changes."""
    digest = hashlib.sha256(base_image.encode())
    for name in IMAGE_INPUTS:
        digest.update((ROOT / name).read_bytes())
    return digest.hexdigest()[:12]


def _state_dir() -> Path:
    """Where `m1flow cluster` keeps what it makes on the host, outside the checkout."""
    return Path(os.environ.get("M1FLOW_CACHE", Path.home() / ".cache" / "m1flow")) / "docker"


def _mode_file(project: str) -> Path:
    return _state_dir() / f"{project}.secure"


def _record_mode(config: ClusterConfig) -> None:
    """A secure `up` leaves its secrets folder's path for status, token and down; a plaintext one clears it."""
    path = _mode_file(config.project)
    if config.secure:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(config.secrets_path) + "\n")
    else:
        path.unlink(missing_ok=True)


def recorded_secrets(project: str) -> str | None:
    """The secrets folder of the project's last `up` when it was secure, else None."""
    path = _mode_file(project)
    return path.read_text().strip() if path.exists() else None


def _env_file(project: str, values: dict[str, str]) -> Path:
    """The settings as a compose env file, kept outside the checkout (one per project)."""
    path = _state_dir() / f"{project}.env"
    path.parent.mkdir(parents=True, exist_ok=True)
    # single quotes: compose takes the value literally (no $-interpolation)
    path.write_text("".join(f"{key}='{value}'\n" if "'" not in value else f"{key}={value}\n"
                            for key, value in values.items()))
    return path


def _script(name: str, extra_env: dict[str, str] | None = None) -> str:
    """Run one of scripts/ and return its stdout; its one-line reason on failure."""
    out = subprocess.run(["bash", str(SCRIPTS / name)], capture_output=True, text=True,
                         env={**os.environ, **(extra_env or {})})
    if out.returncode != 0:
        reason = (out.stderr.strip().splitlines() or [f"exit code {out.returncode}"])[-1]
        raise ClusterError(f"scripts/{name}: {reason}")
    return out.stdout


# -------------------------------------------------------------------- CLI
def _config(args: argparse.Namespace) -> ClusterConfig:
    secrets = None if args.action == "up" else recorded_secrets(args.project)  # status/token/down follow up's mode
    if args.secure or secrets is not None:
        return ClusterConfig(project=args.project, gpu=args.gpu, secure=True, secrets_dir=secrets or "")
    return ClusterConfig(project=args.project, gpu=args.gpu)


def cmd_cluster(args: argparse.Namespace) -> int:
    cluster = Cluster(_config(args))
    try:
        if args.action == "up":
            scale = dict(item.split("=", 1) for item in args.scale)
            cluster.say("m1flow cluster: preparing the engine and images, then `docker compose up --wait` "
                        "(the first run builds the image: minutes)")
            cluster.up(scale={k: int(v) for k, v in scale.items()}, build=not args.no_build)
            if args.feed:
                cluster.say(f"published {len(cluster.feed(args.feed))} prompts")
        elif args.action == "down":
            cluster.down(volumes=args.volumes)
            print("down")
            return 0
        elif args.action == "token":
            print(cluster.access_token())
            return 0
        elif args.action == "feed":
            print(f"published {len(cluster.feed(args.feed or 64))} prompts")
            return 0
        print(cluster.status_table())
    except ClusterError as exc:
        print(f"m1flow cluster: {exc}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`m1flow cluster ...` (the hook ops/cli.py calls)."""
    c = sub.add_parser("cluster", help="the docker compose mini-cluster: up, status, feed, token, down")
    c.add_argument("action", choices=["up", "status", "feed", "token", "down"],
                   help="feed: publish --feed prompts (default 64) from the host; "
                        "token: print the one the dashboard and Monitor.Report require")
    c.add_argument("--project", default="m1flow", help="compose project name")
    c.add_argument("--gpu", action="store_true", help="with docker-compose.gpu.yml")
    c.add_argument("--secure", action="store_true",
                   help="with docker-compose.secure.yml: TLS, a certificate per container, ACLs (status, feed, "
                        "token and down follow the mode of the last up)")
    c.add_argument("--scale", nargs="*", default=[], help="e.g. svc_reward=3 svc_rollout=3")
    c.add_argument("--no-build", action="store_true", help="use the image as it is")
    c.add_argument("--feed", type=int, default=0, help="up: publish this many prompts once up; feed: how many")
    c.add_argument("--volumes", action="store_true", help="down: also delete the run and broker volumes")
    c.set_defaults(func=cmd_cluster)
