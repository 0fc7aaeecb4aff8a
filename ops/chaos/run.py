"""A chaos run, start to finish: `m1flow up` in a subprocess (svc_eval on a held-out set beside the
loop), prompts fed, faults injected on a
schedule while a watcher samples progress, a settling phase, then the invariants and a timeline
with the recovery time of every fault. `m1flow chaos` and tests/integration/test_chaos.py run it.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from m1flow.bus.admin import end_offsets
from ops.kafka import Broker
from ops import ROOT
from ops.chaos.faults import READERS, Fault, Injected, Injector, plan
from ops.chaos.invariants import Report, check, check_evals, check_source, settled
from ops.services import NAMES
from m1flow.security import config as security
from ops.warmstart import WarmStartConfig


class ChaosConfig(BaseModel):
    run_dir: Path = Path("run/chaos")
    seed: int = 1
    cycles: int = Field(2, ge=1, description="rounds of faults; each hits every service, the broker, the input")
    prompts: int = Field(240, ge=1, description="prompts the source publishes (one epoch of an arith generator)")
    source_lead_steps: float = Field(16.0, gt=0, description="the source's lead, in learner batches")
    group_size: int = 4
    batch_groups: int = 4
    spacing_s: float = Field(12.0, gt=0, description="mean gap between two faults")
    freeze_s: float = Field(10.0, gt=0, description="how long a frozen broker stays frozen")
    settle_s: float = Field(240.0, gt=0, description="after the last fault, how long the loop may take to finish")
    start_timeout_s: float = 600.0
    services: tuple[str, ...] = NAMES
    secure: bool = Field(False, description="`m1flow up --secure`; this process injects and checks as `admin`")
    # service settings for a run that recovers within the test's budget (env: every service reads its own)
    env: dict[str, str] = Field(default_factory=lambda: {
        "M1FLOW_LIVENESS": json.dumps({"stall_after_s": 60, "join_after_s": 45, "broker_down_after_s": 20}),
        "M1FLOW_GROUP_TIMEOUT_S": "20",
    })


@dataclass
class Sample:
    t: float  # time.time()
    scored: int  # end offset of `scored`
    version: int  # newest learner checkpoint version


@dataclass
class Watcher:
    """Samples progress once a second: how many groups are scored, which version is trained."""

    bootstrap: str
    run_dir: Path
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run, name="chaos-watch", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        from m1flow.checkpoint import latest

        while not self._stop.wait(1.0):
            try:
                scored = sum(end_offsets(self.bootstrap, "scored").values())
            except Exception:  # noqa: BLE001 - the broker may be the fault
                scored = self.samples[-1].scored if self.samples else 0
            found = latest(self.run_dir / "learner" / "checkpoints")
            version = int(found.name[1:]) if found else 0
            self.samples.append(Sample(time.time(), scored, version))

    def recovery(self, since: float) -> tuple[float | None, float | None]:
        """Seconds from `since` until the next new scored group, and until the next new version."""
        before = [s for s in self.samples if s.t <= since]
        base = before[-1] if before else Sample(since, 0, 0)
        scored = next((s.t - since for s in self.samples if s.t > since and s.scored > base.scored), None)
        version = next((s.t - since for s in self.samples if s.t > since and s.version > base.version), None)
        return scored, version


def timeline(entries: list[Injected], watcher: Watcher, t0: float) -> str:
    lines = [f"{'t (s)':>7}  {'fault':<28}{'next scored':>12}{'next version':>13}  note"]
    for entry in entries:
        scored, version = watcher.recovery(entry.wall)
        fmt = lambda v: f"{v:.1f}s" if v is not None else "never"  # noqa: E731
        lines.append(f"{entry.wall - t0:>7.1f}  {str(entry.fault):<28}{fmt(scored):>12}{fmt(version):>13}  {entry.note}")
    return "\n".join(lines)


class ChaosRun:
    def __init__(self, cfg: ChaosConfig, say=print) -> None:  # noqa: ANN001
        self.cfg = cfg
        self.say = say
        self.run_dir = cfg.run_dir.resolve()
        self.up: subprocess.Popen | None = None

    def m1flow(self, *args: str, **kwargs) -> subprocess.CompletedProcess:  # noqa: ANN003
        return subprocess.run([sys.executable, "-m", "ops", "--run-dir", str(self.run_dir), *args],
                              cwd=ROOT, env=self._env(), capture_output=True, text=True, **kwargs)

    def _env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(ROOT), "M1FLOW_BATCH_GROUPS": str(self.cfg.batch_groups),
                "M1FLOW_GROUP_SIZE": str(self.cfg.group_size), **self.cfg.env}

    def start(self) -> str:
        """`m1flow up` in the background; returns the bootstrap once every service is up."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.run_dir / "up.out", "ab")
        sources = self.run_dir / "sources.json"
        sources.write_text(json.dumps(self.source_settings()))
        self.up = subprocess.Popen([sys.executable, "-m", "ops", "--run-dir", str(self.run_dir), "up",
                                    "--sources", str(sources), *(["--secure"] if self.cfg.secure else []),
                                    "--restart-policy", json.dumps({"unhealthy_restart_s": 60, "backoff_max_s": 8})],
                                   cwd=ROOT, env=self._env(), stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        deadline = time.monotonic() + self.cfg.start_timeout_s
        while time.monotonic() < deadline:
            if self.up.poll() is not None:
                raise RuntimeError(f"m1flow up exited with {self.up.returncode}:\n{self.tail()}")
            if "stop with Ctrl-C" in self.tail():
                if self.cfg.secure:  # the garbage, the watcher and the checks need the operator's rights
                    security.activate(Broker(self.run_dir / "kafka").admin_security)
                return json.loads((self.run_dir / "up.json").read_text())["bootstrap"]
            time.sleep(1)
        raise TimeoutError(f"m1flow up not ready after {self.cfg.start_timeout_s:.0f}s:\n{self.tail()}\n{self.start_state()}")

    def tail(self, lines: int = 60) -> str:
        path = self.run_dir / "up.out"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def start_state(self) -> str:
        """Where a slow start stands: whether the initial policy is written, the broker's and each started
        service's last lines (a start that times out says which step it was on)."""
        policy = "written" if (self.run_dir / "policy0" / "done.json").exists() else "not written yet (warm start)"
        parts = [f"initial policy: {policy}"]
        for log in [self.run_dir / "kafka" / "broker.out", *sorted((self.run_dir / "logs").glob("*.log"))]:
            if log.exists():
                parts.append(f"--- {log.name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-5:]))
        return "\n".join(parts)

    def source_settings(self) -> dict:
        """svc_source publishes the run's prompts: one epoch of the arith generator, a lead ahead."""
        # the operands the warm start was trained on (as `m1flow feed` uses): larger sums leave most groups
        # all wrong, so dynamic sampling skips them and the run ends with too few versions
        arith = {"generator": "arith", "size": self.cfg.prompts, "seed": self.cfg.seed,
                 "config": {"max_operand": WarmStartConfig().max_operand}}
        # svc_eval's held-out set: products, which the sums and differences drawn for training never
        # are (so nothing is dropped from the stream the invariants count), every 4th version
        heldout = {"generator": "arith", "name": "heldout", "seed": self.cfg.seed, "prompts": 8, "samples": 2,
                   "config": {"max_operand": WarmStartConfig().max_operand, "ops": "*"}}
        return {"sources": [arith], "eval_sets": [heldout], "every_versions": 4,
                "max_epochs": 1, "lead_steps": self.cfg.source_lead_steps, "publish_batch": 16}

    def expected_prompts(self) -> set[str]:
        """The prompt ids the source will publish, from the same generator (m1flow.data)."""
        from m1flow.data.dataset import DatasetConfig, open_source

        source = open_source(DatasetConfig(**self.source_settings()["sources"][0]))
        return {record.to_prompt(1).prompt_id for _, record in source.records()}

    def run(self) -> Report:
        cfg = self.cfg
        before = security.current()
        try:
            bootstrap = self.start()
            prompt_ids = self.expected_prompts()
            watcher = Watcher(bootstrap, self.run_dir)
            watcher.start()
            injector = Injector(self.run_dir, bootstrap)
            t0 = time.time()
            faults = plan(cfg.seed, cfg.cycles, cfg.services, cfg.spacing_s, cfg.freeze_s)
            for fault in faults:
                time.sleep(max(0.0, t0 + fault.at_s - time.time()))
                entry = injector.inject(fault)
                self.say(f"[{time.time() - t0:6.1f}s] {fault}: {entry.note}")
            injector.close()
            self.settle(bootstrap, prompt_ids, injector.log.bad_records)
            watcher.stop()
            report = check(bootstrap, self.run_dir, prompt_ids, injector.log.bad_records, READERS, cfg.batch_groups)
            kills = sum(1 for e in injector.log.entries if e.fault.target == "source")
            check_source(report, bootstrap, "local/m1flow-source", cfg.prompts, kills * 16)
            check_evals(report, bootstrap, self.run_dir)
            report.add("SIGTERM to `m1flow up` stops everything", *self.terminate())
            self.say(timeline(injector.log.entries, watcher, t0))
            self.say(self.restarts())
            self.say(report.table())
            return report
        finally:
            self.stop()
            security.activate(before)

    def terminate(self) -> tuple[bool, str]:
        """SIGTERM the supervisor as a user's Ctrl-C would: it exits 143 (128 + SIGTERM), and every process
        it ran must be gone."""
        import psutil

        state = json.loads((self.run_dir / "up.json").read_text())
        pids = [e["pid"] for e in state["services"]] + [json.loads((self.run_dir / "kafka" / "broker.json").read_text())["pid"]]
        self.up.send_signal(signal.SIGTERM)
        try:
            code = self.up.wait(180)
        except subprocess.TimeoutExpired:
            return False, "m1flow up did not exit within 180 s of SIGTERM"
        left = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        again = self.m1flow("down", timeout=180).stdout.strip()
        return (code == 128 + signal.SIGTERM and not left and "nothing was running" in again,
                f"exit {code}; {len(pids)} processes, {len(left)} left; then `m1flow down`: {again!r}")

    def settle(self, bootstrap: str, prompt_ids: set[str], bad_records: list[tuple[str, int, int]]) -> None:
        """Wait until the run is done with what it was fed (invariants.settled), at most settle_s."""
        deadline = time.monotonic() + self.cfg.settle_s
        while time.monotonic() < deadline:
            if settled(bootstrap, self.run_dir, prompt_ids, bad_records, READERS, self.cfg.batch_groups):
                return
            time.sleep(2)
        self.say(f"settling did not finish within {self.cfg.settle_s:.0f}s; checking what there is")

    def restarts(self) -> str:
        lines = [line for line in self.tail(100000).splitlines()
                 if "restarted" in line or "exited with code" in line or "not SERVING" in line or "broker" in line]
        return "supervisor:\n  " + "\n  ".join(lines[-40:]) if lines else "supervisor: no restarts"

    def stop(self) -> None:
        """Whatever happened, leave nothing running (idempotent after terminate())."""
        out = self.m1flow("down", timeout=180)
        if self.up is not None:
            try:
                self.up.wait(60)
            except subprocess.TimeoutExpired:
                self.up.kill()
        if out.returncode:
            self.say(f"m1flow down: {out.stderr}")
