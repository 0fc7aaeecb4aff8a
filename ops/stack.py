"""The whole local mini-cluster: broker, topics, an initial policy and every service as processes.

`m1flow up`, the demo and the end-to-end tests all start the system through this one class.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from m1flow.bus.admin import ensure_topics
from m1flow.checkpoint import LEARNER_CHECKPOINTS
from ops.kafka import Broker
from ops.acls import apply_acls, grpc_methods_json
from ops.launcher import ServiceProcess, launch
from ops.services import NAMES, ON_DEMAND, service
from m1flow.security import config as security
from m1flow.security.config import SecurityConfig
from m1flow.security.pki import CertificateAuthority, signing_key
from ops.warmstart import WarmStartConfig, warm_started_policy


class Stack:
    def __init__(self, run_dir: str | Path, replicas: dict[str, str | int] | None = None,
                 service_args: dict[str, list[str]] | None = None, run_id: str = "local",
                 warmstart: WarmStartConfig | None = None, bootstrap: str | None = None,
                 model: str | Path | None = None, secure: bool = False, tethered: bool = False) -> None:
        """model: the policy the learner starts from (any local model directory); None: a warm
        start of `warmstart` (the hybrid model by default). secure: a CA and one certificate per
        service under run_dir/secrets, the broker over TLS with client certificates and the ACLs
        of ops/acls.py; every service gets its own identity (docs/security.md).
        tethered: the broker and every service die with this process, even when it is SIGKILLed
        (a tool's private stack, `m1flow data profile`); their data stays for the next start."""
        self.run_dir = Path(run_dir).resolve()
        self.model = Path(model).resolve() if model is not None else None
        self.replicas = {name: int((replicas or {}).get(name, 1)) for name in NAMES}
        self.service_args = service_args or {}
        self.run_id = run_id
        self.warmstart = warmstart or WarmStartConfig()
        self.secure = secure
        self.secrets = self.run_dir / "secrets"
        self.tethered = tethered
        self.broker = Broker(self.run_dir / "kafka", secrets=self.secrets if secure else None, tethered=tethered)
        self.bootstrap = bootstrap
        self.procs: list[ServiceProcess] = []

    def start_broker(self) -> str:
        if self.secure:  # the process running the stack is the operator: it probes and reads as `admin`
            security.activate(self.broker.admin_security)
        if self.bootstrap is None:
            self.bootstrap = self.broker.start()
        ensure_topics(self.bootstrap, security=self.broker.admin_security)
        if self.secure:
            apply_acls(self.bootstrap, self.broker.admin_security)
        return self.bootstrap

    def identity_env(self, name: str) -> dict[str, str]:
        """The environment that gives service `name` its own identity (nothing when not secure):
        paths only, the keys stay in their 0600 files; and the gRPC method table it enforces."""
        if not self.secure:
            return {}
        ident = CertificateAuthority(self.secrets).identity(name)
        signing, public = signing_key(self.secrets, "learner")
        block = SecurityConfig(enabled=True, ca_file=ident.ca, cert_file=ident.cert, key_file=ident.key,
                               checkpoint_roots=self.checkpoint_roots(), policy_verify_key=public,
                               policy_signing_key=signing if name == "learner" else None)
        return {"M1FLOW_SECURITY": block.model_dump_json(), "M1FLOW_GRPC_METHODS": grpc_methods_json()}

    def checkpoint_roots(self) -> list[Path]:
        """Where an announced policy may lie: the folder the learner writes its checkpoints to, and
        nothing else of the run dir (not `secrets/`, not the logs)."""
        args = self.service_args.get("learner", [])
        given = args[args.index("--checkpoint-dir") + 1] if "--checkpoint-dir" in args[:-1] else None
        return [Path(given).resolve() if given else self.run_dir / LEARNER_CHECKPOINTS]

    def initial_policy(self) -> Path:
        """The policy the learner starts from: the given model, or a warm start (cached across runs)."""
        if self.model is not None:
            return self.model
        dest = self.run_dir / "policy0"
        if not (dest / "done.json").exists():
            warm_started_policy(dest, self.warmstart)
        return dest

    def args_for(self, name: str) -> list[str]:
        args = list(self.service_args.get(name, []))
        if name == "learner" and "--init-checkpoint" not in args:
            args += ["--init-checkpoint", str(self.initial_policy())]
        if name == "reward" and "--sandbox-address" not in args:
            sandbox = self.get("sandbox")
            if sandbox is not None:
                args += ["--sandbox-address", sandbox.grpc_address]
        return args

    def configured(self, name: str) -> bool:
        """Whether a service runs in this stack: the on-demand ones (the prompt source, svc_eval) only
        when given settings (flags here, or their `M1FLOW_SOURCES` / `M1FLOW_EVAL_SETS` in the environment)."""
        if name not in ON_DEMAND:
            return True
        return bool(self.service_args.get(name)) or f"M1FLOW_{service(name).setting.upper()}" in os.environ

    def start_service(self, name: str, replica: int = 0, wait: bool = True) -> ServiceProcess:
        entry = [sys.executable, "-m", "ops.tethered", str(os.getpid()), service(name).module] \
            if self.tethered else None
        proc = launch(name, self.run_dir, self.bootstrap, self.args_for(name), replica=replica,
                      run_id=self.run_id, wait=wait, env=self.identity_env(name), entry=entry)
        self.procs.append(proc)
        return proc

    def start(self, with_demo_policy: bool = True, services: tuple[str, ...] = NAMES) -> None:
        """Broker, topics, initial policy, then the services in dependency order. A start that
        fails anywhere stops everything it started before raising: nothing is left running."""
        try:
            self.start_broker()
            if with_demo_policy:
                self.initial_policy()
            for name in (s for s in services if self.configured(s)):  # sandbox before reward, learner
                # (announces v0) before rollout, the source after both (the learner's batch sizes its lead)
                started = [self.start_service(name, i, wait=False) for i in range(self.replicas[name])]
                for proc in started:
                    proc.wait_ready()
        except BaseException:
            self.stop()
            raise

    def get(self, name: str, replica: int = 0) -> ServiceProcess | None:
        for proc in reversed(self.procs):
            if proc.name == name and proc.replica == replica:
                return proc
        return None

    def restart(self, name: str, replica: int = 0, wait: bool = True) -> ServiceProcess:
        old = self.get(name, replica)
        if old is not None:
            old.stop()
            self.procs.remove(old)
        return self.start_service(name, replica, wait=wait)

    def restart_crashed(self) -> list[str]:
        restarted = []
        for proc in list(self.procs):
            if not proc.alive():
                self.restart(proc.name, proc.replica, wait=False)
                restarted.append(f"{proc.name}-{proc.replica}")
        return restarted

    def status_table(self) -> str:
        from m1flow.runtime.health import check

        lines = [f"broker   {self.bootstrap}", f"{'service':<12}{'replica':>8}{'pid':>9}  {'grpc':<22}{'health':<14}metrics"]
        for proc in self.procs:
            info = proc.info()
            state = check(info["grpc"]) if info and proc.alive() else "DOWN"
            lines.append(f"{proc.name:<12}{proc.replica:>8}{info.get('pid', '-'):>9}  "
                         f"{info.get('grpc', '-'):<22}{state:<14}{info.get('metrics_port', '-')}")
        return "\n".join(lines)

    def stop(self, broker: bool = True) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()
        if broker:
            self.broker.stop()
