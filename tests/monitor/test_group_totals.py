from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.group_totals import GroupTotals
from m1flow.status import Status
from svc_monitor.adapters import scored_group_rows


def _group(gid: str, flat: bool = False) -> events.ScoredGroup:
    g = events.ScoredGroup(header=codec.header("test", message_id=gid), group_id=gid)
    g.samples.add(token_ids=[1, 2, 3], reward=1.0, correct=True, status=Status.OK, policy_version=4)
    g.samples.add(token_ids=[1], reward=1.0 if flat else 0.0, correct=flat, status=Status.OK, policy_version=3)
    g.samples.add(token_ids=[5, 6], reward=1.0 if flat else 0.5, status=Status.OK, policy_version=4)  # GenRM: no verdict
    g.samples.add(token_ids=[7] * 9, reward=0.0, status=Status.VERIFIER_TIMEOUT, policy_version=4)
    return g


def test_infra_failures_are_left_out_and_unjudged_samples_do_not_count_for_accuracy():
    totals = GroupTotals.of([_group("a"), _group("b", flat=True)])
    assert totals == GroupTotals(samples=6, reward_sum=4.5, correct=3, judged=4, length_sum=12)
    assert totals.means() == {"reward_mean": 0.75, "accuracy": 0.75, "length_mean": 2.0}
    assert GroupTotals.of([]).means() == {}


def test_schema_1_string_statuses_count_the_same():
    old = events.ScoredGroup(header=events.Header(schema_version=1), group_id="old")
    old.samples.add(token_ids=[1], reward=1.5, correct=True, legacy_status="ok")
    old.samples.add(token_ids=[1, 2], reward=0.0, legacy_status="timeout")
    assert GroupTotals.of([old]) == GroupTotals(samples=1, reward_sum=1.5, correct=1, judged=1, length_sum=1)


def test_learner_metrics_and_monitor_rows_agree():
    from m1flow.rl.config import AlgorithmConfig
    from svc_learner.batching import batch_stats

    groups = [_group("a"), _group("b", flat=True)]
    rows = [scored_group_rows(g, ts_ms=0).group for g in groups]
    assert rows[0].policy_version == 3
    selected = [AlgorithmConfig(dynamic_sampling=False).select(g, current_version=4) for g in groups]
    stats = batch_stats(selected)
    assert sum(r.reward_sum for r in rows) / sum(r.samples for r in rows) == stats["reward_mean"]
    assert sum(r.correct for r in rows) / sum(r.judged for r in rows) == stats["accuracy"]


def test_a_group_is_filed_under_its_verifier_kind_and_an_older_one_under_its_task_type():
    old = _group("old")
    old.task_type = "chain"
    new = _group("new")
    new.task_type, new.verifier_kind = "chain", "arith"
    assert [scored_group_rows(g, ts_ms=0).group.kind for g in (old, new)] == ["chain", "arith"]
