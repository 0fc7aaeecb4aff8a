"""The curriculum's schedule as configuration: stages with the mixture each sets and the condition
that ends it, a ramp of weights inside a stage, and adaptive difficulty levels per source.

The schedule is checked when the config loads: one that could never advance (a condition no
window can satisfy, a stage without an exit followed by another, a signal nobody computes, weights
that are negative or all zero, two stages of one name) is refused with the reason, before a run
spends hours waiting on it.

Signals are computed per window of scored groups (`CurriculumConfig.window_groups`, arrival order):
* `accuracy` of a source: correct verdicts among its judged samples in the window (a source with
  fewer than `min_judged` verdicts in a window has no value there);
* `accuracy_gain` of a source: how much its accuracy rises per window, measured with its sampling
  error (svc_monitor/rules/trend.py): the least-squares slope of its accuracy over its last
  `windows` + 1 windows in this stage and at this level (`windows` window-to-window gains; 1: the
  gain over the previous window), with a standard error from the windows' own (counted over
  groups, whose samples are correlated). A condition on it compares a one-sided confidence bound,
  not the estimate: `below T` holds when the upper bound at `confidence` (default 0.95) is under
  T, `above T` when the lower bound is over it. A plateau is `accuracy_gain below T for N windows`:
  over the last N windows, accuracy is shown to rise by less than T per window; when it truly rises
  by T or more, that is concluded on a given window with a chance of at most 1 - confidence;
* `stage_windows`: windows evaluated in the stage, this one included;
* `heldout_pass1` of a source: svc_eval's pass@1 on the held-out set of the same name (name a set
  after the source it measures) for the newest policy version evaluated when the window closes (no
  value before the first result); it moves only as new versions are evaluated.
A gain signal is a trend over a series of estimates (`SignalSpec.series`); another series (held-out
pass@1 per set with its counts) plugs in by registering a signal with its series name and passing
its estimates to `CurriculumRule.evaluate(extra=...)`.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, Field, model_validator

from m1flow.registry import Registry
from svc_monitor.rules.trend import Gain


@dataclass
class WindowFacts:
    """What one window says, as the signals read it."""

    accuracy: dict[str, float] = field(default_factory=dict)  # source -> accuracy (enough verdicts only)
    stage_windows: int = 0
    heldout_pass1: dict[str, float] = field(default_factory=dict)  # eval set -> newest held-out pass@1 (svc_eval)


@dataclass(frozen=True)
class SignalSpec:
    """A signal a condition may test: its range (thresholds outside it can never be crossed) and
    how a window gives its value (None: no evidence in this window). A gain signal instead names the
    `series` of estimates it is the trend of (the rule keeps their history and tests a confidence
    bound of the trend, svc_monitor/rules/trend.py)."""

    low: float
    high: float
    per_source: bool
    value: Callable[[WindowFacts, str], float | None] | None
    what: str
    series: str = ""

    @property
    def is_gain(self) -> bool:
        return bool(self.series)


SIGNALS: Registry[SignalSpec] = Registry("curriculum signal")
SIGNALS.add("accuracy", SignalSpec(0.0, 1.0, True, lambda w, s: w.accuracy.get(s),
                                   "correct among the source's judged samples in the window"))
SIGNALS.add("accuracy_gain", SignalSpec(-1.0, 1.0, True, None,
                                        "the slope of the source's accuracy per window over its last `windows` + 1 "
                                        "windows (same stage and level), tested by its confidence bound",
                                        series="accuracy"))
SIGNALS.add("heldout_pass1", SignalSpec(0.0, 1.0, True, lambda w, s: w.heldout_pass1.get(s),
                                        "svc_eval's pass@1 on the held-out set named like the source, newest version"))
SIGNALS.add("stage_windows", SignalSpec(0.0, math.inf, False, lambda w, _s: float(w.stage_windows),
                                        "windows evaluated in the stage, this one included"))


def _weights_ok(weights: dict[str, float], what: str, some_positive: bool = True) -> None:
    bad = {k: v for k, v in weights.items() if not (math.isfinite(v) and v >= 0)}
    if bad:
        raise ValueError(f"{what}: weights must be finite and >= 0, got {bad}")
    if some_positive and weights and not any(v > 0 for v in weights.values()):
        raise ValueError(f"{what}: every weight is 0, the source would have nothing to draw from")


class Condition(BaseModel):
    """`signal` above and/or below thresholds (strictly) for `windows` windows in a row; a
    per-source signal must hold for every source named (default: every source the stage weights).
    On a gain signal, `windows` is the span of the trend (its last `windows` gains) and the
    thresholds are compared with its confidence bounds at `confidence` (module docstring)."""

    signal: str = Field(description="a curriculum signal: accuracy, accuracy_gain, heldout_pass1, stage_windows")
    sources: list[str] = Field([], description="sources it is tested on (per-source signals)")
    above: float | None = Field(None, description="holds while the value (a gain: its lower bound) is above this")
    below: float | None = Field(None, description="holds while the value (a gain: its upper bound) is below this")
    windows: int = Field(1, ge=1, description="windows in a row it must hold (per source); a gain: the gains "
                                              "its trend spans")
    confidence: float = Field(0.95, ge=0.5, lt=1.0, description="gain signals: the one-sided confidence of the "
                                                                "bound compared with the thresholds (0.5: the "
                                                                "estimate itself)")

    @model_validator(mode="after")
    def _satisfiable(self) -> Condition:
        spec = SIGNALS.get(self.signal)  # unknown: "unknown curriculum signal 'x'; known: ..."
        where = f"condition on {self.signal}"
        if self.above is None and self.below is None:
            raise ValueError(f"{where}: give `above` or `below` (or both)")
        if self.above is not None and self.above >= spec.high:
            raise ValueError(f"{where}: above {self.above} can never hold, the signal is at most {spec.high}")
        if self.below is not None and self.below <= spec.low:
            raise ValueError(f"{where}: below {self.below} can never hold, the signal is at least {spec.low}")
        if self.above is not None and self.below is not None and self.above >= self.below:
            raise ValueError(f"{where}: above {self.above} and below {self.below} can never hold together")
        if self.sources and not spec.per_source:
            raise ValueError(f"{where}: the signal is not per source, drop `sources`")
        if "confidence" in self.model_fields_set and not spec.is_gain:
            raise ValueError(f"{where}: `confidence` applies to gain signals "
                             f"({', '.join(n for n in SIGNALS.names() if SIGNALS.get(n).is_gain)}), drop it")
        return self

    def holds(self, value: float) -> bool:
        return (self.above is None or value > self.above) and (self.below is None or value < self.below)

    def holds_for(self, gain: Gain) -> bool:
        """A gain signal: its lower bound above `above` and its upper bound below `below`."""
        return ((self.above is None or gain.lower(self.confidence) > self.above)
                and (self.below is None or gain.upper(self.confidence) < self.below))

    def thresholds(self, key: str) -> dict[str, float]:
        """For the evidence: `key>` and `key<` the thresholds the value was compared with."""
        return {**({f"{key}>": self.above} if self.above is not None else {}),
                **({f"{key}<": self.below} if self.below is not None else {})}


class Ramp(BaseModel):
    """Weights moved linearly, one step per window, from those in force at the stage's start to
    these, over `windows` windows (one set_mixture per window)."""

    weights: dict[str, float] = Field(description="source -> weight reached at the ramp's end")
    windows: int = Field(ge=1, description="windows the ramp takes")


class Stage(BaseModel):
    name: str = Field(min_length=1)
    weights: dict[str, float] = Field(description="source -> weight set when the stage starts "
                                                  "(a source not named keeps its weight)")
    levels: dict[str, int] = Field({}, description="generator source -> level (>= 1) set when the stage starts")
    ramp: Ramp | None = None
    until: list[Condition] = Field([], description="the stage ends when all of these hold (empty: it never ends)")

    @model_validator(mode="after")
    def _consistent(self) -> Stage:
        where = f"stage {self.name!r}"
        if not self.weights:
            raise ValueError(f"{where}: name the weights it sets")
        low = {k: v for k, v in self.levels.items() if v < 1}
        if low:
            raise ValueError(f"{where}: levels start at 1, got {low}")
        _weights_ok(self.weights, where)
        if self.ramp is not None:
            _weights_ok(self.ramp.weights, f"{where} ramp", some_positive=False)  # the others may keep some
            unknown = sorted(set(self.ramp.weights) - set(self.weights))
            if unknown:
                raise ValueError(f"{where}: the ramp moves {unknown}, which the stage's weights do not name "
                                 f"(it starts from them)")
            if not any(v > 0 for v in {**self.weights, **self.ramp.weights}.values()):
                raise ValueError(f"{where}: the ramp ends with every weight 0")
        fed = self.fed_sources()
        for condition in self.until:
            if not SIGNALS.get(condition.signal).per_source:
                continue
            if not condition.sources:
                condition.sources = sorted(fed)
            for source in condition.sources:
                if source not in self.weights:
                    raise ValueError(f"{where}: its condition on {condition.signal} names source {source!r}, which "
                                     f"the stage does not weight (it weights {sorted(self.weights)})")
                if source not in fed:
                    raise ValueError(f"{where}: its condition on {condition.signal} needs source {source!r}, whose "
                                     f"weight stays 0 in the stage: it gets no prompts, so the condition can never hold")
        return self

    def fed_sources(self) -> set[str]:
        """Sources drawn from at some point of the stage (weight > 0 at its start or its ramp's end)."""
        end = {**self.weights, **(self.ramp.weights if self.ramp else {})}
        return {s for s in self.weights if self.weights[s] > 0 or end[s] > 0}


class LevelRule(BaseModel):
    """A generator's difficulty follows its accuracy: above the band for `consecutive` windows
    moves it up one level, below moves it down, within [min_level, max_level]; the band itself is
    the dead zone. After a move, `cooldown_windows` windows of the source are ignored (the
    prompts of the old level still in flight score then)."""

    source: str = Field(min_length=1)
    band: tuple[float, float] = Field((0.3, 0.8), description="(low, high) accuracy")
    min_level: int = Field(1, ge=1, description="levels start at 1 (svc_source refuses lower)")
    max_level: int = Field(3, ge=1)
    start_level: int | None = Field(None, description="the level the schedule starts it at (default min_level)")
    consecutive: int = Field(2, ge=1, description="windows in a row out of the band before moving")
    cooldown_windows: int = Field(1, ge=0, description="windows of this source ignored after a move")

    @model_validator(mode="after")
    def _consistent(self) -> LevelRule:
        low, high = self.band
        if not 0.0 <= low < high <= 1.0:
            raise ValueError(f"levels of {self.source!r}: band must be 0 <= low < high <= 1, got {self.band}")
        if self.min_level > self.max_level:
            raise ValueError(f"levels of {self.source!r}: min_level {self.min_level} > max_level {self.max_level}")
        if self.start_level is None:
            self.start_level = self.min_level
        if not self.min_level <= self.start_level <= self.max_level:
            raise ValueError(f"levels of {self.source!r}: start_level {self.start_level} outside "
                             f"[{self.min_level}, {self.max_level}]")
        return self


class CurriculumConfig(BaseModel):
    """The curriculum svc_monitor runs (set_mixture on `control`, applied by svc_source). Off while
    both `stages` and `levels` are empty (the default)."""

    stages: list[Stage] = Field([], description="in order; each but the last needs an `until`")
    levels: list[LevelRule] = Field([], description="adaptive difficulty per generator source")
    window_groups: int = Field(32, ge=1, description="scored groups per evaluation window (arrival order)")
    min_judged: int = Field(16, ge=1, description="verdicts a source needs in a window for its accuracy to count")
    enabled: bool = Field(True, description="publish set_mixture commands (signals are computed anyway)")

    @model_validator(mode="after")
    def _can_advance(self) -> CurriculumConfig:
        names = [s.name for s in self.stages]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"curriculum: stage names must be unique, {duplicates} repeated")
        for stage, following in zip(self.stages, self.stages[1:]):
            if not stage.until:
                raise ValueError(f"curriculum: stage {stage.name!r} has no exit (`until`) but stage "
                                 f"{following.name!r} follows it, so the schedule could never get there")
        if self.stages and self.stages[-1].until:
            raise ValueError(f"curriculum: the last stage {self.stages[-1].name!r} has an exit (`until`) "
                             f"but no stage follows it")
        sources = [r.source for r in self.levels]
        repeated = sorted({s for s in sources if sources.count(s) > 1})
        if repeated:
            raise ValueError(f"curriculum: one level rule per source, {repeated} repeated")
        rules = {r.source: r for r in self.levels}
        for stage in self.stages:
            for source, level in stage.levels.items():
                rule = rules.get(source)
                if rule is not None and not rule.min_level <= level <= rule.max_level:
                    raise ValueError(f"curriculum: stage {stage.name!r} sets {source!r} to level {level}, outside "
                                     f"its level rule's [{rule.min_level}, {rule.max_level}]")
        return self

    @property
    def active(self) -> bool:
        return bool(self.stages or self.levels)

    def stage_index(self, name: str) -> int | None:
        return next((i for i, s in enumerate(self.stages) if s.name == name), None)
