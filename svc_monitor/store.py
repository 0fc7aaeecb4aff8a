"""The monitor's history in SQL (SQLite by default, any SQLAlchemy URL in production)."""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import Float, Integer, String, create_engine, func, select
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column


class Base(DeclarativeBase):
    pass


class GroupRow(Base):
    """One scored group; group_id is unique, so a group scored twice is counted once."""

    __tablename__ = "groups"
    group_id: Mapped[str] = mapped_column(String, primary_key=True)
    policy_version: Mapped[int] = mapped_column(Integer, index=True)
    samples: Mapped[int] = mapped_column(Integer)
    reward_sum: Mapped[float] = mapped_column(Float)
    correct: Mapped[int] = mapped_column(Integer)
    judged: Mapped[int] = mapped_column(Integer)
    length_sum: Mapped[int] = mapped_column(Integer)
    dropped: Mapped[int] = mapped_column(Integer)


class MetricRow(Base):
    __tablename__ = "metrics"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    service: Mapped[str] = mapped_column(String)
    name: Mapped[str] = mapped_column(String, index=True)
    step: Mapped[int] = mapped_column(Integer)
    value: Mapped[float] = mapped_column(Float)


class Store:
    def __init__(self, url: str) -> None:
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.engine = create_engine(url)
        Base.metadata.create_all(self.engine)

    def add_group(self, row: GroupRow) -> bool:
        """Insert unless the group is known; True when it was new."""
        values = {c.name: getattr(row, c.name) for c in GroupRow.__table__.columns}
        with Session(self.engine) as session:
            result = session.execute(sqlite_insert(GroupRow).values(**values).on_conflict_do_nothing())
            session.commit()
            return result.rowcount == 1

    def add_metric(self, service: str, name: str, step: int, value: float) -> None:
        with Session(self.engine) as session:
            session.add(MetricRow(service=service, name=name, step=step, value=value))
            session.commit()

    def by_version(self) -> list[dict[str, float]]:
        """Reward, accuracy and length of the samples each policy version generated."""
        g = GroupRow
        query = (select(g.policy_version, func.count(), func.sum(g.samples), func.sum(g.reward_sum),
                        func.sum(g.correct), func.sum(g.judged), func.sum(g.length_sum))
                 .group_by(g.policy_version).order_by(g.policy_version))
        with Session(self.engine) as session:
            rows = session.execute(query).all()
        return [{"policy_version": v, "groups": n, "samples": s, "mean_reward": r / max(s, 1),
                 "accuracy": c / max(j, 1), "mean_length": length / max(s, 1)}
                for v, n, s, r, c, j, length in rows]

    def metric_series(self, name: str) -> list[tuple[int, float]]:
        with Session(self.engine) as session:
            rows = session.execute(select(MetricRow.step, MetricRow.value)
                                   .where(MetricRow.name == name).order_by(MetricRow.id)).all()
        return [(s, v) for s, v in rows]
