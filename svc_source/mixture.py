"""The mixture in force: the weights the sources are drawn by and the generators' difficulty levels.

It starts as the config's and changes only through a `SetMixture` on `control` (from the monitor's
curriculum or `m1flow control mixture`). Each accepted change is numbered (the mixture version,
stamped on every Prompt's origin) and takes effect at a draw; the service writes the new state
before it draws under it, and keeps every version on `source_state` under its own key, so a
restart resumes under the mixture in force and a replay applies each version at the draw the
original run did (the draw order stays a pure function of seed, versions and draws).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from m1flow.contracts import events


class MixtureRefused(ValueError):
    """A SetMixture that cannot apply: `code` labels the metric, the message says why."""

    def __init__(self, code: str, why: str) -> None:
        super().__init__(why)
        self.code = code


@dataclass(frozen=True)
class Mixture:
    version: int
    weights: dict[str, float]
    levels: dict[str, int | None]
    from_draw: int = 0
    stage: str = ""
    command_id: str = ""  # the control message it came from ("" for the config's)

    @classmethod
    def initial(cls, weights: Mapping[str, float], levels: Mapping[str, int | None]) -> "Mixture":
        return cls(0, dict(weights), dict(levels))

    def weight_list(self, names: Sequence[str]) -> list[float]:
        return [self.weights[n] for n in names]

    def after(self, command: events.SetMixture, draw: int, generators: set[str], command_id: str = "") -> "Mixture":
        """The next version with `command` applied from `draw` on; MixtureRefused says why not."""
        unknown = sorted(set(command.weights) - set(self.weights))
        if unknown:
            raise MixtureRefused("unknown_source", f"unknown source(s) {unknown}; the sources are {sorted(self.weights)}")
        negative = sorted(n for n, w in command.weights.items() if not w >= 0)  # NaN is refused too
        if negative:
            raise MixtureRefused("negative_weight", f"negative weight for {negative}")
        weights = {**self.weights, **dict(command.weights)}
        if not command.weights and not command.levels:
            raise MixtureRefused("empty", "names no weight and no level")
        if sum(weights.values()) <= 0:
            raise MixtureRefused("all_zero", "the weights would leave every source at zero")
        not_generated = sorted(set(command.levels) - generators)
        if not_generated:
            raise MixtureRefused("level_not_generator", f"levels apply to generators only: {not_generated} "
                                 f"(generators: {sorted(generators) or 'none'})")
        low = sorted(n for n, level in command.levels.items() if level < 1)
        if low:
            raise MixtureRefused("level_below_1", f"levels start at 1, got {dict((n, command.levels[n]) for n in low)}")
        levels = {**self.levels, **dict(command.levels)}
        return replace(self, version=self.version + 1, weights=weights, levels=levels, from_draw=draw,
                       stage=command.stage or self.stage, command_id=command_id)

    # ---- on `source_state` --------------------------------------------------------------------
    def to_state(self, state: events.SourceState) -> events.SourceState:
        """`state` with this mixture as the one in force."""
        state.mixture_version, state.mixture_from_draw, state.stage = self.version, self.from_draw, self.stage
        state.weights.update(self.weights)
        state.levels.update({n: level for n, level in self.levels.items() if level is not None})
        state.control_id = self.command_id
        return state

    def restored(self, state: events.SourceState) -> "Mixture":
        """The mixture a state record says was in force, over this (the config's) one; names the
        config no longer has are dropped."""
        if not state.mixture_version:
            return self
        weights = {n: state.weights.get(n, w) for n, w in self.weights.items()}
        levels = {n: (state.levels[n] if n in state.levels else level) for n, level in self.levels.items()}
        return Mixture(state.mixture_version, weights, levels, state.mixture_from_draw, state.stage, state.control_id)


def history_key(state_key: str, version: int) -> str:
    """Where version `version` is kept on `source_state` (compaction keeps one record per key)."""
    return f"{state_key}/mixture/{version:08d}"


@dataclass
class Schedule:
    """A replay's mixtures: each version from the original run, applied at its draw."""

    versions: list[Mixture] = field(default_factory=list)

    def due(self, draw: int, current: int) -> Mixture | None:
        """The newest version past `current` whose draw has come."""
        ready = [m for m in self.versions if m.version > current and m.from_draw <= draw]
        return ready[-1] if ready else None

    def next_draw(self, current: int) -> int | None:
        """The draw the next version takes effect at (a batch must not run past it)."""
        later = [m.from_draw for m in self.versions if m.version > current]
        return min(later) if later else None
