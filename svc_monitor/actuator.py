"""Turns a rule's outcome into facts: commands on `control` (with their evidence), events on
`metrics`, rows in the store. An alert is raised once and resolved once, however often a rule
repeats itself."""
from __future__ import annotations

import logging

from m1flow.bus import Context, codec
from m1flow.bus.topics import CONTROL
from m1flow.contracts import events
from svc_monitor.adapters import decision_row, evidence_dict
from svc_monitor.outcome import AlertChange, Command, Outcome, Signal
from svc_monitor.schema import AlertRow, SignalRow
from svc_monitor.store import Batch, Store, now_ms

log = logging.getLogger(__name__)


def control_message(command: Command, producer: str, run_id: str) -> events.Control:
    msg = events.Control(header=codec.header(producer, run_id=run_id,
                                             policy_version=command.evidence.version_to),
                         reason=command.reason, evidence=command.evidence.to_proto())
    if command.command == "recalibrate":
        msg.recalibrate.reason = command.reason
    elif command.command == "set_window":
        msg.set_window.max_new_tokens = command.max_new_tokens
    elif command.command == "set_mixture":
        msg.set_mixture.weights.update(command.weights)
        msg.set_mixture.levels.update(command.levels)
        msg.set_mixture.stage = command.stage
    elif command.command == "set_correction":
        msg.set_correction.scale = command.scale
    else:
        raise ValueError(f"unknown command {command.command!r}")
    return msg


class Actuator:
    def __init__(self, store: Store, run_id: str, producer: str = "monitor") -> None:
        self.store = store
        self.run_id = run_id
        self.producer = producer
        self.active = {(a["kind"], a["subject"]) for a in store.alerts(limit=100_000, active_only=True)}

    def apply(self, outcome: Outcome, ctx: Context) -> None:
        if outcome.signals:
            self.signals(outcome.signals, ctx)
        for command in outcome.commands:
            self.command(command, ctx)
        for change in outcome.alerts:
            self.alert(change, ctx)

    def signals(self, signals: list[Signal], ctx: Context) -> None:
        at = now_ms()
        self.store.add_signals([SignalRow(ts_ms=at, name=s.name, subject=s.subject, value=s.value,
                                          version_from=s.version_from, version_to=s.version_to) for s in signals])
        for s in signals:
            labels = {"subject": s.subject} if s.subject else {}
            ctx.metric(f"monitor/{s.name}", s.value, step=s.version_to or 0, **labels)

    def command(self, command: Command, ctx: Context) -> None:
        msg = control_message(command, self.producer, self.run_id)
        ctx.emit(CONTROL, command.command, msg)
        version = self.store.latest_version() or 0
        self.store.write(Batch(decisions=[decision_row(msg, version)]))
        mixture = {"stage": command.stage} if command.command == "set_mixture" else {}
        ctx.metric("monitor/decision", 1.0, step=command.evidence.version_to, command=command.command,
                   rule=command.evidence.rule, max_new_tokens=str(command.max_new_tokens),
                   message_id=msg.header.message_id, **mixture)
        log.warning("control %s: %s", command.command, command.reason)

    def alert(self, change: AlertChange, ctx: Context) -> None:
        key = (change.kind, change.subject)
        at = now_ms()
        if change.raised:
            if key in self.active:
                return
            self.active.add(key)
            evidence = evidence_dict(change.evidence.to_proto()) if change.evidence else {}
            self.store.raise_alert(AlertRow(kind=change.kind, subject=change.subject, severity=change.severity,
                                            message=change.message, evidence=evidence, raised_ms=at))
            log.warning("ALERT %s/%s: %s", change.kind, change.subject, change.message)
        else:
            if key not in self.active:
                return
            self.active.discard(key)
            self.store.resolve_alerts(change.kind, change.subject, at)
            log.info("resolved %s/%s: %s", change.kind, change.subject, change.message)
        ctx.metric("monitor/alert", 1.0 if change.raised else 0.0, step=change.evidence.version_to
                   if change.evidence else 0, kind=change.kind, subject=change.subject,
                   severity=change.severity, message=change.message)
