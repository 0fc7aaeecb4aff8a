"""What the monitor's reports and rules sum up from its store: reward, accuracy, length and throughput
per policy version, verifier kind and source; what was stored since a moment. A base of the Store,
over its engine."""
from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from svc_monitor.schema import DeadLetterRow, GroupRow, PolicyRow, RolloutRow


class Aggregates:
    engine: Engine

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

    def by_version_and_kind(self) -> list[dict[str, Any]]:
        """Mean reward and accuracy per policy version and verifier kind."""
        g = GroupRow
        query = (select(g.policy_version, g.kind, func.sum(g.samples), func.sum(g.reward_sum),
                        func.sum(g.correct), func.sum(g.judged))
                 .group_by(g.policy_version, g.kind).order_by(g.policy_version))
        with Session(self.engine) as session:
            rows = session.execute(query).all()
        return [{"policy_version": v, "kind": k or "?", "mean_reward": r / max(s, 1),
                 "accuracy": (c / j) if j else None} for v, k, s, r, c, j in rows]

    def by_source(self, kinds: bool = True) -> list[dict[str, Any]]:
        """Reward, accuracy, length and throughput per policy version and source (and verifier kind).

        accuracy counts verdicts only (correct among the samples judged; None when none was): a
        partial-credit reward of 0.5 is reward, never half a correct answer. samples_per_min is the
        source's samples over the minutes the version was the newest policy (see `version_minutes`),
        so the sources add up to the version's throughput; None when that time is unknown.
        """
        g = GroupRow
        keys = [g.policy_version, g.source, *([g.kind] if kinds else [])]
        query = (select(*keys, func.count(), func.sum(g.samples), func.sum(g.reward_sum), func.sum(g.correct),
                        func.sum(g.judged), func.sum(g.length_sum)).group_by(*keys).order_by(*keys))
        with Session(self.engine) as session:
            rows = session.execute(query).all()
        minutes = self.version_minutes()
        out = []
        for v, source, *kind, n, s, r, c, j, length in rows:
            span = minutes.get(v, 0.0)
            out.append({"policy_version": v, "source": source or "?", **({"kind": kind[0] or "?"} if kinds else {}),
                        "groups": n, "samples": s, "mean_reward": r / max(s, 1), "accuracy": (c / j) if j else None,
                        "judged": j, "mean_length": length / max(s, 1),
                        "samples_per_min": s / span if span > 0 else None})
        return out

    def reasons_by_source(self) -> list[dict[str, Any]]:
        """Samples per source, verifier kind and verdict reason (why a patch scored 0: did not apply,
        does not import, regressed a PASS_TO_PASS test, ...), over every group that carried reasons."""
        g = GroupRow
        counts: Counter[tuple[str, str, str]] = Counter()
        with Session(self.engine) as session:
            for source, kind, reasons in session.execute(select(g.source, g.kind, g.reasons)
                                                         .where(g.reasons.is_not(None))):
                for reason, samples in (reasons or {}).items():
                    counts[(source or "?", kind or "?", reason)] += int(samples)
        return [{"source": s, "kind": k, "reason": r, "samples": n} for (s, k, r), n in sorted(counts.items())]

    def version_minutes(self) -> dict[int, float]:
        """How long each version that scored groups was the newest policy: from its announcement on
        `policy` to the next version's (the newest: to its last group stored); a version whose
        announcement is not stored falls back to the first (last) of its groups stored."""
        g = GroupRow
        with Session(self.engine) as session:
            announced = dict(session.execute(select(PolicyRow.version, PolicyRow.ts_ms)).all())
            seen = session.execute(select(g.policy_version, func.min(g.ts_ms), func.max(g.ts_ms))
                                   .where(g.ts_ms > 0).group_by(g.policy_version)).all()  # before 0002: no time
        return {v: (announced.get(v + 1, last) - announced.get(v, first)) / 60_000 for v, first, last in seen}

    def groups_per_version(self) -> list[tuple[int, int]]:
        """(policy version, scored groups sampled with it), oldest version first."""
        query = select(GroupRow.policy_version, func.count()).group_by(GroupRow.policy_version).order_by(
            GroupRow.policy_version)
        with Session(self.engine) as session:
            return [(int(v), int(n)) for v, n in session.execute(query).all()]

    def counts_since(self, since_ms: int) -> dict[str, float]:
        """Rollouts, their tokens and scored groups stored since `since_ms`, and the groups' mean version."""
        with Session(self.engine) as session:
            rollouts, tokens = session.execute(select(func.count(), func.coalesce(func.sum(RolloutRow.length), 0))
                                               .where(RolloutRow.ts_ms >= since_ms)).one()
            groups, mean_version = session.execute(select(func.count(), func.avg(GroupRow.policy_version))
                                                   .where(GroupRow.ts_ms >= since_ms)).one()
        return {"rollouts": rollouts, "tokens": tokens, "groups": groups,
                "mean_version": float(mean_version) if mean_version is not None else None}

    def dead_letters_since(self, since_ms: int) -> dict[str, int]:
        """Dead letters per consumer group since `since_ms`."""
        with Session(self.engine) as session:
            rows = session.execute(select(DeadLetterRow.consumer_group, func.count())
                                   .where(DeadLetterRow.ts_ms >= since_ms)
                                   .group_by(DeadLetterRow.consumer_group)).all()
        return {group or "?": n for group, n in rows}
