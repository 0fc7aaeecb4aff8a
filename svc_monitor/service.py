"""svc_monitor: reads `scored` and `metrics`, keeps the run's history, logs reward and length per
policy version, and answers Monitor.Report."""
from __future__ import annotations

import logging

import grpc
from pydantic import Field

from m1flow.bus import Context, HandlerBase, Record
from m1flow.bus.topics import METRICS, SCORED
from m1flow.contracts import events, rpc, rpc_grpc
from m1flow.group_totals import GroupTotals
from m1flow.runtime.config import ServiceConfig
from m1flow.runtime.service import Service
from svc_monitor.store import GroupRow, Store

log = logging.getLogger(__name__)


class MonitorConfig(ServiceConfig):
    """svc_monitor: history, dashboards and alerts."""

    database_url: str = Field("", description="SQLAlchemy URL; default sqlite under run_dir")


def group_row(group: events.ScoredGroup) -> GroupRow:
    totals = GroupTotals.of([group])
    versions = [s.policy_version for s in group.samples] or [group.header.trace.policy_version]
    return GroupRow(group_id=group.group_id, policy_version=min(versions), samples=totals.samples,
                    reward_sum=totals.reward_sum, correct=totals.correct, judged=totals.judged,
                    length_sum=totals.length_sum, dropped=totals.dropped)


class MonitorHandler(HandlerBase):
    topics = (SCORED, METRICS)

    def __init__(self, store: Store) -> None:
        self.store = store
        self.logged_versions: set[int] = set()

    def handle(self, message, record: Record, ctx: Context) -> None:  # noqa: ANN001
        if isinstance(message, events.ScoredGroup):
            row = group_row(message)
            if self.store.add_group(row) and row.policy_version not in self.logged_versions:
                self.logged_versions.add(row.policy_version)
                for prev in self.store.by_version():
                    if prev["policy_version"] == row.policy_version - 1:
                        log.info("policy v%s: reward %.3f accuracy %.3f length %.2f over %s groups",
                                 prev["policy_version"], prev["mean_reward"], prev["accuracy"],
                                 prev["mean_length"], prev["groups"])
        else:
            self.store.add_metric(message.service, message.name, message.step, message.value)


class MonitorGrpc(rpc_grpc.MonitorServiceServicer):
    def __init__(self, store: Store) -> None:
        self.store = store

    def Report(self, request: rpc.ReportRequest, context: grpc.ServicerContext) -> rpc.MonitorReport:  # noqa: N802
        return rpc.MonitorReport(rows=[rpc.VersionRow(**row) for row in self.store.by_version()])


class MonitorService(Service):
    name = "monitor"
    Config = MonitorConfig

    def __init__(self, config: MonitorConfig) -> None:
        super().__init__(config)
        url = config.database_url or f"sqlite:///{(config.run_dir / 'monitor.db').resolve()}"
        self.store = Store(url)

    def register(self, server: grpc.Server) -> list[str]:
        rpc_grpc.add_MonitorServiceServicer_to_server(MonitorGrpc(self.store), server)
        return ["m1flow.v1.MonitorService"]

    def start(self) -> None:
        self.stream = self.worker(MonitorHandler(self.store))

    def shutdown(self) -> None:
        self.stream.close()
