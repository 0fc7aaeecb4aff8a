"""What a decision rule returns: signal values, commands for `control`, alerts raised or resolved.

Rules are pure (rows in, outcome out); svc_monitor.actuator publishes and stores what they return.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from m1flow.contracts import events

DECIDED_BY = "svc_monitor"


@dataclass(frozen=True)
class Evidence:
    """The facts behind a command or an alert (mirrors the `Evidence` message)."""

    rule: str
    signals: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    version_from: int = 0
    version_to: int = 0
    windows: int = 0

    def to_proto(self, decided_by: str = DECIDED_BY) -> events.Evidence:
        return events.Evidence(rule=self.rule, signals=self.signals, thresholds=self.thresholds,
                               version_from=self.version_from, version_to=self.version_to,
                               windows=self.windows, decided_by=decided_by)


@dataclass(frozen=True)
class Signal:
    name: str
    value: float
    version_from: int | None = None
    version_to: int | None = None
    subject: str = ""


@dataclass(frozen=True)
class Command:
    """A command for `control`: "recalibrate", "set_window", "set_mixture" (the whole mixture in
    force after it: weights, levels and the stage) or "set_correction" (the scale of the learner's
    mismatch-correction bounds)."""

    command: str
    reason: str
    evidence: Evidence
    max_new_tokens: int = 0
    weights: dict[str, float] = field(default_factory=dict)
    levels: dict[str, int] = field(default_factory=dict)
    stage: str = ""
    scale: float = 0.0


@dataclass(frozen=True)
class AlertChange:
    """Raise (raised=True) or resolve the alert (kind, subject)."""

    kind: str
    subject: str
    raised: bool
    message: str = ""
    severity: str = "warning"
    evidence: Evidence | None = None


@dataclass
class Outcome:
    signals: list[Signal] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    alerts: list[AlertChange] = field(default_factory=list)

    def extend(self, other: Outcome) -> Outcome:
        self.signals += other.signals
        self.commands += other.commands
        self.alerts += other.alerts
        return self
