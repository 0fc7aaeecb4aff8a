"""The mixture in force: SetMixture applied, refused with a reason, kept on and restored from a state."""
from __future__ import annotations

import math

import pytest

from m1flow.contracts import events
from m1flow.data.dataset import DatasetConfig, open_source
from svc_source.mixture import Mixture, MixtureRefused, Schedule, history_key
from svc_source.order import Interleave

BASE = Mixture.initial({"arith": 1.0, "gsm": 2.0, "rg:leg_counting": 1.0}, {"arith": None, "rg:leg_counting": 2})
GENERATORS = {"arith", "rg:leg_counting"}


def cmd(weights=None, levels=None, stage="") -> events.SetMixture:
    return events.SetMixture(weights=weights or {}, levels=levels or {}, stage=stage)


def test_a_change_keeps_what_it_does_not_name_and_counts_a_version():
    m = BASE.after(cmd({"gsm": 0.0}, {"arith": 3}, "blend"), draw=120, generators=GENERATORS, command_id="c1")
    assert (m.version, m.from_draw, m.stage, m.command_id) == (1, 120, "blend", "c1")
    assert m.weights == {"arith": 1.0, "gsm": 0.0, "rg:leg_counting": 1.0}
    assert m.levels == {"arith": 3, "rg:leg_counting": 2}
    assert m.after(cmd({"arith": 5}), 130, GENERATORS).stage == "blend"  # no stage named: the stage stays


@pytest.mark.parametrize("command,code,says", [
    (cmd({"nope": 1.0}), "unknown_source", "nope"),
    (cmd({"gsm": -1.0}), "negative_weight", "gsm"),
    (cmd({"gsm": math.nan}), "negative_weight", "gsm"),
    (cmd({"arith": 0, "gsm": 0, "rg:leg_counting": 0}), "all_zero", "zero"),
    (cmd(levels={"gsm": 2}), "level_not_generator", "gsm"),
    (cmd(levels={"arith": 0}), "level_below_1", "arith"),
    (cmd(), "empty", "no weight"),
])
def test_refusals_name_their_reason(command, code, says):
    with pytest.raises(MixtureRefused, match=says) as err:
        BASE.after(command, 0, GENERATORS)
    assert err.value.code == code


def test_the_state_record_restores_the_mixture_over_the_config():
    m = BASE.after(cmd({"gsm": 0.5}, {"arith": 2}, "s2"), 64, GENERATORS, "c9")
    state = m.to_state(events.SourceState(draws=64))
    restored = BASE.restored(events.SourceState.FromString(state.SerializeToString()))
    assert restored == m
    assert BASE.restored(events.SourceState(draws=10)) is BASE  # no mixture written: the config's
    fewer = Mixture.initial({"arith": 1.0}, {"arith": None}).restored(state)
    assert fewer.weights == {"arith": 1.0} and fewer.levels == {"arith": 2}  # a dropped source is dropped


def test_a_replay_schedule_applies_each_version_at_its_draw():
    v1 = BASE.after(cmd({"gsm": 0.0}), 100, GENERATORS)
    v2 = v1.after(cmd({"gsm": 1.0}), 250, GENERATORS)
    schedule = Schedule([v1, v2])
    assert schedule.due(99, 0) is None and schedule.due(100, 0) == v1
    assert schedule.due(300, 0) == v2 and schedule.due(300, 2) is None
    assert schedule.next_draw(0) == 100 and schedule.next_draw(1) == 250 and schedule.next_draw(2) is None
    assert history_key("run/g", 2) == "run/g/mixture/00000002"


def test_a_weight_of_zero_is_never_drawn_even_when_the_others_are_exhausted():
    inter = Interleave([1.0, 0.0, 1.0], seed=3)
    assert {inter.choice(d) for d in range(2000)} == {0, 2}
    assert inter.choice(5, [True, False, True]) is None  # only the weight-0 source is left: nothing to draw
    assert inter.choice(5, [True, False, False]) == 2


def test_a_generator_at_a_run_time_level_tags_its_ids():
    cfg = DatasetConfig(generator="arith", size=10, seed=1)
    plain = dict(open_source(cfg).records(0, 3))
    tagged = dict(open_source(cfg.model_copy(update={"level": 3}), tag_level=True).records(0, 3))
    assert [r.id for r in plain.values()] == ["1-0", "1-1", "1-2"]
    assert [r.id for r in tagged.values()] == ["1-0@L3", "1-1@L3", "1-2@L3"]
    assert all(len(t.prompt) > len(p.prompt) for p, t in zip(plain.values(), tagged.values()))  # 4-digit operands
