"""The curriculum on hand-made windows of scored groups: a stage ends on a plateau (and not before,
nor on one that the window's verdicts are too few to tell from noise), a ramp moves weights one step
per window, levels follow accuracy with hysteresis and cool-down, schedules that could never advance
are refused at load, a person's mixture is the one in force, and a restarted controller continues
where the saved state left it. The plateau rule against sampling noise, by simulation:
test_plateau_simulation.py."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from m1flow.bus import codec
from m1flow.contracts import events
from ops.control_cli import control_command, format_report, mixture_level, mixture_weight
from svc_monitor import adapters
from svc_monitor.config import MonitorConfig
from svc_monitor.controller import STATE_KEY, Controller
from svc_monitor.dashboard.figures import Figures
from svc_monitor.report import build_report
from svc_monitor.rules.curriculum import (RULE_LEVEL, RULE_RAMP, RULE_STAGE, CurriculumRule, window_accuracy,
                                          window_estimates)
from svc_monitor.rules.trend import Estimate, t_score
from svc_monitor.schedule import SIGNALS, CurriculumConfig, SignalSpec
from svc_monitor.schema import GroupRow
from svc_monitor.store import Batch, Store, now_ms

REASONING = {"name": "reasoning", "weights": {"arith": 1.0, "rg:basic_arithmetic": 1.0, "chat": 0.0},
             "until": [{"signal": "accuracy_gain", "below": 0.02, "windows": 2}]}
BLEND = {"name": "blend", "weights": {"arith": 1.0, "rg:basic_arithmetic": 1.0, "chat": 0.1},
         "ramp": {"weights": {"chat": 1.0}, "windows": 3}}


def schedule(**extra) -> CurriculumConfig:
    return CurriculumConfig.model_validate({"stages": [REASONING, BLEND], "window_groups": 4, "min_judged": 4,
                                            **extra})


def window(accuracy: dict[str, float], version: int = 0, judged: int = 10_000) -> list[GroupRow]:
    """One window: per source, one group of `judged` verdicts with that accuracy. So many by default
    that the accuracy is known to +-0.005: these tests read the schedule's logic, the plateau rule's
    statistics have their own (test_plateau_simulation.py and below)."""
    return [GroupRow(group_id=f"{s}-{version}", policy_version=version, samples=judged, reward_sum=0.0,
                     correct=round(a * judged), judged=judged, length_sum=0, kind="k", source=s, ts_ms=now_ms())
            for s, a in accuracy.items()]


def test_accuracy_per_window_counts_verdicts_and_needs_enough_of_them():
    rows = window({"arith": 0.5}, judged=100) + window({"arith": 1.0}, version=1, judged=100) \
        + window({"chat": 1.0}, judged=3)
    assert window_accuracy(rows, min_judged=4) == {"arith": 0.75}  # chat: 3 verdicts, too few
    (arith,) = window_estimates(rows, min_judged=4).values()
    assert (arith.n, arith.groups, arith.df) == (200, 2, 1)  # two groups of 100: the groups' spread rules
    assert arith.se == pytest.approx(0.25)  # sqrt(2/1 * (25^2 + 25^2)) / 200: two prompts, either 0.5 or 1


def test_a_windows_standard_error_counts_groups_not_samples():
    alike = Estimate.from_groups([(4, 8)] * 30)  # every prompt half solved: binomial (smoothed) at most
    assert alike.value == 0.5 and alike.se == pytest.approx((0.5 * 0.5 / 240) ** 0.5, rel=1e-3)
    assert alike.df == float("inf")  # the binomial floor: taken as known
    split = Estimate.from_groups([(8, 8), (0, 8)] * 15)  # same accuracy, but each prompt all or nothing
    assert split.value == 0.5 and split.se == pytest.approx((30 / 29 * 30 * 16 / 240 ** 2) ** 0.5)
    assert split.se / alike.se == pytest.approx(8 ** 0.5, rel=0.03)  # the design effect 1 + (G-1)*ICC at ICC 1
    assert split.df == 29
    none = Estimate.from_groups([(0, 8)] * 30)  # nothing solved is not known exactly
    assert none.value == 0 and none.se == pytest.approx((1 / 242 * 241 / 242 / 240) ** 0.5)  # (0+1)/(240+2)
    assert Estimate.from_groups([(0, 0)]) is None
    heldout = Estimate.from_counts(60, 200, design_effect=1.5)  # the seam for held-out pass@1 per set
    assert heldout.value == 0.3 and heldout.se == pytest.approx((61 / 202 * 141 / 202 / 200 * 1.5) ** 0.5)
    with pytest.raises(ValueError):
        Estimate.from_counts(1, 0)


def test_the_one_sided_quantile_is_students_t():
    exact = {1: 6.314, 2: 2.920, 3: 2.353, 5: 2.015, 10: 1.812, 30: 1.697, float("inf"): 1.645}
    for df, t in exact.items():
        assert t_score(0.95, df) == pytest.approx(t, rel={1: 0.05, 2: 5e-3}.get(df, 2e-3))
    assert t_score(0.5, 4) == 0.0 and t_score(0.975, float("inf")) == pytest.approx(1.960, abs=1e-3)


def test_stage_advances_once_accuracy_plateaus_and_not_before():
    rule = CurriculumRule(schedule())
    (start,) = rule.start(version=0).commands
    assert (start.command, start.stage, start.evidence.rule) == ("set_mixture", "reasoning", RULE_STAGE)
    assert start.weights == {"arith": 1.0, "rg:basic_arithmetic": 1.0, "chat": 0.0}
    assert rule.start().commands == []  # once
    # rising accuracy is no plateau; gains of 0.01 (arith) and 0.0 (rg) twice in a row are
    climbing = [(0.2, 0.3), (0.4, 0.5), (0.6, 0.7), (0.61, 0.7)]
    for v, (a, r) in enumerate(climbing):
        assert rule.evaluate(window({"arith": a, "rg:basic_arithmetic": r}, v)).commands == []
    assert rule.state.stage == 0
    (cmd,) = rule.evaluate(window({"arith": 0.6, "rg:basic_arithmetic": 0.7}, 4)).commands
    assert (cmd.stage, cmd.evidence.rule, rule.state.stage, rule.state.stage_windows) == ("blend", RULE_STAGE, 1, 0)
    assert cmd.weights == {"arith": 1.0, "rg:basic_arithmetic": 1.0, "chat": 0.1}
    ev = cmd.evidence
    # the gain is the slope over the last 3 windows (0.6, 0.61, 0.6): 0 per window; its 95% upper
    # bound, from the windows' standard errors (binomial, 10 000 verdicts each), is below 0.02
    se = ((0.6 * 0.4 / 10_000 + 0.6 * 0.4 / 10_000) / 4) ** 0.5
    assert ev.signals["accuracy_gain[arith]"] == pytest.approx(0.0, abs=1e-12) and ev.signals["accuracy[arith]"] == 0.6
    assert ev.signals["accuracy_gain[arith] se"] == pytest.approx(se, rel=1e-3)
    assert ev.signals["accuracy_gain[arith] upper"] == pytest.approx(1.645 * se, rel=1e-3)
    assert ev.signals["accuracy_gain[arith] n"] == 30_000
    assert ev.thresholds["accuracy_gain[arith]<"] == 0.02 and ev.thresholds["accuracy_gain[arith] windows"] == 2
    assert ev.thresholds["accuracy_gain[arith] confidence"] == 0.95
    assert ev.signals["accuracy_gain[rg:basic_arithmetic] windows"] == 2 and ev.windows == 2
    assert (ev.version_from, ev.version_to) == (4, 4)
    assert "reasoning -> blend" in cmd.reason and "accuracy_gain of arith, rg:basic_arithmetic below 0.02" in cmd.reason
    assert "at 95% confidence" in cmd.reason


def test_a_plateau_is_not_declared_on_windows_too_small_to_tell_it_from_noise():
    """A flat 0.5 on 100 verdicts a window: the slope's upper bound stays near 0.06, above 0.02 (the
    old rule, gain between two windows, would have ended the stage on the third window). The same
    windows read with the confidence of the estimate itself (0.5) would end it."""
    rule = CurriculumRule(schedule())
    rule.start()
    for v in range(12):
        out = rule.evaluate(window({"arith": 0.5, "rg:basic_arithmetic": 0.5}, v, judged=100))
        assert out.commands == [] and rule.state.stage == 0
    assert rule.state.streaks["0/arith"] == 0
    (gain,) = [g for g in out.signals if g.name == "curriculum/accuracy_gain" and g.subject == "arith"]
    assert gain.value == pytest.approx(0.0, abs=1e-12)
    reckless = schedule(stages=[{**REASONING, "until": [{**REASONING["until"][0], "confidence": 0.5}]}, BLEND])
    rule = CurriculumRule(reckless)
    rule.start()
    fired = [v for v in range(4) for c in rule.evaluate(window({"arith": 0.5, "rg:basic_arithmetic": 0.5}, v,
                                                               judged=100)).commands if c.evidence.rule == RULE_STAGE]
    assert fired == [2]


def test_a_state_saved_before_the_trend_loads_and_its_gain_counts_start_over():
    """A monitor upgraded mid-stage: the saved state has the old rule's streaks but no history, so no
    trend yet; the plateau needs its N+1 windows again rather than ending the stage on old counts."""
    old = {"started": True, "stage": 0, "stage_windows": 5, "windows": 5, "weights": dict(REASONING["weights"]),
           "accuracy": {"arith": 0.5, "rg:basic_arithmetic": 0.5},
           "streaks": {"0/arith": 2, "0/rg:basic_arithmetic": 2}}
    rule = CurriculumRule(schedule(), old)
    flat = lambda v: window({"arith": 0.5, "rg:basic_arithmetic": 0.5}, v)  # noqa: E731
    assert rule.evaluate(flat(5)).commands == [] and rule.state.streaks == {"0/arith": 0, "0/rg:basic_arithmetic": 0}
    assert rule.evaluate(flat(6)).commands == []
    assert [c.stage for c in rule.evaluate(flat(7)).commands] == ["blend"]


def test_a_gain_condition_on_another_series_takes_its_estimates(monkeypatch):
    """The seam for a held-out signal: a gain signal on series "heldout", fed (estimate, standard
    error) per window through evaluate(extra=...), is decided like the accuracy's."""
    monkeypatch.setitem(SIGNALS._items, "heldout_gain", SignalSpec(-1.0, 1.0, True, None, "test", series="heldout"))
    cfg = schedule(stages=[{**REASONING, "until": [{"signal": "heldout_gain", "sources": ["arith"], "below": 0.02,
                                                    "windows": 2}]}, BLEND])
    rule = CurriculumRule(cfg)
    rule.start()
    rows = window({"arith": 0.1, "rg:basic_arithmetic": 0.1})  # training accuracy flat: not what is read
    for v, (correct, n) in enumerate([(200, 1000), (400, 1000), (405, 1000)]):
        extra = {"heldout": {"arith": Estimate.from_counts(correct, n)}}
        assert rule.evaluate(rows, extra=extra).commands == []  # still rising over the last 3
    (cmd,) = rule.evaluate(rows, extra={"heldout": {"arith": Estimate(0.4, 0.002, 1000)}}).commands
    assert cmd.stage == "blend" and cmd.evidence.signals["heldout_gain[arith]"] == pytest.approx(0.0, abs=1e-9)
    signals = cmd.evidence.signals
    assert signals["heldout_gain[arith] upper"] < 0.02 and signals["heldout_gain[arith] n"] == 3000


def test_a_source_without_enough_verdicts_holds_its_count_and_a_drop_resets_it():
    rule = CurriculumRule(schedule())
    rule.start()
    both = lambda a, v: window({"arith": a, "rg:basic_arithmetic": 0.5}, v)  # noqa: E731
    for v, a in enumerate([0.5, 0.5]):  # rg plateaus at once; arith once
        rule.evaluate(both(a, v))
    sparse = window({"rg:basic_arithmetic": 0.5}, 2) + window({"arith": 0.9}, 2, judged=2)  # arith: no evidence
    assert rule.evaluate(sparse).commands == []
    assert rule.state.streaks == {"0/arith": 1, "0/rg:basic_arithmetic": 2}
    assert rule.evaluate(both(0.7, 3)).commands == []  # +0.2: arith starts over
    assert rule.state.streaks["0/arith"] == 0
    rule.evaluate(both(0.7, 4))
    assert [c.stage for c in rule.evaluate(both(0.7, 5)).commands] == ["blend"]


def test_the_ramp_moves_weights_one_step_per_window_to_its_end():
    rule = CurriculumRule(schedule())
    rule.start()
    for v in range(3):
        rule.evaluate(window({"arith": 0.5, "rg:basic_arithmetic": 0.5}, v))
    assert rule.state.stage == 1
    steps = [rule.evaluate(window({"arith": 0.5}, 3 + i)).commands for i in range(5)]
    assert [len(s) for s in steps] == [1, 1, 1, 0, 0]  # 3 windows, then it stays
    assert [s[0].weights["chat"] for s in steps[:3]] == [0.4, 0.7, 1.0]
    assert all(s[0].evidence.rule == RULE_RAMP and s[0].stage == "blend" for s in steps[:3])
    assert steps[1][0].evidence.signals["ramp_windows"] == 2 and steps[1][0].evidence.thresholds["ramp_windows"] == 3
    assert steps[2][0].weights == {"arith": 1.0, "rg:basic_arithmetic": 1.0, "chat": 1.0}
    assert "ramp 3/3: chat=1" in steps[2][0].reason


LEVELS = {"levels": [{"source": "arith", "band": [0.3, 0.8], "min_level": 1, "max_level": 3, "consecutive": 2,
                      "cooldown_windows": 1}]}


def test_levels_move_after_consecutive_windows_out_of_the_band_within_their_range():
    rule = CurriculumRule(CurriculumConfig.model_validate({**LEVELS, "window_groups": 4, "min_judged": 4}))
    (start,) = rule.start().commands
    assert (start.levels, start.stage, start.weights) == ({"arith": 1}, "", {})
    moves = []
    for v, a in enumerate([0.9, 0.5, 0.9, 0.9,  # the band breaks the streak; then two above: up to 2
                           0.9,                  # cool-down: prompts of level 1 still scoring
                           0.95, 0.95,           # up to 3
                           0.1, 0.95, 0.95, 0.95, 0.95]):  # cool-down, then at the top: it stays
        for c in rule.evaluate(window({"arith": a}, v)).commands:
            moves.append((v, c.levels["arith"]))
            assert c.evidence.rule == RULE_LEVEL and c.evidence.thresholds["accuracy[arith]>"] == 0.8
    assert moves == [(3, 2), (6, 3)]
    for v, a in enumerate([0.2, 0.25, 0.1], start=20):  # down once after two below (then cool-down)
        for c in rule.evaluate(window({"arith": a}, v)).commands:
            moves.append((v, c.levels["arith"]))
            assert "below 0.3" in c.reason and c.evidence.signals["level[arith]"] == 3
    assert moves[-1] == (21, 2) and rule.state.cooldown["arith"] == 0


def test_a_level_change_restarts_the_plateau_evidence_of_its_source():
    cfg = schedule(levels=[{"source": "arith", "band": [0.0, 0.55], "consecutive": 1, "cooldown_windows": 0}])
    rule = CurriculumRule(cfg)
    rule.start()
    rule.evaluate(window({"arith": 0.5, "rg:basic_arithmetic": 0.5}, 0))
    (up,) = rule.evaluate(window({"arith": 0.6, "rg:basic_arithmetic": 0.5}, 1)).commands  # 0.6 > 0.55: level 2
    assert up.levels == {"arith": 2} and "0/arith" not in rule.state.streaks and "arith" not in rule.state.accuracy
    assert set(rule.state.history["accuracy"]) == {"rg:basic_arithmetic"}  # arith's trend starts again
    # harder now: accuracy drops to 0.4, which is the new level's first window, not a plateau
    assert rule.evaluate(window({"arith": 0.4, "rg:basic_arithmetic": 0.5}, 2)).commands == []
    assert rule.state.streaks["0/rg:basic_arithmetic"] == 2 and rule.state.stage == 0


BAD = [
    ({"stages": [{**REASONING, "until": [{"signal": "accuracy", "above": 1.0}]}, BLEND]}, "above 1.0 can never hold"),
    ({"stages": [{**REASONING, "until": [{"signal": "accuracy", "below": -0.1}]}, BLEND]}, "can never hold"),
    ({"stages": [{**REASONING, "until": [{"signal": "accuracy", "above": 0.6, "below": 0.5}]}, BLEND]},
     "can never hold together"),
    ({"stages": [{**REASONING, "until": []}, BLEND]}, "has no exit (`until`) but stage 'blend' follows it"),
    ({"stages": [{**REASONING, "until": [{"signal": "acuracy", "above": 0.5}]}, BLEND]},
     "unknown curriculum signal 'acuracy'; known: accuracy, accuracy_gain, heldout_pass1, stage_windows"),
    ({"stages": [{**REASONING, "weights": {"arith": -1.0, "chat": 1.0}}, BLEND]}, "finite and >= 0"),
    ({"stages": [{**REASONING, "weights": {"arith": 0.0, "chat": 0.0}}, BLEND]}, "every weight is 0"),
    ({"stages": [REASONING, {**BLEND, "weights": {"arith": 0, "chat": 1}, "ramp": {"weights": {"chat": 0},
                                                                                "windows": 2}}]},
     "the ramp ends with every weight 0"),
    ({"stages": [REASONING, {**BLEND, "ramp": {"weights": {"chat": -2}, "windows": 2}}]}, "finite and >= 0"),
    ({"stages": [REASONING, {**BLEND, "ramp": {"weights": {"code": 1}, "windows": 2}}]},
     "the ramp moves ['code'], which the stage's weights do not name"),
    ({"stages": [REASONING, {**BLEND, "name": "reasoning"}]}, "stage names must be unique, ['reasoning']"),
    ({"stages": [{**REASONING, "until": [{"signal": "accuracy", "sources": ["chat"], "above": 0.5}]}, BLEND]},
     "weight stays 0 in the stage"),
    ({"stages": [{**REASONING, "until": [{"signal": "accuracy", "sources": ["arth"], "above": 0.5}]}, BLEND]},
     "names source 'arth', which the stage does not weight"),
    ({"stages": [REASONING, {**BLEND, "until": [{"signal": "stage_windows", "above": 3}]}]},
     "the last stage 'blend' has an exit"),
    ({"stages": [{**REASONING, "until": [{"signal": "stage_windows", "sources": ["arith"], "above": 3}]}, BLEND]},
     "not per source"),
    ({"stages": [{**REASONING, "until": [{"signal": "accuracy", "above": 0.5, "confidence": 0.9}]}, BLEND]},
     "`confidence` applies to gain signals (accuracy_gain), drop it"),
    ({"stages": [{**REASONING, "until": [{"signal": "accuracy_gain", "below": 0.1, "confidence": 1.0}]}, BLEND]},
     "less than 1"),
    ({"levels": [{"source": "arith", "band": [0.8, 0.3]}]}, "band must be 0 <= low < high <= 1"),
    ({"stages": [{**BLEND, "levels": {"arith": 0}}]}, "levels start at 1"),
    ({"levels": [{"source": "arith"}, {"source": "arith"}]}, "one level rule per source, ['arith']"),
    ({"levels": [{"source": "arith", "max_level": 3}], "stages": [{**BLEND, "levels": {"arith": 7}}]},
     "outside its level rule's [1, 3]"),
]


@pytest.mark.parametrize("config,message", BAD, ids=[m[:30] for _, m in BAD])
def test_schedules_that_can_never_advance_are_refused_at_load(config, message):
    with pytest.raises(ValidationError) as err:
        MonitorConfig.load(["--curriculum", __import__("json").dumps(config)], env={})
    assert message in str(err.value)


def test_the_default_is_off_and_a_plain_schedule_loads_with_its_sources_filled_in():
    assert not MonitorConfig().curriculum.active
    cfg = schedule()
    assert cfg.stages[0].until[0].sources == ["arith", "rg:basic_arithmetic"]  # weighted > 0 in the stage
    assert CurriculumRule(CurriculumConfig()).start().commands == []


def test_stale_windows_are_recorded_and_move_nothing():
    rule = CurriculumRule(schedule())
    rule.start()
    for v in range(5):
        out = rule.evaluate(window({"arith": 0.5, "rg:basic_arithmetic": 0.5}, v), act=False)
        assert out.commands == [] and {s.name for s in out.signals} == {"curriculum/accuracy"}
    assert rule.state.stage == 0 and rule.state.windows == 0


def test_a_persons_mixture_is_the_one_in_force_and_the_schedule_goes_on_from_it():
    rule = CurriculumRule(schedule())
    rule.start()
    rule.mixture_set({"chat": 0.5}, {"arith": 2}, "blend")  # a person skips to the blend, chat at 0.5
    assert rule.state.stage == 1 and rule.state.weights["chat"] == 0.5 and rule.state.levels == {"arith": 2}
    (step,) = rule.evaluate(window({"arith": 0.5}, 0)).commands
    assert step.weights["chat"] == pytest.approx(0.5 + 0.5 / 3, abs=1e-6)  # the ramp goes on from 0.5
    assert step.levels == {"arith": 2} and step.stage == "blend"
    rule.mixture_set({"chat": 0.2}, {}, "")  # weights alone: same stage, the ramp starts over from them
    assert rule.state.stage == 1 and rule.state.ramp_windows == 0
    rule.mixture_set({}, {}, "nonesuch")  # a stage the schedule does not have: logged, nothing moves
    assert rule.state.stage == 1


def groups(store: Store, accuracy: dict[str, float], version: int, n: int = 1, size: int = 10) -> None:
    store.write(Batch(groups=[adapters.scored_group_rows(scored(f"{s}-{version}-{i}", version, s, a, size), now_ms())
                              for s, a in accuracy.items() for i in range(n)]))


def scored(gid: str, version: int, source: str, accuracy: float, size: int = 10) -> events.ScoredGroup:
    from m1flow.status import Status

    g = events.ScoredGroup(header=codec.header("test"), group_id=gid, source=source, verifier_kind="arith")
    for i in range(size):
        g.samples.add(index=i, reward=1.0, correct=i < round(accuracy * size), token_ids=[1], policy_version=version,
                      status=Status.OK)
    return g


def test_a_restarted_controller_continues_the_stage_ramp_and_levels_from_its_saved_state(tmp_path):
    cfg = MonitorConfig(curriculum=schedule(window_groups=2, min_judged=10, **LEVELS))
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    first = Controller(store, cfg)
    assert [c.stage for c in first.evaluate().commands] == ["reasoning"]
    for v in range(3):  # groups of 4000 verdicts: a flat accuracy known well enough to call a plateau
        groups(store, {"arith": 0.5, "rg:basic_arithmetic": 0.5}, v, size=4000)
    assert [(c.evidence.rule, c.stage) for c in first.evaluate().commands] == [(RULE_STAGE, "blend")]
    groups(store, {"arith": 0.9, "rg:basic_arithmetic": 0.5}, 3)
    assert [c.weights["chat"] for c in first.evaluate().commands] == [0.4]
    first.save()

    groups(store, {"arith": 0.9, "rg:basic_arithmetic": 0.5}, 4)
    resumed = Controller(store, cfg)  # restarted: stage, ramp position, level streak and cursor from the store
    assert (resumed.curriculum.state.stage, resumed.curriculum.state.ramp_windows) == (1, 1)
    out = [(c.evidence.rule, c.weights["chat"], c.levels["arith"]) for c in resumed.evaluate().commands]
    assert out == [(RULE_RAMP, 0.7, 1), (RULE_LEVEL, 0.7, 2)]  # second ramp step; second window above the band
    assert store.get_state(STATE_KEY)["curriculum"]["ramp_windows"] == 1  # not saved: a crash now decides again
    again = Controller(store, cfg)
    assert [(c.evidence.rule, c.weights["chat"]) for c in again.evaluate().commands] == [(RULE_RAMP, 0.7),
                                                                                          (RULE_LEVEL, 0.7)]
    store.close()


def mixture_control(weights: dict, levels: dict, stage: str, message_id: str) -> events.Control:
    msg = control_command("mixture", "by hand", user="test", weights=weights, levels=levels, stage=stage)
    msg.header.message_id = message_id
    return msg


def test_decisions_store_the_mixture_and_the_report_and_the_dashboard_show_it(store_url):
    store = Store(store_url)
    cfg = MonitorConfig(curriculum=schedule(**LEVELS))
    controller = Controller(store, cfg)
    from svc_monitor.actuator import control_message

    own = [control_message(c, "monitor", "run") for c in controller.evaluate().commands]
    by_hand = mixture_control({"chat": 0.5}, {"arith": 2}, "blend", "cli-mix")
    written = store.write(Batch(decisions=[adapters.decision_row(m, 3) for m in [*own, by_hand]]))
    controller.seen([d for d in written.decisions if d.evidence["decided_by"] != "svc_monitor"])
    (mine, theirs) = store.mixture_decisions()
    assert (mine["stage"], mine["weights"], mine["levels"]) == ("reasoning", REASONING["weights"], {"arith": 1})
    assert (theirs["stage"], theirs["weights"], theirs["levels"]) == ("blend", {"chat": 0.5}, {"arith": 2})
    assert theirs["evidence"]["rule"] == "manual"

    text = format_report(build_report(store, controller, ""))
    assert "curriculum: stage blend (2 of 2, 0 windows in it), 0 windows in all; arith=1 chat=0.5 " \
           "rg:basic_arithmetic=1; levels arith=2" in text
    assert "set_mixture (stage blend: chat=0.5; levels arith=2) by cli:test (manual): by hand" in text
    assert "set_mixture (stage reasoning: arith=1 chat=0 rg:basic_arithmetic=1; levels arith=1) by svc_monitor " \
           "(curriculum_stage)" in text

    for v, a in enumerate([0.5, 0.9]):
        groups(store, {"arith": a, "rg:basic_arithmetic": 0.5}, v, n=2)
    from svc_monitor.actuator import Actuator

    class Ctx:  # the actuator's view of the worker: what it emits, not a broker
        def __init__(self) -> None:
            self.sent = []

        def emit(self, topic, key, msg):  # noqa: ANN001
            self.sent.append(msg)

        def metric(self, *args, **labels):  # noqa: ANN002, ANN003
            pass

    ctx = Ctx()
    Actuator(store, "run").apply(controller.evaluate(), ctx)
    assert [(m.WhichOneof("command"), m.set_mixture.stage, m.evidence.rule) for m in ctx.sent] == \
        [("set_mixture", "blend", RULE_RAMP)] * 2
    figures = Figures(store, cfg).curriculum()
    weights = {t.name: list(t.y) for t in figures["mixture"].data}
    assert weights["chat"] == [0.0, 0.5, 0.666667, 0.833333]  # start, by hand, two ramp steps on from it
    assert {t.name: list(t.y) for t in figures["levels"].data} == {"arith": [1, 2, 2, 2]}
    assert [a.text for a in figures["mixture"].layout.annotations] == ["reasoning", "blend"]  # stage changes
    assert len(figures["mixture"].layout.shapes) == 2
    accuracy = {t.name: list(t.y) for t in figures["curriculum_accuracy"].data}
    assert accuracy == {"arith": [0.5, 0.9], "rg:basic_arithmetic": [0.5, 0.5]}
    store.close()


def test_the_cli_parses_a_mixture_and_refuses_bad_ones():
    import argparse

    assert mixture_weight("rg:leg_counting=0.5") == ("rg:leg_counting", 0.5)
    assert mixture_level("arith=3") == ("arith", 3)
    for bad, parse in (("arith", mixture_weight), ("arith=-1", mixture_weight), ("arith=nan", mixture_weight),
                       ("=1", mixture_weight), ("arith=x", mixture_level), ("arith=0", mixture_level)):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)
    msg = control_command("mixture", "r", user="me", weights={"arith": 1.0}, levels={"arith": 2}, stage="s")
    assert (dict(msg.set_mixture.weights), dict(msg.set_mixture.levels), msg.set_mixture.stage) == \
        ({"arith": 1.0}, {"arith": 2}, "s")
    assert msg.evidence.rule == "manual" and msg.evidence.decided_by == "cli:me"
    with pytest.raises(ValueError, match="at least one --weight"):
        control_command("mixture", "r", user="me")
