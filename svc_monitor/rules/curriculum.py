"""The curriculum (the report: RL starts on rule-verified reasoning tasks, then blends in
GenRM-judged general ones at weights that change as training goes), over windows of scored groups.

Per window (`window_groups` groups in arrival order): each source's accuracy (verdicts only, at
least `min_judged` of them) with its standard error over groups, and its gain: the slope of its
accuracy over its last windows in this stage and at this level, with a standard error
(svc_monitor/rules/trend.py). Then, in order:
* the stage's exit (`until`): every condition held for its `windows` windows in a row (a source
  without enough verdicts in a window leaves its count as it was); a condition on a gain holds when
  the gain's confidence bound is past the threshold, the trend spanning its `windows` gains (a
  plateau, `accuracy_gain below T for N windows`: the upper bound of the slope over the last N+1
  windows is under T, so a real gain of T or more per window triggers it on a given window with a
  chance of at most 1 - `confidence`) -> the next stage starts: its weights (and levels) are set,
  `set_mixture` with the evidence (the gain, its standard error, the bound, the samples behind it),
  rule `curriculum_stage`;
* otherwise the stage's ramp, one step per window: weights moved linearly from those in force at
  the stage's start to the ramp's, `curriculum_ramp`;
* each level rule: accuracy above the band for `consecutive` windows moves the source up a
  level, below moves it down (`curriculum_level`); the source's next `cooldown_windows` windows
  are ignored everywhere (prompts of the old level still in flight), and its plateau evidence
  starts again (a harder level lowers accuracy, which is not a plateau).
Other series of estimates (held-out pass@1 per set, from an evaluation stage) come in through
`evaluate(extra=...)`: a gain signal registered on that series (`SignalSpec.series`) is then decided
the same way; they are kept per stage, not per level.
Every command carries the whole mixture in force (weights, levels, stage), so the last one on
`control` says it all. A window the monitor reads while catching up on old history (`act` False)
is recorded as signals and moves nothing. A person's set_mixture (`mixture_set`) becomes the
mixture in force: its stage (if one of the schedule's) starts over, the ramp continues from its
weights.
"""
from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from svc_monitor.outcome import Command, Evidence, Outcome, Signal
from svc_monitor.rules.trend import Estimate, Gain, trend
from svc_monitor.schedule import SIGNALS, Condition, CurriculumConfig, LevelRule, Stage, WindowFacts
from svc_monitor.schema import GroupRow

log = logging.getLogger(__name__)

RULE_STAGE = "curriculum_stage"
RULE_RAMP = "curriculum_ramp"
RULE_LEVEL = "curriculum_level"
DIGITS = 6  # weights are rounded so the ramp's steps read as they were meant (0.4, not 0.40000000000000002)
ACCURACY = "accuracy"  # the series of the window's accuracy per source


def window_estimates(rows: list[GroupRow], min_judged: int) -> dict[str, Estimate]:
    """Source -> correct / judged over the window's groups with its standard error over groups
    (`Estimate.from_groups`), for sources with `min_judged` verdicts."""
    counts: dict[str, list[tuple[int, int]]] = defaultdict(list)
    judged: dict[str, int] = defaultdict(int)
    for row in rows:
        source, n = row.source, row.judged
        counts[source].append((row.correct, n))
        judged[source] += n
    # min_judged >= 1: from_groups has verdicts, never None
    return {s: Estimate.from_groups(c) for s, c in counts.items() if judged[s] >= min_judged}


def window_accuracy(rows: list[GroupRow], min_judged: int) -> dict[str, float]:
    """Source -> correct / judged over the window's groups, for sources with `min_judged` verdicts."""
    return {s: e.value for s, e in window_estimates(rows, min_judged).items()}


@dataclass
class CurriculumState:
    started: bool = False  # the schedule's first mixture went out
    stage: int = -1  # index of the stage in force; -1 before the start (or without stages)
    stage_windows: int = 0  # windows evaluated in the stage
    ramp_windows: int = 0  # ramp steps taken since the stage (or a person's weights) started
    windows: int = 0  # windows evaluated since the start
    weights: dict[str, float] = field(default_factory=dict)  # in force: the last set_mixture's
    levels: dict[str, int] = field(default_factory=dict)
    ramp_from: dict[str, float] = field(default_factory=dict)  # weights the ramp starts from
    accuracy: dict[str, float] = field(default_factory=dict)  # the last window's, this stage and level
    # series -> source -> its last points in this stage ([window, estimate, se, n, groups, df (0: inf)],
    # oldest first; the accuracy's also at this level): what the gains are fitted on
    history: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)
    streaks: dict[str, int] = field(default_factory=dict)  # "<condition>/<source>" -> windows in a row held
    level_streaks: dict[str, int] = field(default_factory=dict)  # source -> +n windows above band, -n below
    cooldown: dict[str, int] = field(default_factory=dict)  # source -> its windows still ignored


def gain_evidence(name: str, condition: Condition, gain: Gain) -> dict[str, float]:
    """The gain, its standard error, the bound(s) compared and the samples behind it."""
    return {name: gain.value, f"{name} se": gain.se, f"{name} n": float(gain.n),
            **({f"{name} upper": gain.upper(condition.confidence)} if condition.below is not None else {}),
            **({f"{name} lower": gain.lower(condition.confidence)} if condition.above is not None else {})}


def describe(stage: Stage) -> str:
    """A stage's exit conditions in words (the reason a stage command gives)."""
    parts = []
    for c in stage.until:
        bounds = " and ".join([*([f"above {c.above:g}"] if c.above is not None else []),
                               *([f"below {c.below:g}"] if c.below is not None else [])])
        on = f" of {', '.join(c.sources)}" if c.sources else ""
        sure = f" at {c.confidence:.0%} confidence" if SIGNALS.get(c.signal).is_gain else ""
        parts.append(f"{c.signal}{on} {bounds} for {c.windows} window(s){sure}")
    return "; ".join(parts)


class Series:
    """Each series' last points per source, kept in the rule's state (a restart resumes them), and the
    trends fitted on them; a series keeps as many points as its longest condition's trend spans."""

    def __init__(self, cfg: CurriculumConfig, state: CurriculumState) -> None:
        self.state = state
        self.spans: dict[str, int] = {ACCURACY: 2}
        for stage in cfg.stages:
            for c in stage.until:
                spec = SIGNALS.get(c.signal)
                if spec.is_gain:
                    self.spans[spec.series] = max(self.spans.get(spec.series, 2), c.windows + 1)

    def record(self, series: str, source: str, x: float, e: Estimate) -> None:
        points = self.state.history.setdefault(series, {}).setdefault(source, [])
        points.append([x, e.value, e.se, float(e.n), float(e.groups), e.df if math.isfinite(e.df) else 0.0])
        del points[:-self.spans.get(series, 2)]

    def points(self, series: str, source: str) -> list[tuple[float, Estimate]]:
        return [(p[0], Estimate(p[1], p[2], int(p[3]), int(p[4]), p[5] or math.inf))
                for p in self.state.history.get(series, {}).get(source, [])]

    def gain(self, series: str, source: str, windows: int) -> Gain | None:
        """The trend of the source's series over its last `windows` gains (fewer while it has fewer)."""
        return trend(self.points(series, source)[-(windows + 1):])

    def gain_with(self, source: str, x: float, e: Estimate) -> Gain | None:
        """What the source's accuracy gain would be with one more point (nothing is kept)."""
        return trend([*self.points(ACCURACY, source)[-(self.spans[ACCURACY] - 1):], (x, e)])


class CurriculumRule:
    def __init__(self, cfg: CurriculumConfig, state: dict | None = None) -> None:
        self.cfg = cfg
        self.state = CurriculumState(**(state or {}))
        self.rules: dict[str, LevelRule] = {r.source: r for r in cfg.levels}
        self.series = Series(cfg, self.state)
        self.heldout: dict[str, float] = {}  # set -> newest held-out pass@1; the controller refreshes it

    def snapshot(self) -> dict:
        return asdict(self.state)

    @property
    def stage(self) -> Stage | None:
        i = self.state.stage
        return self.cfg.stages[i] if 0 <= i < len(self.cfg.stages) else None

    @property
    def stage_name(self) -> str:
        return self.stage.name if self.stage else ""

    # ------------------------------------------------------------------ commands
    def _command(self, rule: str, reason: str, evidence: Evidence) -> Command:
        s = self.state
        return Command("set_mixture", reason, evidence, weights=dict(s.weights), levels=dict(s.levels),
                       stage=self.stage_name)

    def start(self, version: int = 0) -> Outcome:
        """The schedule's first mixture (stage 0 and the levels' start), once."""
        s, cfg = self.state, self.cfg
        if s.started or not cfg.active or not cfg.enabled:
            return Outcome()
        s.started = True
        for rule in cfg.levels:
            s.levels.setdefault(rule.source, rule.start_level)
        if cfg.stages and s.stage < 0:
            self._enter(0)
        what = f"stage {self.stage_name}" if self.stage else "adaptive levels"
        evidence = Evidence(RULE_STAGE, {}, {}, version, version, 0)
        return Outcome(commands=[self._command(RULE_STAGE, f"curriculum starts: {what}", evidence)])

    def _enter(self, index: int) -> None:
        s, stage = self.state, self.cfg.stages[index]
        s.stage, s.stage_windows, s.ramp_windows = index, 0, 0
        s.streaks, s.accuracy, s.history = {}, {}, {}
        s.weights.update(stage.weights)
        s.ramp_from = dict(s.weights)
        for source, level in stage.levels.items():
            self._set_level(source, level)

    def _set_level(self, source: str, level: int) -> None:
        s = self.state
        if s.levels.get(source) != level:
            rule = self.rules.get(source)
            s.cooldown[source] = rule.cooldown_windows if rule else 0
        s.levels[source] = level
        s.level_streaks[source] = 0
        s.accuracy.pop(source, None)  # plateau evidence starts again at the new level
        s.history.get(ACCURACY, {}).pop(source, None)
        s.streaks = {k: v for k, v in s.streaks.items() if k.split("/", 1)[1] != source}

    def mixture_set(self, weights: dict[str, float], levels: dict[str, int], stage: str) -> None:
        """A person's set_mixture is the mixture in force; the schedule goes on from it."""
        s = self.state
        s.weights.update(weights)
        for source, level in levels.items():
            self._set_level(source, level)
        index = self.cfg.stage_index(stage) if stage else None
        if stage and index is None:
            log.warning("set_mixture names stage %r, which the schedule does not have; staying in %r",
                        stage, self.stage_name)
        if index is not None and index != s.stage:
            s.stage, s.stage_windows, s.streaks, s.accuracy, s.history = index, 0, {}, {}, {}
        if weights or index is not None:
            s.ramp_from, s.ramp_windows = dict(s.weights), 0

    # ------------------------------------------------------------------ windows
    def evaluate(self, rows: list[GroupRow], act: bool = True,
                 extra: Mapping[str, Mapping[str, Estimate]] | None = None) -> Outcome:
        """One closed window of scored groups; `act` False: record signals, move nothing. `extra`:
        other series measured for this window (series -> subject -> estimate; e.g. held-out pass@1
        per set), for gain signals registered on them."""
        s, cfg = self.state, self.cfg
        versions = [r.policy_version for r in rows]
        lo, hi = min(versions), max(versions)
        measured = window_estimates(rows, cfg.min_judged)
        x = float(s.windows)  # the trend's abscissa: windows evaluated since the start
        fresh = act and cfg.enabled and s.started
        if fresh:
            usable = self._usable(measured)
            for series, estimates in {**(extra or {}), ACCURACY: usable}.items():
                for src, e in estimates.items():
                    self.series.record(series, src, x, e)
            gains = {src: self.series.gain(ACCURACY, src, self.series.spans[ACCURACY] - 1) for src in usable}
        else:  # what the gain would be with this window; nothing is kept
            usable, gains = {}, {src: self.series.gain_with(src, x, e) for src, e in measured.items()}
        gains = {src: g for src, g in gains.items() if g is not None}
        out = Outcome(signals=[Signal("curriculum/accuracy", e.value, lo, hi, subject=src)
                               for src, e in measured.items()]
                      + [Signal("curriculum/accuracy_gain", g.value, lo, hi, subject=src) for src, g in gains.items()])
        if not fresh:
            return out
        facts = WindowFacts(accuracy={src: e.value for src, e in usable.items()}, stage_windows=s.stage_windows + 1,
                            heldout_pass1=dict(self.heldout))
        s.accuracy.update(facts.accuracy)
        s.windows += 1
        s.stage_windows += 1
        observed = {**{f"accuracy[{k}]": v for k, v in facts.accuracy.items()},
                    **{f"accuracy_gain[{k}]": g.value for k, g in gains.items()}}
        advanced = self._advance(facts, observed, lo, hi, out)
        if not advanced:
            self._ramp(observed, lo, hi, out)
        self._levels(facts, lo, hi, out)
        out.signals.append(Signal("curriculum/stage", float(s.stage), lo, hi))
        return out

    def _usable(self, measured: dict[str, Estimate]) -> dict[str, Estimate]:
        """The window's estimates of the sources out of their cool-down (each in it counts one down)."""
        usable = {}
        for src, e in measured.items():
            if self.state.cooldown.get(src, 0) > 0:
                self.state.cooldown[src] -= 1
            else:
                usable[src] = e
        return usable

    def _advance(self, facts: WindowFacts, observed: dict[str, float], lo: int, hi: int, out: Outcome) -> bool:
        s, stage = self.state, self.stage
        if stage is None or not stage.until or s.stage + 1 >= len(self.cfg.stages):
            return False
        done, signals, thresholds = True, {}, {}
        for i, condition in enumerate(stage.until):
            spec = SIGNALS.get(condition.signal)
            for source in condition.sources if spec.per_source else [""]:
                key, name = f"{i}/{source}", f"{condition.signal}[{source}]" if source else condition.signal
                if spec.is_gain:  # the count: the gains its trend spans while its bound is past the threshold
                    gain = self.series.gain(spec.series, source, condition.windows)
                    s.streaks[key] = gain.windows if gain is not None and condition.holds_for(gain) else 0
                    if gain is not None:
                        signals.update(gain_evidence(name, condition, gain))
                    thresholds[f"{name} confidence"] = condition.confidence
                else:
                    value = spec.value(facts, source)
                    if value is not None:
                        s.streaks[key] = s.streaks.get(key, 0) + 1 if condition.holds(value) else 0
                        signals[name] = value
                signals[f"{name} windows"] = float(s.streaks.get(key, 0))
                thresholds.update(condition.thresholds(name))
                thresholds[f"{name} windows"] = float(condition.windows)
                done = done and s.streaks.get(key, 0) >= condition.windows
        if not done:
            return False
        before = stage.name
        self._enter(s.stage + 1)
        evidence = Evidence(RULE_STAGE, {**observed, **signals}, thresholds, lo, hi,
                            max(c.windows for c in stage.until))
        out.commands.append(self._command(RULE_STAGE, f"stage {before} done ({describe(stage)}): "
                                          f"{before} -> {self.stage_name}", evidence))
        return True

    def _ramp(self, observed: dict[str, float], lo: int, hi: int, out: Outcome) -> None:
        s, stage = self.state, self.stage
        if stage is None or stage.ramp is None or s.ramp_windows >= stage.ramp.windows:
            return
        s.ramp_windows += 1
        fraction = s.ramp_windows / stage.ramp.windows
        for source, target in stage.ramp.weights.items():
            start = s.ramp_from.get(source, stage.weights[source])
            s.weights[source] = round(start + (target - start) * fraction, DIGITS)
        moved = ", ".join(f"{k}={s.weights[k]:g}" for k in stage.ramp.weights)
        evidence = Evidence(RULE_RAMP, {**observed, "ramp_windows": float(s.ramp_windows)},
                            {"ramp_windows": float(stage.ramp.windows)}, lo, hi, s.ramp_windows)
        out.commands.append(self._command(RULE_RAMP, f"stage {stage.name} ramp {s.ramp_windows}/"
                                          f"{stage.ramp.windows}: {moved}", evidence))

    def _levels(self, facts: WindowFacts, lo: int, hi: int, out: Outcome) -> None:
        s = self.state
        for source, rule in self.rules.items():
            accuracy = facts.accuracy.get(source)
            if accuracy is None:
                continue
            low, high = rule.band
            streak = s.level_streaks.get(source, 0)
            streak = max(streak, 0) + 1 if accuracy > high else min(streak, 0) - 1 if accuracy < low else 0
            s.level_streaks[source] = streak
            step = 1 if streak >= rule.consecutive else -1 if streak <= -rule.consecutive else 0
            level = s.levels.get(source, rule.start_level)
            new = min(max(level + step, rule.min_level), rule.max_level)
            if not step or new == level:
                continue  # in the band, not yet long enough, or at the end of the range
            self._set_level(source, new)
            evidence = Evidence(RULE_LEVEL, {f"accuracy[{source}]": accuracy, f"level[{source}]": float(level)},
                                {f"accuracy[{source}]>": high, f"accuracy[{source}]<": low}, lo, hi, rule.consecutive)
            side = f"above {high:g}" if step > 0 else f"below {low:g}"
            out.commands.append(self._command(RULE_LEVEL, f"{source} accuracy {accuracy:.3f} {side} for "
                                              f"{rule.consecutive} window(s): level {level} -> {new}", evidence))
