"""The whole local mini-cluster: broker, topics, an initial policy and every service as processes.

`m1flow up`, the demo and the end-to-end tests all start the system through this one class.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from m1flow.bus.admin import ensure_topics
from m1flow.checkpoint import LEARNER_CHECKPOINTS
from ops import ROOT
from ops.kafka import Broker
from ops.acls import apply_acls, grpc_methods_json
from ops.launcher import ServiceProcess, launch, stop_together
from ops.services import NAMES, ON_DEMAND, service
from m1flow.security import config as security
from m1flow.security.config import SecurityConfig
from m1flow.security.pki import CertificateAuthority, signing_key
from m1flow.runtime.tether import require_main_thread
from ops import warmstart
from ops.interrupt import deferred
from ops.warmstart import WarmStartConfig, warm_started_policy

# Services others call over gRPC while they finish their in-flight work (reward, and svc_eval's scorer, run
# code in the sandbox): a stop signals them after the rest have exited.
STOP_LAST = ("sandbox",)
# A warm start's pace, for the line said before it: the default hybrid one (300 steps of 64 examples) took
# about 8 minutes on 2 CPU cores (issue 38), 1.6 s a step. Rough by design: other tasks and machines differ.
WARM_START_S_PER_STEP = 1.6


def cached_warm_start(cfg: WarmStartConfig) -> Path:
    """The folder ops.warmstart.cached_policy trains `cfg` into (and copies from once it is there). Its naming
    is read here rather than added there: that module's own bytes are part of every cached policy's key."""
    return warmstart._cache_root() / f"warmstart-{cfg.arch}-{warmstart._key(cfg)}"  # noqa: SLF001


def warm_start_plan(cfg: WarmStartConfig) -> str:
    """One line saying what a warm start of `cfg` will do and about how long it takes: a copy when it is
    cached, else minutes of training (once; its progress lines follow)."""
    cached = cached_warm_start(cfg)
    what = f"{cfg.arch}, task {cfg.task}, {cfg.steps} SFT steps of {cfg.batch_size} examples"
    if (cached / "done.json").exists():
        return f"no --model: starting from the cached warm-started policy ({what}) in {cached}"
    minutes = max(1, round(cfg.steps * cfg.batch_size / 64 * WARM_START_S_PER_STEP / 60))
    return (f"no --model: training a starting policy first ({what}): roughly {minutes} min on 2 CPU cores, "
            f"once (then cached in {cached}); --model DIR starts from a model of yours instead")


class Stack:
    def __init__(self, run_dir: str | Path, replicas: dict[str, str | int] | None = None,
                 service_args: dict[str, list[str]] | None = None, run_id: str = "local",
                 warmstart: WarmStartConfig | None = None, bootstrap: str | None = None,
                 model: str | Path | None = None, secure: bool = False, tethered: bool = False,
                 keep_broker: bool = False) -> None:
        """model: the policy the learner starts from (any local model directory); None: a warm
        start of `warmstart` (the hybrid model by default). secure: a CA and one certificate per
        service under run_dir/secrets, the broker over TLS with client certificates and the ACLs
        of ops/acls.py; every service gets its own identity (docs/security.md).
        tethered: the broker and every service die with this process, even when it is SIGKILLed
        (`m1flow up`, a tool's private stack: `m1flow data profile`); their data stays for the next start.
        Every tethered child is started from the main thread (m1flow.runtime.tether says why).
        keep_broker: stop() leaves the broker running (and it is not tethered: it outlives this process)."""
        self.run_dir = Path(run_dir).resolve()
        self.model = Path(model).resolve() if model is not None else None
        self.replicas = {name: int((replicas or {}).get(name, 1)) for name in NAMES}
        self.service_args = service_args or {}
        self.run_id = run_id
        self.warmstart = warmstart or WarmStartConfig()
        self.secure = secure
        self.secrets = self.run_dir / "secrets"
        self.tethered = tethered
        self.keep_broker = keep_broker
        self.broker = Broker(self.run_dir / "kafka", secrets=self.secrets if secure else None,
                             tethered=tethered and not keep_broker)
        self.bootstrap = bootstrap
        self.procs: list[ServiceProcess] = []
        self.phase = "getting ready"  # what start() is doing: said when a start is interrupted or fails

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

    @property
    def policy0(self) -> Path:
        return self.run_dir / "policy0"

    def policy_plan(self) -> str | None:
        """One line on where the learner's starting policy will come from, to say before initial_policy()
        (which may train for minutes); None when a model was given."""
        if self.model is not None:
            return None
        if (self.policy0 / "done.json").exists():
            return f"no --model: starting from the policy warm-started earlier in {self.policy0}"
        return warm_start_plan(self.warmstart)

    def initial_policy(self) -> Path:
        """The policy the learner starts from: the given model, or a warm start (cached across runs).
        The copy is made beside policy0 and moved in place, so one cut short is never taken for whole."""
        if self.model is not None:
            return self.model
        dest = self.policy0
        if not (dest / "done.json").exists():
            self.phase = "warm-starting the policy"
            if not (cached_warm_start(self.warmstart) / "done.json").exists():
                self._train_warm_start()
            tmp = dest.with_name(dest.name + ".tmp")
            try:
                warm_started_policy(tmp, self.warmstart)
                shutil.rmtree(dest, ignore_errors=True)
                tmp.rename(dest)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def _train_warm_start(self) -> None:
        """Train the warm start into the cache in a child process (ops.warmstart_job says why), its progress
        lines on this one's output; killed at once when this one is interrupted or fails."""
        job = ["-m", "ops.warmstart_job", self.warmstart.model_dump_json()]
        if self.tethered:
            require_main_thread("the warm start")
            job = ["-m", "ops.tethered", str(os.getpid()), *job[1:]]
        with deferred():
            proc = subprocess.Popen([sys.executable, *job], cwd=ROOT, stdin=subprocess.DEVNULL, start_new_session=True,
                                    env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            code = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if code != 0:
            raise RuntimeError(f"the warm start exited with code {code} (its error is above)")

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
        """Start one replica; it is in `procs` (so stop() stops it) from the moment its process exists."""
        entry = None
        if self.tethered:
            require_main_thread(f"{name}-{replica}")
            entry = [sys.executable, "-m", "ops.tethered", str(os.getpid()), service(name).module]
        args = self.args_for(name)
        with deferred():
            proc = launch(name, self.run_dir, self.bootstrap, args, replica=replica, run_id=self.run_id,
                          wait=False, env=self.identity_env(name), entry=entry)
            self.procs.append(proc)
        return proc.wait_ready() if wait else proc

    def start(self, with_demo_policy: bool = True, services: tuple[str, ...] = NAMES) -> None:
        """Broker, topics, initial policy, then the services in dependency order. A start that
        fails anywhere stops everything it started before raising: nothing is left running."""
        try:
            if with_demo_policy:  # first: minutes of training with nothing else running yet
                self.initial_policy()
            self.phase = "starting the broker"
            self.start_broker()
            for name in (s for s in services if self.configured(s)):  # sandbox before reward, learner
                # (announces v0) before rollout, the source after both (the learner's batch sizes its lead)
                self.phase = f"starting {name}"
                started = [self.start_service(name, i, wait=False) for i in range(self.replicas[name])]
                for proc in started:
                    proc.wait_ready()
            self.phase = "running"
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

    def stop(self, broker: bool | None = None) -> None:
        """Every service, then the broker (unless `broker` is False, or None and keep_broker). The services
        stop together (SIGTERM to all, then the wait), those others call (STOP_LAST) after the rest."""
        with deferred():  # a stop signal now waits for the stop under way (a second one exits at once)
            first = [p for p in self.procs if p.name not in STOP_LAST]
            stop_together(first)
            stop_together([p for p in self.procs if p not in first])
            self.procs.clear()
            if broker if broker is not None else not self.keep_broker:
                self.broker.stop()
