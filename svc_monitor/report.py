"""Monitor.Report: the version table, the alert log, the decisions, the window stage, the newest
signals, svc_eval's held-out results and the verdict reasons per source, in one reply (what `m1flow report` prints and the demo reads)."""
from __future__ import annotations

from collections.abc import Callable

import grpc

from m1flow.contracts import events, rpc, rpc_grpc
from m1flow.runtime.bounds import Cap, enforce
from svc_monitor.access import AccessToken, token_from_grpc
from svc_monitor.controller import Controller
from svc_monitor.store import Store

DEFAULT_EVENTS = 20
MAX_EVENTS = 1000  # the most alerts and decisions one Report returns; more is INVALID_ARGUMENT


def evidence_proto(evidence: dict | None) -> events.Evidence:
    return events.Evidence(**(evidence or {}))


def build_report(store: Store, controller: Controller, dashboard_url: str, max_events: int = 0) -> rpc.MonitorReport:
    limit = max_events or DEFAULT_EVENTS
    alerts = [rpc.Alert(kind=a["kind"], subject=a["subject"], severity=a["severity"], message=a["message"],
                        active=a["resolved_ms"] is None, raised_unix_ms=a["raised_ms"],
                        resolved_unix_ms=a["resolved_ms"] or 0, evidence=evidence_proto(a["evidence"]))
              for a in store.alerts(limit)]
    decisions = [rpc.Decision(command=d["command"], max_new_tokens=d["max_new_tokens"], reason=d["reason"],
                              evidence=evidence_proto(d["evidence"]), at_unix_ms=d["ts_ms"],
                              message_id=d["message_id"], mixture=mixture_proto(d)) for d in store.decisions(limit)]
    return rpc.MonitorReport(rows=[rpc.VersionRow(**row) for row in store.by_version()], alert_log=alerts,
                             decisions=decisions, window=controller.window.state.window,
                             stage=controller.window.stage, dashboard_url=dashboard_url,
                             signals=store.latest_signals(),
                             source_rows=[rpc.SourceRow(**_unset_none(row)) for row in store.by_source()],
                             curriculum=curriculum_state(controller), evals=eval_rows(store),
                             reason_rows=[rpc.ReasonRow(**row) for row in store.reasons_by_source()])


def eval_rows(store: Store) -> list[rpc.EvalRow]:
    """The held-out results, by set then version (pass@k keyed by k again)."""
    return [rpc.EvalRow(set=r["set_name"], policy_version=r["policy_version"], prompts=r["prompts"],
                        samples=r["samples"], judged=r["judged"], correct=r["correct"], pass1=r["pass1"],
                        pass1_low=r["pass1_low"], pass1_high=r["pass1_high"],
                        pass_at_k={int(k): v for k, v in (r["pass_at_k"] or {}).items()},
                        mean_length=r["mean_length"], duration_s=r["duration_s"], run_id=r["run_id"])
            for r in store.evals()]


def mixture_proto(decision: dict) -> events.SetMixture | None:
    """A stored set_mixture decision's mixture (None for the other commands)."""
    if decision["command"] != "set_mixture":
        return None
    return events.SetMixture(weights=decision["weights"] or {}, levels=decision["levels"] or {},
                             stage=decision["stage"] or "")


def curriculum_state(controller: Controller) -> rpc.CurriculumState:
    rule = controller.curriculum
    s = rule.state
    return rpc.CurriculumState(stage=rule.stage_name, stage_index=s.stage, stages=len(rule.cfg.stages),
                               stage_windows=s.stage_windows, windows=s.windows, weights=s.weights, levels=s.levels)


def _unset_none(row: dict) -> dict:
    """A store row as SourceRow fields: None (no verdict, no time span) leaves the optional field unset."""
    return {k: v for k, v in row.items() if v is not None}


class MonitorGrpc(rpc_grpc.MonitorServiceServicer):
    """Serves the report from what it is built of, not from the service (which serves this: no circle).

    dashboard_url is asked per call: the dashboard starts after the gRPC server is registered."""

    def __init__(self, store: Store, controller: Controller, dashboard_url: Callable[[], str],
                 token: AccessToken | None = None) -> None:
        self.store = store
        self.controller = controller
        self.dashboard_url = dashboard_url
        self.token = token  # None: loopback, or mutual TLS has named the caller

    def Report(self, request: rpc.ReportRequest, context: grpc.ServicerContext) -> rpc.MonitorReport:  # noqa: N802
        if self.token is not None and not self.token.matches(token_from_grpc(context)):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "Monitor.Report listens beyond loopback: send "
                          "'authorization: Bearer <token>' ($M1FLOW_ACCESS_TOKEN; the monitor's "
                          "access_token_file, or run_dir/access_token)")
        enforce(context, [Cap("max_events", request.max_events, MAX_EVENTS, "MAX_EVENTS, svc_monitor/report.py")])
        return build_report(self.store, self.controller, self.dashboard_url(), request.max_events)
