"""The chaos runs' "settled" condition counts the groups the learner owes a step for: groups it
skips (all rewards equal, too stale) wait uncommitted after its checkpoint but are no batch. A run
whose last groups were all skipped once waited 300 s for a step that would never come (CI, stop 41)."""
from __future__ import annotations

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.status import Status
from ops.chaos.invariants import Report, _check_learner


def scored(gid: str, rewards: list[float], version: int = 0) -> dict:
    group = events.ScoredGroup(group_id=gid, group_size=len(rewards))
    for i, r in enumerate(rewards):
        group.samples.add(index=i, prompt_token_ids=[1, 5], token_ids=[7, 8], logprobs=[-1.0, -1.0],
                          reward=r, status=Status.OK, policy_version=version, temperature=1.0, top_p=1.0)
    return codec.to_json(group)


def test_pending_counts_only_the_groups_the_learner_would_train(tmp_path):
    groups = [("same0", [1.0] * 4), ("same1", [0.0] * 4), ("mixed0", [1.0, 0.0, 0.0, 1.0]),
              ("same2", [1.0] * 4), ("same3", [0.0] * 4), ("mixed1", [0.0, 0.0, 0.0, 1.0])]
    scored_at = [(off, gid, scored(gid, r)) for off, (gid, r) in enumerate(groups)]
    report = Report()
    _check_learner(report, tmp_path, scored_at, batch_groups=4)  # no checkpoint yet: all after it
    assert report.numbers["pending"] == 2
    assert "6 groups after it, 2 of them trainable" in report.checks[-1].detail


def test_a_cut_short_group_is_not_owed_a_step(tmp_path):
    whole = scored("whole", [1.0, 0.0])
    cut = scored("cut", [1.0, 0.0])
    cut["group_size"] = 4  # two of four samples, not marked incomplete: the learner dead-letters it
    report = Report()
    _check_learner(report, tmp_path, [(0, "whole", whole), (1, "cut", cut)], batch_groups=4)
    assert report.numbers["pending"] == 1
