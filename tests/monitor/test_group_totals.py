from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.group_totals import GroupTotals
from m1flow.verdicts import INFRA_FAILURE_STATUSES
from svc_learner.batching import group_stats
from svc_monitor.adapters import scored_group_rows


def _group(gid: str, dropped: bool = False) -> events.ScoredGroup:
    g = events.ScoredGroup(header=codec.header("test", message_id=gid), group_id=gid, dropped=dropped)
    g.samples.add(token_ids=[1, 2, 3], reward=1.0, correct=True, status="ok", policy_version=4)
    g.samples.add(token_ids=[1], reward=0.0, correct=False, status="ok", policy_version=3)
    g.samples.add(token_ids=[5, 6], reward=0.5, status="ok", policy_version=4)  # a GenRM score: no verdict
    g.samples.add(token_ids=[7] * 9, reward=0.0, status=sorted(INFRA_FAILURE_STATUSES)[0], policy_version=4)
    return g


def test_infra_failures_are_left_out_and_unjudged_samples_do_not_count_for_accuracy():
    totals = GroupTotals.of([_group("a"), _group("b", dropped=True)])
    assert totals == GroupTotals(samples=6, reward_sum=3.0, correct=2, judged=4, length_sum=12, dropped=1)
    assert totals.means() == {"reward_mean": 0.5, "accuracy": 0.5, "length_mean": 2.0, "groups_dropped": 1.0}
    assert GroupTotals.of([]).means() == {}


def test_learner_metrics_and_monitor_rows_agree():
    groups = [_group("a"), _group("b", dropped=True)]
    rows = [scored_group_rows(g, ts_ms=0).group for g in groups]
    assert rows[0].policy_version == 3
    assert sum(r.reward_sum for r in rows) / sum(r.samples for r in rows) == group_stats(groups)["reward_mean"]
    assert sum(r.correct for r in rows) / sum(r.judged for r in rows) == group_stats(groups)["accuracy"]
