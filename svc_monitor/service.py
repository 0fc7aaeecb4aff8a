"""svc_monitor: reads every topic (svc_eval's held-out results on `evals` too), keeps the run's history
in SQL, closes the control loops and serves the dashboard and Monitor.Report.

Each poll's records become rows written in one transaction; then the decision rules run over the
windows completed since the last poll and what they decide goes out on `control` and `metrics`
before the input offsets are committed (the worker's flush-then-commit), so a crash replays and
never loses a decision's input.
"""
from __future__ import annotations

import logging
import time

import grpc
from kafka.errors import KafkaError

from m1flow.bus import Context, HandlerBase, Record
from m1flow.bus.topics import CONTROL, DLQ, EVALS, METRICS, POLICY, ROLLOUTS, SCORED
from m1flow.contracts import events, rpc_grpc
from m1flow.runtime.service import Service
from m1flow.security.announcements import Guard
from svc_monitor import adapters
from svc_monitor.access import AccessToken, is_loopback
from svc_monitor.actuator import Actuator
from svc_monitor.config import MonitorConfig
from svc_monitor.controller import Controller
from svc_monitor.dashboard import Dashboard
from svc_monitor.lag import LagReader
from svc_monitor.outcome import DECIDED_BY
from svc_monitor.report import MonitorGrpc
from svc_monitor.rules.operations import OperationsRule, OpsSample
from svc_monitor.store import Batch, Store, now_ms

log = logging.getLogger(__name__)


class MonitorHandler(HandlerBase):
    topics = (ROLLOUTS, SCORED, METRICS, CONTROL, DLQ, POLICY, EVALS)

    def __init__(self, monitor: MonitorService) -> None:
        self.monitor = monitor
        self.batch = Batch()
        self.versions_logged: set[int] = set()

    def handle(self, message, record: Record, ctx: Context) -> None:  # noqa: ANN001 - one of the topics' types
        ts = record.timestamp_ms if record.timestamp_ms > 0 else now_ms()
        b = self.batch
        if isinstance(message, events.Rollout):
            b.rollouts.append(adapters.rollout_row(message, ts, self.monitor.config.window.repetition_ngram))
        elif isinstance(message, events.ScoredGroup):
            b.groups.append(adapters.scored_group_rows(message, ts))
        elif isinstance(message, events.Metric):
            if message.service != self.monitor.name:  # the monitor's own are stored as it makes them
                b.metrics.append(adapters.metric_row(message, ts))
        elif isinstance(message, events.Control):
            b.decisions.append(adapters.decision_row(message, self.monitor.store.latest_version() or 0))
        elif isinstance(message, events.DeadLetter):
            try:
                b.dead_letters.append(adapters.dead_letter_row(message, ts))
            except Exception:  # noqa: BLE001 - dead-lettering a dead letter would feed `dlq` to itself
                log.exception("could not record dead letter %s", record.position)
        elif isinstance(message, events.PolicyVersion):
            if self.monitor.guard.admits(message):  # a refused one is counted, not stored: no version, no staleness
                b.policies.append(adapters.policy_row(message, ts))
        elif isinstance(message, events.EvalResult):
            b.evals.append(adapters.eval_row(message, ts))

    def tick(self, ctx: Context) -> None:
        monitor = self.monitor
        if self.batch:
            written = monitor.store.write(self.batch)
            self.batch = Batch()
            monitor.controller.seen([d for d in written.decisions if d.evidence.get("decided_by") != DECIDED_BY])
            self._log_versions(written.groups)
        monitor.actuator.apply(monitor.controller.evaluate(), ctx)
        if monitor.controller.dirty:
            ctx.producer.flush()  # what the rules decided is on the broker before their state says so
            monitor.controller.save()
        monitor.periodic(ctx)

    def _log_versions(self, groups: list) -> None:  # noqa: ANN001
        new = {g.policy_version for g in groups} - self.versions_logged
        if not new:
            return
        self.versions_logged |= new
        for row in self.monitor.store.by_version():
            if row["policy_version"] + 1 in new:
                log.info("policy v%s: reward %.3f accuracy %.3f length %.2f over %s groups", row["policy_version"],
                         row["mean_reward"], row["accuracy"], row["mean_length"], row["groups"])


class MonitorService(Service, name="monitor", config=MonitorConfig):
    """The history (rollouts, scored, metrics, control, dlq, policy) in its store, the rules that close
    the control loops, the dashboard and the Report RPC."""

    config: MonitorConfig

    def __init__(self, config: MonitorConfig) -> None:
        super().__init__(config)
        url = config.database_url or f"sqlite:///{(config.run_dir / 'monitor.db').resolve()}"
        self.store = Store(url)
        self.controller = Controller(self.store, config)
        self.actuator = Actuator(self.store, config.run_id)
        self.operations = OperationsRule(config.ops)
        self.guard = Guard(config.security)  # what the learner signed, as every consumer of `policy` checks
        try:
            self.token = AccessToken.resolve(
                config.access_token.get_secret_value() if config.access_token else None, config.access_token_file,
                exposed=(config.dashboard_port >= 0 and not is_loopback(config.dashboard_host))
                or (not is_loopback(config.grpc_host) and not config.security.grpc_mtls), run_dir=config.run_dir)
        except ValueError as exc:  # the operator's to fix: say what, not a traceback
            raise SystemExit(f"svc_monitor: {exc}") from None
        self.dashboard: Dashboard | None = None
        self.dashboard_url = ""
        self.lag: LagReader | None = None
        self.last_ops = time.monotonic()
        self.last_ops_ms = now_ms()
        self.last_prune = 0.0

    def register(self, server: grpc.Server) -> list[str]:
        servicer = MonitorGrpc(self.store, self.controller, lambda: self.dashboard_url,
                               None if self.config.security.grpc_mtls else self.token)
        rpc_grpc.add_MonitorServiceServicer_to_server(servicer, server)
        return ["m1flow.v1.MonitorService"]

    def state(self) -> dict:
        """What the dashboard shows of the rules' state."""
        return {"window": self.controller.window.state.window, "stage": self.controller.window.stage,
                "curriculum_stage": self.controller.curriculum.stage_name}

    def start(self) -> None:
        if self.config.dashboard_port >= 0:
            self.dashboard = Dashboard(self.store, self.config, self.state, self.token)
            self.dashboard_url = self.dashboard.start()
        self.lag = LagReader(self.config.bootstrap)
        self.stream = self.worker(MonitorHandler(self))

    def periodic(self, ctx: Context) -> None:
        """Operations on the clock, and retention."""
        now = time.monotonic()
        if now - self.last_ops >= self.config.ops.interval_s:
            self.actuator.apply(self.operations.evaluate(self.ops_sample(now - self.last_ops)), ctx)
            self.last_ops = now
        if now - self.last_prune >= self.config.retention.every_s:
            deleted = self.store.prune(self.config.retention.keep_versions, self.config.retention.keep_days)
            if any(deleted.values()):
                log.info("retention: deleted %s", deleted)
            self.last_prune = now

    def ops_sample(self, elapsed_s: float) -> OpsSample:
        since, self.last_ops_ms = self.last_ops_ms, now_ms()
        counts = self.store.counts_since(since)
        try:
            groups = self.lag.sample()
        except (KafkaError, KeyError) as exc:  # a broker hiccup costs one sample of lag, not the monitor
            log.warning("reading consumer lag failed: %s", exc)
            groups = {}
        return OpsSample(at_s=time.monotonic(), elapsed_s=elapsed_s, groups=groups,
                         rollouts=counts["rollouts"], tokens=counts["tokens"], scored_groups=counts["groups"],
                         mean_scored_version=counts["mean_version"], latest_version=self.store.latest_version(),
                         dead_letters_per_min=self.store.dead_letters_since(now_ms() - 60_000))

    def shutdown(self) -> None:
        self.stream.close()
        if self.lag is not None:
            self.lag.close()
        if self.dashboard is not None:
            self.dashboard.close()
        self.store.close()
