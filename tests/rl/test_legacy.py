"""Schema-1 ScoredGroups, written by the reward service before the algorithm moved to the learner
(tests/fixtures/scored_v1.jsonl: 12 groups of 4 real samples of the warm-started policy, scored by
that version's svc_reward.groups.score_group with overlong_buffer_frac 0.5; string statuses, shaped
rewards, advantages and dropped flags set), read by today's code: same groups kept, same advantages."""
import base64
import json
from pathlib import Path

import pytest

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.rl.config import AlgorithmConfig
from m1flow.rl.filling import fill_batches
from m1flow.rl.legacy import rewards_are_shaped, upgrade
from m1flow.rl.selection import ALL_EQUAL, TOO_FEW_USABLE, Selected, check_group
from m1flow.status import Status, status_of

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "scored_v1.jsonl"
# What the schema-1 reward service said (printed when the fixture was written).
V1_DROPPED = {"arith-11-1/v1", "arith-11-5/v1", "arith-11-6/v1", "arith-11-8/v1"}
V1_ADVANTAGES = {"arith-11-0/v1": [1.0, -1.0, -1.0, 1.0], "arith-11-3/v1": [-0.577, -0.577, -0.577, 1.732],
                 "arith-11-7/v1": [-0.577, -0.577, 1.732, -0.577]}


def v1_records() -> list[tuple[str, bytes]]:
    return [(e["key"], base64.b64decode(e["value_b64"])) for e in map(json.loads, FIXTURE.read_text().splitlines())]


def v1_groups() -> list[events.ScoredGroup]:
    return [codec.decode(value, events.ScoredGroup) for _, value in v1_records()]


def test_schema_1_records_decode_and_upgrade_to_enum_statuses():
    groups = v1_groups()
    assert len(groups) == 12 and all(g.header.schema_version == 1 and rewards_are_shaped(g) for g in groups)
    assert groups[5].samples[0].legacy_status == "judge_error" and groups[5].samples[0].status == 0
    assert status_of(groups[5].samples[0]) is Status.JUDGE_ERROR
    for g in map(upgrade, groups):
        check_group(g)
        assert all(s.status and not s.legacy_status for s in g.samples)
    assert [s.status for s in groups[5].samples] == [Status.JUDGE_ERROR] * 4
    assert {s.status for g in groups if g.group_id != "arith-11-5/v1" for s in g.samples} == {Status.OK}


def test_the_learner_keeps_what_schema_1_kept_with_the_same_advantages():
    cfg = AlgorithmConfig()  # grpo, the estimator schema 1 used; shaping is not applied again
    outcomes = {g.group_id: cfg.select(upgrade(g), current_version=0) for g in v1_groups()}
    assert {gid for gid, o in outcomes.items() if not isinstance(o, Selected)} == V1_DROPPED
    assert outcomes["arith-11-5/v1"].reason == TOO_FEW_USABLE and outcomes["arith-11-6/v1"].reason == ALL_EQUAL
    for gid, expected in V1_ADVANTAGES.items():
        assert list(outcomes[gid].advantages) == pytest.approx(expected, abs=1e-3)
    # the schema-1 rewards kept their overlong penalty (-0.5 at 3 of 4 tokens) and were not shaped twice
    assert outcomes["arith-11-3/v1"].rewards == pytest.approx((-0.4, -0.4, -0.4, 0.6))


def test_schema_1_groups_fill_batches():
    batches = list(fill_batches(v1_groups(), AlgorithmConfig(), batch_groups=3))
    assert [len(b) for b in batches] == [3, 3, 2]
