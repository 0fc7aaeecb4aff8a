"""The monitor's tables. Changes go through a new migration in svc_monitor/migrations/versions/,
so a newer monitor opens an older store.

Types are portable (SQLite, PostgreSQL): ids are BIGINT, except on SQLite where only INTEGER
PRIMARY KEY autoincrements; times are epoch milliseconds in BIGINT.
"""
from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Boolean, Float, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

Id = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    pass


class GroupRow(Base):
    """One scored group's totals; group_id is unique, so a group scored twice is counted once."""

    __tablename__ = "groups"
    group_id: Mapped[str] = mapped_column(String, primary_key=True)
    policy_version: Mapped[int] = mapped_column(Integer, index=True)
    samples: Mapped[int] = mapped_column(Integer)
    reward_sum: Mapped[float] = mapped_column(Float)
    correct: Mapped[int] = mapped_column(Integer)
    judged: Mapped[int] = mapped_column(Integer)
    length_sum: Mapped[int] = mapped_column(Integer)
    dropped: Mapped[int] = mapped_column(Integer, default=0)  # schema 1; drops are the learner's metrics now
    kind: Mapped[str] = mapped_column(String, default="")  # verifier kind (groups scored before it: task type)
    ts_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    source: Mapped[str] = mapped_column(String, default="")  # m1flow.accounting.source_of (revision 0003)
    domain: Mapped[str] = mapped_column(String, default="")
    seq: Mapped[int] = mapped_column(BigInteger, unique=True, index=True)  # arrival order, from 1 (revision 0004)
    reasons: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # verdict reason -> samples (revision 0006)


class MetricRow(Base):
    __tablename__ = "metrics"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    service: Mapped[str] = mapped_column(String)
    name: Mapped[str] = mapped_column(String, index=True)
    step: Mapped[int] = mapped_column(Integer)
    value: Mapped[float] = mapped_column(Float)
    labels: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    ts_ms: Mapped[int] = mapped_column(BigInteger, default=0, index=True)


class RolloutRow(Base):
    """What the window stages need of one rollout; id is arrival order (windows are id ranges)."""

    __tablename__ = "rollouts"
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    rollout_id: Mapped[str] = mapped_column(String, unique=True)
    group_id: Mapped[str] = mapped_column(String)
    policy_version: Mapped[int] = mapped_column(BigInteger, index=True)
    length: Mapped[int] = mapped_column(Integer)
    window: Mapped[int] = mapped_column(Integer)  # max new tokens it was generated under
    finish: Mapped[int] = mapped_column(Integer)  # FinishReason
    nll_sum: Mapped[float] = mapped_column(Float)  # -sum of inference log-probs
    repetition: Mapped[float] = mapped_column(Float)  # share of repeated n-grams
    kind: Mapped[str] = mapped_column(String, default="")  # verifier kind
    ts_ms: Mapped[int] = mapped_column(BigInteger, index=True)


class GenRMSampleRow(Base):
    """One GenRM-scored sample (score and length), for the within-prompt length-bias signals."""

    __tablename__ = "genrm_samples"
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    group_id: Mapped[str] = mapped_column(String, index=True)
    policy_version: Mapped[int] = mapped_column(BigInteger, index=True)
    score: Mapped[float] = mapped_column(Float)
    length: Mapped[int] = mapped_column(Integer)
    correct: Mapped[bool | None] = mapped_column(Boolean, nullable=True)  # when a rule verifier also ran
    ts_ms: Mapped[int] = mapped_column(BigInteger)


class SignalRow(Base):
    """One value of a signal the monitor computed (per window, or per clock sample for operations)."""

    __tablename__ = "signals"
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    ts_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    name: Mapped[str] = mapped_column(String, index=True)
    subject: Mapped[str] = mapped_column(String, default="")  # e.g. the consumer group of a lag
    value: Mapped[float] = mapped_column(Float)
    version_from: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    version_to: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class DecisionRow(Base):
    """A command seen on (or sent to) `control`, with its evidence."""

    __tablename__ = "decisions"
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    message_id: Mapped[str] = mapped_column(String, unique=True)
    ts_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    command: Mapped[str] = mapped_column(String)
    max_new_tokens: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str] = mapped_column(Text, default="")
    evidence: Mapped[dict] = mapped_column(JSON)
    version: Mapped[int] = mapped_column(BigInteger, default=0)  # newest policy version when recorded
    weights: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # set_mixture only (revision 0004)
    levels: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    stage: Mapped[str] = mapped_column(String, default="")


class AlertRow(Base):
    __tablename__ = "alerts"
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String, index=True)
    subject: Mapped[str] = mapped_column(String, default="")
    severity: Mapped[str] = mapped_column(String)
    message: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict] = mapped_column(JSON)
    raised_ms: Mapped[int] = mapped_column(BigInteger)
    resolved_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class DeadLetterRow(Base):
    __tablename__ = "dead_letters"
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    ts_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    consumer_group: Mapped[str] = mapped_column(String)
    source_topic: Mapped[str] = mapped_column(String)
    service: Mapped[str] = mapped_column(String)
    error: Mapped[str] = mapped_column(Text)


class PolicyRow(Base):
    __tablename__ = "policies"
    version: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    ts_ms: Mapped[int] = mapped_column(BigInteger)


class StateRow(Base):
    """The decision rules' state (hysteresis counters, stage, cool-down), so a restart resumes it."""

    __tablename__ = "controller_state"
    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[dict] = mapped_column(JSON)


class EvalRow(Base):
    """One held-out result of svc_eval (revision 0005): (run, set, version) is unique, so a result
    published again (a restart, a replay, a duplicate on the topic) replaces its row, never adds one."""

    __tablename__ = "evals"
    __table_args__ = (UniqueConstraint("run_id", "set_name", "policy_version", name="uq_evals_run_set_version"),)
    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String)
    set_name: Mapped[str] = mapped_column(String, index=True)
    policy_version: Mapped[int] = mapped_column(BigInteger, index=True)
    prompts: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)
    judged: Mapped[int] = mapped_column(Integer)
    correct: Mapped[int] = mapped_column(Integer)
    pass1: Mapped[float] = mapped_column(Float)
    pass1_low: Mapped[float] = mapped_column(Float)
    pass1_high: Mapped[float] = mapped_column(Float)
    pass_at_k: Mapped[dict] = mapped_column(JSON)  # "k" -> value (JSON keys are strings)
    mean_length: Mapped[float] = mapped_column(Float)
    mean_reward: Mapped[float] = mapped_column(Float)
    duration_s: Mapped[float] = mapped_column(Float)
    message_id: Mapped[str] = mapped_column(String, default="")
    ts_ms: Mapped[int] = mapped_column(BigInteger)
