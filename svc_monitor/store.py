"""The monitor's history in SQL: SQLite by default, PostgreSQL (or any SQLAlchemy 2.x URL) in production.

Opening a store brings its schema to the newest Alembic revision; a store written by the monitor
before migrations existed (the `groups` and `metrics` tables alone) is recognised and upgraded in
place. Inserts are portable (no dialect-specific upserts): the monitor is the store's one writer,
so "insert what is not there yet" is a select then an insert in one transaction.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, case, create_engine, delete, event, func, inspect, select, update
from sqlalchemy.orm import Session

from svc_monitor.aggregates import Aggregates
from svc_monitor.cursors import Cursors
from svc_monitor.schema import (AlertRow, DeadLetterRow, DecisionRow, EvalRow, GenRMSampleRow, GroupRow, MetricRow,
                                PolicyRow, RolloutRow, SignalRow, StateRow)

MIGRATIONS = Path(__file__).parent / "migrations"
FIRST_REVISION = "0001"  # the schema of the monitor before migrations


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ScoredGroupRows:
    """One scored group as rows: its totals and, for GenRM-scored samples, one row each."""

    group: GroupRow
    genrm: list[GenRMSampleRow] = field(default_factory=list)


@dataclass
class Batch:
    """Everything one poll of the topics produced, written in one transaction."""

    groups: list[ScoredGroupRows] = field(default_factory=list)
    rollouts: list[RolloutRow] = field(default_factory=list)
    metrics: list[MetricRow] = field(default_factory=list)
    dead_letters: list[DeadLetterRow] = field(default_factory=list)
    policies: list[PolicyRow] = field(default_factory=list)
    decisions: list[DecisionRow] = field(default_factory=list)
    evals: list[EvalRow] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any((self.groups, self.rollouts, self.metrics, self.dead_letters, self.policies, self.decisions,
                    self.evals))


@dataclass(frozen=True)
class Written:
    """What a write added (the rest was already stored: a replayed or twice-scored record)."""

    groups: list[GroupRow]
    decisions: list[DecisionRow]


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """WAL lets the dashboard and gRPC threads read while the consumer writes."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, pool_pre_ping=True)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision`; a pre-migration store is stamped at the first revision first."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        tables = set(inspect(connection).get_table_names())
        if "groups" in tables and "alembic_version" not in tables:
            command.stamp(cfg, FIRST_REVISION)
        command.upgrade(cfg, revision)


def schema_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        if "alembic_version" not in inspect(connection).get_table_names():
            return None
        return connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()


def _chunks(items: Sequence[Any], size: int = 500) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _missing(session: Session, column: Any, keys: list[str]) -> set[str]:
    """Which of `keys` are not yet stored in `column`."""
    found: set[str] = set()
    for part in _chunks(keys):
        found.update(session.scalars(select(column).where(column.in_(part))))
    return set(keys) - found


def _as_dict(row: Any) -> dict[str, Any]:
    return {c.key: getattr(row, c.key) for c in inspect(row).mapper.column_attrs}


class Store(Aggregates, Cursors):
    """The rows in (one writer, one transaction a batch) and out (series, decisions, alerts); the
    per-version and per-source sums are Aggregates', the rules' reads after an id Cursors'."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        migrate(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ writing
    def write(self, batch: Batch) -> Written:
        """Store a batch in one transaction, skipping groups, rollouts and decisions already stored."""
        with Session(self.engine, expire_on_commit=False) as session:
            new_ids = _missing(session, GroupRow.group_id, [g.group.group_id for g in batch.groups])
            groups = []
            seq = (session.scalar(select(func.max(GroupRow.seq))) or 0) if new_ids else 0
            for rows in batch.groups:
                if rows.group.group_id in new_ids:
                    new_ids.discard(rows.group.group_id)  # a group twice in one batch: once
                    seq += 1
                    rows.group.seq = seq  # arrival order (the store has one writer)
                    groups.append(rows.group)
                    session.add(rows.group)
                    session.add_all(rows.genrm)
            new_rollouts = _missing(session, RolloutRow.rollout_id, [r.rollout_id for r in batch.rollouts])
            for row in batch.rollouts:
                if row.rollout_id in new_rollouts:
                    new_rollouts.discard(row.rollout_id)
                    session.add(row)
            new_decisions = _missing(session, DecisionRow.message_id, [d.message_id for d in batch.decisions])
            decisions = []
            for row in batch.decisions:
                if row.message_id in new_decisions:
                    new_decisions.discard(row.message_id)
                    decisions.append(row)
                    session.add(row)
            known = set(session.scalars(select(PolicyRow.version).where(
                PolicyRow.version.in_([p.version for p in batch.policies]))))
            for row in batch.policies:
                if row.version not in known:
                    known.add(row.version)
                    session.add(row)
            for row in batch.evals:
                self._upsert_eval(session, row)
            session.add_all(batch.metrics)
            session.add_all(batch.dead_letters)
            session.commit()
        return Written(groups, decisions)

    @staticmethod
    def _upsert_eval(session: Session, row: EvalRow) -> None:
        """One row per (run, set, version): a result seen again replaces the stored one (the same
        numbers when svc_eval redid it: its sampling is seeded), never adds a second."""
        stored = session.scalar(select(EvalRow).where(EvalRow.run_id == row.run_id, EvalRow.set_name == row.set_name,
                                                      EvalRow.policy_version == row.policy_version))
        if stored is None:
            session.add(row)
            session.flush()  # a second copy in the same batch finds this one
            return
        for column in EvalRow.__table__.columns.keys():
            if column != "id":
                setattr(stored, column, getattr(row, column))

    def add_signals(self, rows: list[SignalRow]) -> None:
        with Session(self.engine) as session:
            session.add_all(rows)
            session.commit()

    def raise_alert(self, row: AlertRow) -> None:
        with Session(self.engine, expire_on_commit=False) as session:
            session.add(row)
            session.commit()

    def resolve_alerts(self, kind: str, subject: str, at_ms: int) -> int:
        with Session(self.engine) as session:
            result = session.execute(update(AlertRow).where(
                AlertRow.kind == kind, AlertRow.subject == subject, AlertRow.resolved_ms.is_(None))
                .values(resolved_ms=at_ms))
            session.commit()
            return result.rowcount

    def get_state(self, key: str) -> dict | None:
        with Session(self.engine) as session:
            row = session.get(StateRow, key)
            return dict(row.value) if row is not None else None

    def set_state(self, key: str, value: dict) -> None:
        with Session(self.engine) as session:
            row = session.get(StateRow, key)
            if row is None:
                session.add(StateRow(key=key, value=value))
            else:
                row.value = value
            session.commit()

    def prune(self, keep_versions: int, keep_days: float, at_ms: int | None = None) -> dict[str, int]:
        """Delete detailed rows older than the newest `keep_versions` versions or `keep_days` days."""
        cutoff_ms = (at_ms or now_ms()) - int(keep_days * 86_400_000)
        newest = self.latest_version()
        deleted: dict[str, int] = {}
        with Session(self.engine) as session:
            for table in (RolloutRow, GenRMSampleRow):
                condition = table.ts_ms < cutoff_ms
                if newest is not None:
                    condition = condition | (table.policy_version <= newest - keep_versions)
                deleted[table.__tablename__] = session.execute(delete(table).where(condition)).rowcount
            for table in (MetricRow, SignalRow, DeadLetterRow):
                deleted[table.__tablename__] = session.execute(
                    delete(table).where(table.ts_ms < cutoff_ms)).rowcount
            session.commit()
        return deleted

    # ------------------------------------------------------------------ reading: plots and rules
    def metric_series(self, name: str) -> list[tuple[int, float]]:
        with Session(self.engine) as session:
            rows = session.execute(select(MetricRow.step, MetricRow.value)
                                   .where(MetricRow.name == name).order_by(MetricRow.id)).all()
        return [(s, v) for s, v in rows]

    def metric_rows(self, name: str) -> list[dict[str, Any]]:
        """Every stored metric event called `name`, oldest first, with its labels."""
        with Session(self.engine) as session:
            rows = session.scalars(select(MetricRow).where(MetricRow.name == name).order_by(MetricRow.id)).all()
        return [{"step": r.step, "value": r.value, "labels": r.labels or {}} for r in rows]

    def signal_series(self, prefix: str) -> list[dict[str, Any]]:
        """Signals whose name starts with `prefix`, oldest first."""
        with Session(self.engine) as session:
            rows = session.scalars(select(SignalRow).where(SignalRow.name.startswith(prefix))
                                   .order_by(SignalRow.id)).all()
            return [_as_dict(r) for r in rows]

    def latest_signals(self) -> dict[str, float]:
        """Newest value of each signal ('name' or 'name[subject]')."""
        newest = select(func.max(SignalRow.id)).group_by(SignalRow.name, SignalRow.subject)
        with Session(self.engine) as session:
            rows = session.scalars(select(SignalRow).where(SignalRow.id.in_(newest))).all()
        return {(f"{r.name}[{r.subject}]" if r.subject else r.name): r.value for r in rows}

    def evals(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Held-out results (svc_eval), by set then policy version; `run_id`: that run's only."""
        query = select(EvalRow).order_by(EvalRow.set_name, EvalRow.policy_version)
        if run_id is not None:
            query = query.where(EvalRow.run_id == run_id)
        with Session(self.engine) as session:
            return [_as_dict(r) for r in session.scalars(query).all()]

    def latest_heldout(self, run_id: str) -> dict[str, float]:
        """Set -> held-out pass@1 of the newest policy version of run `run_id` evaluated on it."""
        mine = EvalRow.run_id == run_id
        newest = (select(EvalRow.set_name, func.max(EvalRow.policy_version).label("v"))
                  .where(mine).group_by(EvalRow.set_name).subquery())
        query = select(EvalRow.set_name, EvalRow.pass1).where(mine).join(
            newest, (EvalRow.set_name == newest.c.set_name) & (EvalRow.policy_version == newest.c.v))
        with Session(self.engine) as session:
            return {name: value for name, value in session.execute(query).all()}

    def decisions(self, limit: int = 50) -> list[dict[str, Any]]:
        """Newest first."""
        with Session(self.engine) as session:
            rows = session.scalars(select(DecisionRow).order_by(DecisionRow.ts_ms.desc(), DecisionRow.id.desc())
                                   .limit(limit)).all()
            return [_as_dict(r) for r in rows]

    def mixture_decisions(self) -> list[dict[str, Any]]:
        """Every set_mixture decision (the monitor's and people's), oldest first: the mixture's history."""
        with Session(self.engine) as session:
            rows = session.scalars(select(DecisionRow).where(DecisionRow.command == "set_mixture")
                                   .order_by(DecisionRow.ts_ms, DecisionRow.id)).all()
            return [_as_dict(r) for r in rows]

    def alerts(self, limit: int = 50, active_only: bool = False) -> list[dict[str, Any]]:
        """Active alerts first, then newest first."""
        query = select(AlertRow)
        if active_only:
            query = query.where(AlertRow.resolved_ms.is_(None))
        active_first = case((AlertRow.resolved_ms.is_(None), 0), else_=1)
        with Session(self.engine) as session:
            rows = session.scalars(query.order_by(active_first, AlertRow.raised_ms.desc(), AlertRow.id.desc())
                                   .limit(limit)).all()
            return [_as_dict(r) for r in rows]

    def latest_version(self) -> int | None:
        """The newest policy version announced, else the newest seen on a sample."""
        with Session(self.engine) as session:
            announced = session.scalar(select(func.max(PolicyRow.version)))
            seen = session.scalar(select(func.max(RolloutRow.policy_version)))
            seen_groups = session.scalar(select(func.max(GroupRow.policy_version)))
        values = [v for v in (announced, seen, seen_groups) if v is not None]
        return max(values) if values else None

    def recent_groups(self, limit: int = 20) -> list[dict[str, Any]]:
        """The newest scored groups (arrival order), each with what its row of the dashboard shows."""
        with Session(self.engine) as session:
            rows = session.scalars(select(GroupRow).order_by(GroupRow.seq.desc()).limit(limit)).all()
        return [{"group_id": r.group_id, "policy_version": r.policy_version, "kind": r.kind, "source": r.source,
                 "samples": r.samples, "judged": r.judged, "correct": r.correct,
                 "mean_reward": r.reward_sum / r.samples if r.samples else None, "ts_ms": r.ts_ms} for r in rows]

    def group_time(self, group_id: str) -> int | None:
        """When the group was scored (its `scored` record's time), if the store holds it."""
        with Session(self.engine) as session:
            return session.scalar(select(GroupRow.ts_ms).where(GroupRow.group_id == group_id))
