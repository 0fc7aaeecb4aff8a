"""Chaos at cluster scale: the loop running in containers (docker-compose.yml), `docker kill` of the
reward, rollout, learner and sandbox containers and of the broker at random moments over several
cycles, then the guarantees checked from the topics and the learner's checkpoints.

The plan of faults, the progress watcher, the timeline and the invariant checker are ops.chaos's,
shared with the chaos run of `m1flow up`; only how a fault reaches its target differs. Docker's
restart policy does not undo a `docker kill` (the engine counts it as a deliberate stop), so the
runner plays the orchestrator: it starts a killed container again after a random outage. A frozen
broker is `docker pause` (the cgroup freezer: connections stay open, nothing answers).
"""
from __future__ import annotations

import random
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel, Field

from ops.chaos.faults import BROKER_FAULTS, READERS, SERVICE_FAULTS, Fault, Injector, plan
from ops.chaos.invariants import Report, check, settled
from ops.chaos.run import Watcher, timeline
from ops.cluster import Cluster
from ops.services import SERVICES

# chaos target -> compose service
TARGETS = {s.name: s.container for s in SERVICES if s.cluster_chaos}


class ClusterChaosConfig(BaseModel):
    seed: int = 1
    cycles: int = Field(2, ge=1, description="rounds of faults; each hits every service, the broker, the input")
    first_prompts: int = Field(48, ge=1, description="prompts fed before the first fault")
    wave_prompts: int = Field(8, ge=0, description="prompts fed before each fault, so the loop is busy throughout")
    last_prompts: int = Field(16, ge=1, description="prompts fed after settling: the loop must still advance")
    group_size: int = 4
    spacing_s: float = Field(12.0, gt=0, description="mean gap between two faults")
    outage_s: tuple[float, float] = Field((2.0, 8.0), description="how long a killed container stays down")
    freeze_s: float = Field(10.0, gt=0, description="how long a paused broker stays paused")
    settle_s: float = Field(300.0, gt=0, description="after the last fault, how long the loop may take to finish")


def cluster_plan(cfg: ClusterChaosConfig) -> list[Fault]:
    """The shared plan, its first cycle turned into `docker kill`s of every service and the broker, so
    that each run kills every target at least once whatever the seed draws."""
    faults = plan(cfg.seed, cfg.cycles, tuple(TARGETS), cfg.spacing_s, cfg.freeze_s)
    first_cycle = len(faults) // cfg.cycles
    return [replace(f, kind="kill9") if i < first_cycle and f.kind in SERVICE_FAULTS else
            replace(f, kind="broker_kill9", seconds=0.0) if i < first_cycle and f.kind in BROKER_FAULTS else f
            for i, f in enumerate(faults)]


class ContainerInjector(Injector):
    """The faults of ops.chaos applied to the containers of one compose project."""

    def __init__(self, cluster: Cluster, run_dir: Path, rng: random.Random, outage_s: tuple[float, float]) -> None:
        super().__init__(run_dir, cluster.bootstrap)
        self.cluster = cluster
        self.rng = rng
        self.outage_s = outage_s

    def _container(self, service: str) -> str | None:
        running = [c.name for c in self.cluster.containers(service) if c.state == "running"]
        return self.rng.choice(running) if running else None

    def _outage(self, name: str, stop: list[str]) -> str:
        down = self.rng.uniform(*self.outage_s)
        subprocess.run(["docker", *stop, name], capture_output=True, check=True)
        time.sleep(down)
        subprocess.run(["docker", "start", name], capture_output=True, check=True)
        return f"{name} down {down:.1f}s"

    def _signal_service(self, name: str, sig: int) -> str:
        import signal

        container = self._container(TARGETS[name])
        if container is None:
            return "not running (already down)"
        # SIGKILL: `docker kill`; SIGTERM: `docker stop` (SIGTERM, then SIGKILL after the grace period)
        return self._outage(container, ["kill"] if sig == signal.SIGKILL else ["stop", "-t", "30"])

    def _signal_broker(self, sig: int) -> str:
        container = self._container("kafka")
        return self._outage(container, ["kill"]) if container else "not running"

    def _freeze_broker(self, seconds: float) -> str:
        container = self._container("kafka")
        if container is None:
            return "not running"
        subprocess.run(["docker", "pause", container], capture_output=True, check=True)
        try:
            time.sleep(seconds)
        finally:
            subprocess.run(["docker", "unpause", container], capture_output=True, check=True)
        return f"{container} paused {seconds:.0f}s"


class ClusterChaos:
    """One chaos run on a cluster that is up; `run()` returns the invariants report."""

    def __init__(self, cluster: Cluster, run_dir: Path, batch_groups: int, cfg: ClusterChaosConfig,
                 say=print) -> None:  # noqa: ANN001
        self.cluster = cluster
        self.run_dir = Path(run_dir)
        self.batch_groups = batch_groups
        self.cfg = cfg
        self.say = say
        self.prompt_ids: set[str] = set()
        self._waves = 0

    def feed(self, n: int) -> None:
        self._waves += 1
        ids = self.cluster.feed(n, seed=self.cfg.seed, group_size=self.cfg.group_size,
                                prefix=f"chaos{self.cfg.seed}w{self._waves}")
        self.prompt_ids.update(ids)

    def run(self) -> Report:
        cfg = self.cfg
        rng = random.Random(cfg.seed)
        bootstrap = self.cluster.bootstrap
        self.feed(cfg.first_prompts)
        watcher = Watcher(bootstrap, self.run_dir)
        watcher.start()
        injector = ContainerInjector(self.cluster, self.run_dir, rng, cfg.outage_s)
        t0 = time.time()
        try:
            for fault in cluster_plan(cfg):
                time.sleep(max(0.0, t0 + fault.at_s - time.time()))
                if cfg.wave_prompts:
                    self.feed(cfg.wave_prompts)
                entry = injector.inject(fault)
                self.say(f"[{time.time() - t0:6.1f}s] {fault}: {entry.note}")
            injector.close()
            done = self.settle(injector.log.bad_records, cfg.settle_s)
            self.say(f"settled {done - t0:.0f}s after the first fault" if done else
                     f"did not settle within {cfg.settle_s:.0f}s of the last fault")
            before = watcher.samples[-1].version if watcher.samples else 0
            self.feed(cfg.last_prompts)
            advanced = self.settle(injector.log.bad_records, cfg.settle_s, watcher, past_version=before)
            after = watcher.samples[-1].version if watcher.samples else 0
        finally:
            watcher.stop()
        report = check(bootstrap, self.run_dir, self.prompt_ids, injector.log.bad_records, READERS,
                       self.batch_groups)
        report.add("the loop still advances after the faults", after > before and advanced is not None,
                   f"{cfg.last_prompts} more prompts took the learner from v{before} to v{after}")
        self.say(timeline(injector.log.entries, watcher, t0))
        self.say(self.restarts())
        self.say(report.table())
        return report

    def settle(self, bad_records: list[tuple[str, int, int]], timeout: float,
               watcher: Watcher | None = None, past_version: int = -1) -> float | None:
        """Wait until the cluster is done with what it was fed (invariants.settled: every prompt scored,
        every bad record dead-lettered by its readers, the learner holding at most a partial batch) and,
        with a watcher, the learner's newest version is past `past_version`. Returns when, None on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            newest = watcher.samples[-1].version if watcher and watcher.samples else 0
            if newest > past_version and settled(self.cluster.bootstrap, self.run_dir, self.prompt_ids,
                                                 bad_records, READERS, self.batch_groups):
                return time.time()
            time.sleep(2)
        return None

    def restarts(self) -> str:
        """How often Docker restarted each container on its own (crashes, not the runner's kills), and
        the last warnings of any container that is unhealthy now."""
        lines = []
        for c in self.cluster.containers():
            out = subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}}", c.name],
                                 capture_output=True, text=True)
            lines.append(f"{c.name}: {out.stdout.strip() or '?'} restarts by policy, now {c.status}")
            if c.health == "unhealthy":  # why, in its own words
                logs = subprocess.run(["docker", "logs", "--tail", "400", c.name], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True).stdout.splitlines()
                lines += [f"    {line[:240]}" for line in [l for l in logs if '"WARNING"' in l or '"ERROR"' in l][-3:]]
        return "containers:\n  " + "\n  ".join(lines) + "\n" + self.assignments()

    def assignments(self) -> str:
        """Which member of each consumer group owns which partitions, as the broker sees it."""
        from m1flow.bus.admin import admin_client

        try:
            admin = admin_client(self.cluster.bootstrap)
            try:
                groups = admin.describe_groups(["m1flow-rollout", "m1flow-reward", "m1flow-learner"])
            finally:
                admin.close()
        except Exception as exc:  # noqa: BLE001 - a diagnostic must not fail the run it describes
            return f"partitions by member: unknown ({exc})"
        lines = []
        for name, group in sorted(groups.items()):
            owned = {m["client_id"]: sorted(f"{a['topic']}/{p}" for a in m["member_assignment"]["assigned_partitions"]
                                            for p in a["partitions"]) for m in group.get("members", ())}
            lines.append(f"  {name} ({group.get('group_state')}): " + "; ".join(f"{k} {v}" for k, v in sorted(owned.items())))
        return "partitions by member:\n" + "\n".join(lines)
