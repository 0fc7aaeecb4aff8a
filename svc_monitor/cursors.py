"""The monitor's reads after an id: each rule and the dashboard keep a cursor (the last row id or
group sequence they saw) and ask only for what was stored since. A base of the Store, over its engine."""
from __future__ import annotations

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from svc_monitor.schema import GenRMSampleRow, GroupRow, MetricRow, RolloutRow


class Cursors:
    engine: Engine

    def rollouts_after(self, last_id: int, limit: int) -> list[RolloutRow]:
        with Session(self.engine, expire_on_commit=False) as session:
            return list(session.scalars(select(RolloutRow).where(RolloutRow.id > last_id)
                                        .order_by(RolloutRow.id).limit(limit)))

    def groups_after(self, last_seq: int, limit: int) -> list[GroupRow]:
        """Scored groups stored after `last_seq`, in arrival order."""
        with Session(self.engine, expire_on_commit=False) as session:
            return list(session.scalars(select(GroupRow).where(GroupRow.seq > last_seq)
                                        .order_by(GroupRow.seq).limit(limit)))

    def genrm_after(self, last_id: int, limit: int) -> list[GenRMSampleRow]:
        with Session(self.engine, expire_on_commit=False) as session:
            return list(session.scalars(select(GenRMSampleRow).where(GenRMSampleRow.id > last_id)
                                        .order_by(GenRMSampleRow.id).limit(limit)))

    def metrics_after(self, last_id: int, name: str) -> list[MetricRow]:
        with Session(self.engine, expire_on_commit=False) as session:
            return list(session.scalars(select(MetricRow).where(MetricRow.id > last_id, MetricRow.name == name)
                                        .order_by(MetricRow.id)))

    def last_id(self, table: type[RolloutRow] | type[GenRMSampleRow] | type[MetricRow]) -> int:
        with Session(self.engine) as session:
            return session.scalar(select(func.max(table.id))) or 0

    def rollouts_since_id(self, last_id: int) -> list[tuple[int, int, int, float, int, int]]:
        """(version, length, window, nll_sum, finish, id) of rollouts stored after `last_id`, oldest first."""
        r = RolloutRow
        query = (select(r.policy_version, r.length, r.window, r.nll_sum, r.finish, r.id)
                 .where(r.id > last_id).order_by(r.id))
        with Session(self.engine) as session:
            return [tuple(row) for row in session.execute(query).all()]
