"""Operations, sampled on a clock: lag per consumer group, staleness, throughput, dead letters.

A watched consumer group (the services' `m1flow-*` groups) that has lag while its committed
offsets have not moved for `no_progress_s` is stuck (crashed, wedged, or too slow to commit):
that raises an alert, resolved as soon as it commits again or catches up. Dead letters above
`dead_letters_per_min` for a group raise an alert too.
"""
from __future__ import annotations

from dataclasses import dataclass

from svc_monitor.config import OpsConfig
from svc_monitor.outcome import AlertChange, Evidence, Outcome, Signal

RULE = "operations"


@dataclass(frozen=True)
class OpsSample:
    """One clock sample: per group (committed total, lag), and the store's counts since the last one."""

    at_s: float
    elapsed_s: float
    groups: dict[str, tuple[int, int]]
    rollouts: int
    tokens: int
    scored_groups: int
    mean_scored_version: float | None
    latest_version: int | None
    dead_letters_per_min: dict[str, int]


class OperationsRule:
    def __init__(self, cfg: OpsConfig) -> None:
        self.cfg = cfg
        self.progress: dict[str, tuple[int, float]] = {}  # group -> (committed total, when it last moved)
        self.stuck: set[str] = set()
        self.flooded: set[str] = set()

    def evaluate(self, sample: OpsSample) -> Outcome:
        out = Outcome()
        dt = max(sample.elapsed_s, 1e-3)
        out.signals += [Signal("ops/rollouts_per_s", sample.rollouts / dt),
                        Signal("ops/tokens_per_s", sample.tokens / dt),
                        Signal("ops/groups_per_s", sample.scored_groups / dt)]
        if sample.latest_version is not None and sample.mean_scored_version is not None:
            out.signals.append(Signal("ops/staleness", sample.latest_version - sample.mean_scored_version,
                                      version_to=sample.latest_version))
        for group, (committed, lag) in sorted(sample.groups.items()):
            out.signals.append(Signal("ops/lag", lag, subject=group))
            if group.startswith(self.cfg.watch_group_prefix):
                out.alerts += self._progress(group, committed, lag, sample.at_s)
        for group, count in sorted(sample.dead_letters_per_min.items()):
            out.signals.append(Signal("ops/dead_letters_per_min", count, subject=group))
        out.alerts += self._dead_letters(sample.dead_letters_per_min)
        return out

    def _progress(self, group: str, committed: int, lag: int, now: float) -> list[AlertChange]:
        last = self.progress.get(group)
        if last is None or committed != last[0] or lag == 0:
            self.progress[group] = (committed, now)
            if group in self.stuck:
                self.stuck.discard(group)
                return [AlertChange("no_progress", group, False, f"{group} is making progress again")]
            return []
        idle = now - last[1]
        if idle < self.cfg.no_progress_s or group in self.stuck:
            return []
        self.stuck.add(group)
        evidence = Evidence(RULE, {"lag": lag, "idle_s": idle, "committed": committed},
                            {"idle_s": self.cfg.no_progress_s}, windows=1)
        return [AlertChange("no_progress", group, True, f"{group} has lag {lag} but committed nothing for "
                            f"{idle:.0f}s", "critical", evidence)]

    def _dead_letters(self, per_min: dict[str, int]) -> list[AlertChange]:
        out = []
        limit = self.cfg.dead_letters_per_min
        for group in sorted(set(per_min) | self.flooded):
            rate = per_min.get(group, 0)
            if rate > limit and group not in self.flooded:
                self.flooded.add(group)
                evidence = Evidence(RULE, {"dead_letters_per_min": rate}, {"dead_letters_per_min": limit}, windows=1)
                out.append(AlertChange("dead_letters", group, True, f"{group}: {rate} dead letters in the last "
                                       f"minute (limit {limit:g})", "warning", evidence))
            elif rate <= limit and group in self.flooded:
                self.flooded.discard(group)
                out.append(AlertChange("dead_letters", group, False, f"{group}: dead letters back to {rate}/min"))
        return out
