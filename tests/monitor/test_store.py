"""The store on SQLite and on a real PostgreSQL server: writes, dedupe, reports, migrations, retention."""
from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.status import Status
from svc_monitor import adapters
from svc_monitor.schema import AlertRow, Base, GroupRow, RolloutRow
from svc_monitor.store import Batch, Store, schema_revision

HEAD = "0006"


def scored(gid: str, version: int, kind: str = "arith", genrm: bool = False) -> events.ScoredGroup:
    group = events.ScoredGroup(header=codec.header("test"), group_id=gid, task_type=kind)
    for i, (reward, correct) in enumerate([(1.0, True), (0.0, False), (0.5, None)]):
        sample = group.samples.add(index=i, reward=reward, token_ids=[1] * (i + 2), policy_version=version,
                                   status=Status.OK)
        if correct is not None:
            sample.correct = correct
        if genrm:
            sample.parts.genrm = reward - 0.5
    return group


def rollout(rid: str, version: int, tokens: list[int]) -> events.Rollout:
    return events.Rollout(rollout_id=rid, group_id="g", policy_version=version, token_ids=tokens,
                          logprobs=[-0.5] * len(tokens), max_new_tokens=8,
                          finish_reason=events.FINISH_REASON_STOP, verifier=events.VerifierSpec(kind="arith"))


def control(command: str) -> events.Control:
    msg = events.Control(header=codec.header("cli", message_id=f"cli-{command}"), reason="by hand",
                         evidence=events.Evidence(rule="manual", decided_by="cli:test", version_to=3))
    getattr(msg, command).SetInParent()
    return msg


def test_writes_are_idempotent_and_reports_add_up(store_url):
    store = Store(store_url)
    batch = Batch(groups=[adapters.scored_group_rows(scored("a", 1), 10), adapters.scored_group_rows(scored("a", 1), 10),
                          adapters.scored_group_rows(scored("b", 2, "open", genrm=True), 20)],
                  rollouts=[adapters.rollout_row(rollout("r1", 1, [1, 2, 3, 1, 2, 3]), 5, 2),
                            adapters.rollout_row(rollout("r1", 1, [1, 2, 3, 1, 2, 3]), 5, 2)],
                  decisions=[adapters.decision_row(control("pause"), 0)])
    written = store.write(batch)
    assert [g.group_id for g in written.groups] == ["a", "b"] and len(written.decisions) == 1
    again = store.write(Batch(groups=[adapters.scored_group_rows(scored("a", 1), 30)],
                              decisions=[adapters.decision_row(control("pause"), 0)]))
    assert again.groups == [] and again.decisions == []  # a replayed record is stored once
    rows = {r["policy_version"]: r for r in store.by_version()}
    assert rows[1]["groups"] == 1 and rows[1]["samples"] == 3 and rows[1]["accuracy"] == 0.5
    assert rows[2]["mean_reward"] == 0.5 and rows[1]["mean_length"] == 3.0
    kinds = {(r["policy_version"], r["kind"]) for r in store.by_version_and_kind()}
    assert kinds == {(1, "arith"), (2, "open")}
    genrm = store.genrm_after(0, 100)
    assert [(r.group_id, r.score, r.length) for r in genrm] == [("b", 0.5, 2), ("b", -0.5, 3), ("b", 0.0, 4)]
    (r1,) = store.rollouts_after(0, 10)
    assert (r1.length, r1.nll_sum, r1.repetition, r1.window) == (6, 3.0, 0.4, 8)  # 2 of 5 bigrams repeat one before
    (decision,) = store.decisions()
    assert decision["command"] == "pause" and decision["evidence"]["decided_by"] == "cli:test"
    assert decision["evidence"]["version_to"] == 3
    store.close()


def test_state_alerts_and_signals_round_trip(store_url):
    store = Store(store_url)
    store.set_state("controller", {"cursors": {"genrm": 4}})
    store.set_state("controller", {"cursors": {"genrm": 9}, "window": {"window": 12}})
    assert store.get_state("controller")["cursors"] == {"genrm": 9}
    store.raise_alert(AlertRow(kind="precision", subject="learner", severity="critical", message="low",
                               evidence={"signals": {"x": 0.9}}, raised_ms=1))
    store.raise_alert(AlertRow(kind="no_progress", subject="m1flow-reward", severity="critical", message="stuck",
                               evidence={}, raised_ms=2))
    assert store.resolve_alerts("precision", "learner", 5) == 1
    alerts = store.alerts()
    assert [(a["kind"], a["resolved_ms"]) for a in alerts] == [("no_progress", None), ("precision", 5)]
    assert alerts[1]["evidence"] == {"signals": {"x": 0.9}}
    store.close()


def test_schema_after_migrations_is_the_models_schema(store_url):
    store = Store(store_url)
    assert schema_revision(store.engine) == HEAD
    with store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata) == []
    store.close()
    Store(store_url).close()  # opening an up-to-date store again changes nothing


def previous_schema() -> sa.MetaData:
    """The two tables svc_monitor/store.py created before migrations (create_all, no alembic_version)."""
    meta = sa.MetaData()
    sa.Table("groups", meta, sa.Column("group_id", sa.String, primary_key=True),
             sa.Column("policy_version", sa.Integer, nullable=False, index=True),
             *[sa.Column(c, t, nullable=False) for c, t in [("samples", sa.Integer), ("reward_sum", sa.Float),
                                                            ("correct", sa.Integer), ("judged", sa.Integer),
                                                            ("length_sum", sa.Integer), ("dropped", sa.Integer)]])
    sa.Table("metrics", meta, sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
             sa.Column("service", sa.String, nullable=False), sa.Column("name", sa.String, nullable=False, index=True),
             sa.Column("step", sa.Integer, nullable=False), sa.Column("value", sa.Float, nullable=False))
    return meta


def test_a_store_written_before_migrations_opens_and_keeps_its_history(store_url):
    old = previous_schema()
    engine = sa.create_engine(store_url)
    old.create_all(engine)
    with engine.begin() as conn:
        conn.execute(old.tables["groups"].insert(), [
            dict(group_id=f"g{i}", policy_version=i // 2, samples=4, reward_sum=2.0, correct=2, judged=4,
                 length_sum=12, dropped=0) for i in range(4)])
        conn.execute(old.tables["metrics"].insert(), [dict(service="learner", name="learner/loss", step=1, value=0.5)])
    engine.dispose()

    store = Store(store_url)
    assert schema_revision(store.engine) == HEAD
    assert [(r["policy_version"], r["groups"], r["accuracy"]) for r in store.by_version()] == [(0, 2, 0.5), (1, 2, 0.5)]
    assert store.metric_series("learner/loss") == [(1, 0.5)]
    store.write(Batch(groups=[adapters.scored_group_rows(scored("new", 2), 100)],
                      rollouts=[adapters.rollout_row(rollout("r", 2, [1, 2]), 100, 4)]))
    assert [r["kind"] for r in store.by_version_and_kind()] == ["?", "?", "arith"]  # old rows: no task type
    assert store.latest_version() == 2
    store.close()


def test_retention_drops_old_detail_and_keeps_totals(store_url):
    store = Store(store_url)
    day = 86_400_000
    store.write(Batch(groups=[adapters.scored_group_rows(scored(f"g{v}", v), 10 * day + v) for v in range(6)],
                      rollouts=[adapters.rollout_row(rollout(f"r{v}", v, [1]), 10 * day + v, 4) for v in range(6)]
                      + [adapters.rollout_row(rollout("ancient", 5, [1]), 1, 4)]))
    deleted = store.prune(keep_versions=3, keep_days=5, at_ms=10 * day + 10)
    assert deleted["rollouts"] == 4  # versions 0-2 and one too old
    assert sorted(r.policy_version for r in store.rollouts_after(0, 100)) == [3, 4, 5]
    assert len(store.by_version()) == 6  # per-version totals stay
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(GroupRow)).scalar() == 6
        assert conn.execute(sa.select(sa.func.count()).select_from(RolloutRow)).scalar() == 3
    store.close()


def test_a_0003_store_numbers_its_groups_in_arrival_order_and_keeps_its_decisions(store_url):
    from svc_monitor.store import make_engine, migrate

    engine = make_engine(store_url)
    migrate(engine, "0003")
    with engine.begin() as conn:
        for gid, ts in (("late", 30), ("early", 10), ("b-mid", 20), ("a-mid", 20)):
            conn.execute(sa.text("INSERT INTO groups (group_id, policy_version, samples, reward_sum, correct, judged, "
                                 "length_sum, dropped, kind, ts_ms, source, domain) VALUES "
                                 f"('{gid}', 1, 2, 1.0, 1, 2, 4, 0, 'arith', {ts}, 'arith', '')"))
        conn.execute(sa.text("INSERT INTO decisions (message_id, ts_ms, command, max_new_tokens, reason, evidence, "
                             "version) VALUES ('m1', 5, 'set_window', 16, 'r', '{}', 1)"))
    engine.dispose()

    store = Store(store_url)
    assert schema_revision(store.engine) == HEAD
    assert [(g.group_id, g.seq) for g in store.groups_after(0, 10)] == [("early", 1), ("a-mid", 2), ("b-mid", 3),
                                                                        ("late", 4)]
    (old,) = store.decisions()
    assert (old["command"], old["weights"], old["levels"], old["stage"]) == ("set_window", None, None, "")
    store.write(Batch(groups=[adapters.scored_group_rows(scored("new", 2), 40)]))
    assert [g.seq for g in store.groups_after(3, 10)] == [4, 5]  # new groups go on after the old ones
    store.close()
