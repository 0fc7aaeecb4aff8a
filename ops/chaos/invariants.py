"""The guarantees of docs/architecture.md, checked from what the system wrote.

Nothing here trusts a service's own account of itself: the topics are the record of the run and the
learner's newest checkpoint holds the offsets and the group ids it applied. Each check returns its
verdict with the numbers behind it, so a failed chaos run says what broke, not just that it did.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from m1flow.rl.selection import Skipped
from ops.topics_io import read_range


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    numbers: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append(Check(name, ok, detail))

    def table(self) -> str:
        width = max(len(c.name) for c in self.checks) if self.checks else 10
        lines = [f"{'invariant':<{width}}  ok    detail"]
        lines += [f"{c.name:<{width}}  {'yes' if c.ok else 'NO ':<5} {c.detail}" for c in self.checks]
        lines.append("  ".join(f"{k}={v}" for k, v in self.numbers.items()))
        return "\n".join(lines)


def _samples_key(value: dict) -> str:
    """Which rollouts a ScoredGroup scored: a crashed rollout replica regenerates a group under the
    same ids, possibly with another policy, so two copies may score different rollouts."""
    return repr([(s.get("rollout_id"), s.get("token_ids")) for s in value.get("samples", [])])


def _verdict(value: dict) -> str:
    """What a ScoredGroup concluded about its samples (scoring the same rollouts must give this)."""
    keep = ("reward", "correct", "status", "parts", "detail")
    return repr([{k: s.get(k) for k in keep} for s in value.get("samples", [])])


def check(bootstrap: str, run_dir: Path, prompt_ids: set[str],
          bad_records: list[tuple[str, int, int]], readers: dict[str, tuple[str, ...]],
          batch_groups: int) -> Report:
    """prompt_ids: every prompt fed; bad_records: (topic, partition, offset) of injected bad input,
    each of which every group in readers[topic] must have dead-lettered."""
    report = Report()
    scored, scored_at = _check_scored(report, bootstrap, prompt_ids)
    state, applied = _check_learner(report, run_dir, scored_at, batch_groups)
    _check_policy(report, bootstrap)
    letters = _check_letters(report, bootstrap, bad_records, readers)
    report.numbers.update(prompts=len(prompt_ids), scored_groups=len(scored), applied=len(applied),
                          newest_version=state.version if state else 0, dead_letters=len(letters))
    return report


ScoredAt = list[tuple[int, str, dict]]  # (offset on `scored`, group id, ScoredGroup)


def _check_scored(report: Report, bootstrap: str, prompt_ids: set[str]) -> tuple[dict[str, list[dict]], ScoredAt]:
    """Every prompt's group scored, and each scored once in effect (copies of the same rollouts agree)."""
    scored: dict[str, list[dict]] = defaultdict(list)
    scored_at: ScoredAt = []
    for rec in read_range(bootstrap, "scored"):
        if "value" in rec:
            scored[rec["value"]["group_id"]].append(rec["value"])
            scored_at.append((rec["offset"], rec["value"]["group_id"], rec["value"]))
    by_prompt = {v[0].get("prompt_id", "") for v in scored.values()}
    missing = sorted(prompt_ids - by_prompt)
    report.add("every prompt's group scored", not missing,
               f"{len(prompt_ids) - len(missing)}/{len(prompt_ids)} prompts" + (f"; missing e.g. {missing[:3]}" if missing else ""))

    differing, regenerated = [], 0
    for g, copies in scored.items():
        by_samples: dict[str, dict] = {}
        for copy in copies:
            same = by_samples.setdefault(_samples_key(copy), copy)
            if _verdict(copy) != _verdict(same):
                differing.append(g)
        regenerated += len(by_samples) - 1
    rescored = sum(len(c) - 1 for c in scored.values())
    report.add("each group scored once in effect", not differing,
               f"{len(scored)} groups, {rescored} copies written again after crashes ({regenerated} of them of "
               f"regenerated rollouts); {len(differing)} with the same rollouts scored differently")
    return scored, scored_at


def _check_learner(report: Report, run_dir: Path, scored_at: ScoredAt, batch_groups: int) -> tuple[Any, list[str]]:
    """From the learner's newest checkpoint: each group applied at most once, nothing it consumed lost."""
    from m1flow.checkpoint import latest, load_state

    found = latest(Path(run_dir) / "learner" / "checkpoints")
    state = load_state(found) if found else None
    applied = [gid for step in (state.applied_groups if state else []) for gid in step]
    twice = [g for g, n in Counter(applied).items() if n > 1]
    report.add("each group applied by the learner at most once", not twice,
               f"{len(applied)} applications over {len(state.applied_groups) if state else 0} steps, {len(twice)} twice")

    offset = state.offsets.get("scored/0", 0) if state else 0
    applied_set = set(applied)
    behind = {gid: value for off, gid, value in scored_at if off < offset}
    skipped = {gid for step in (state.skipped_groups if state else []) for gid in step}
    lost = [gid for gid in behind if gid not in applied_set and gid not in skipped]
    after = {gid: value for off, gid, value in scored_at if off >= offset and gid not in applied_set and gid not in behind}
    version = state.version if state else 0
    trainable = [gid for gid, value in after.items() if _trainable(value, version)]
    report.add("nothing the learner consumed was lost", not lost,
               f"checkpoint at scored/0@{offset}: {len(behind)} groups behind it, {len(lost)} neither applied "
               f"nor skipped; {len(after)} groups after it, {len(trainable)} of them trainable "
               f"(a partial batch holds < {batch_groups})")
    report.numbers["pending"] = len(trainable)
    return state, applied


def _trainable(value: dict, version: int) -> bool:
    """Whether the learner, at `version` with its default algorithm, would queue this group for a step
    (m1flow.rl's own selection). Groups it skips (nothing to learn, stale) wait uncommitted until the
    next step's checkpoint, so they are not a batch the learner owes."""
    from google.protobuf import json_format

    from m1flow.contracts import events
    from m1flow.rl.config import AlgorithmConfig
    from m1flow.rl.filling import BatchFiller

    group = json_format.ParseDict(value, events.ScoredGroup(), ignore_unknown_fields=True)
    try:
        return not isinstance(BatchFiller(AlgorithmConfig(), 1).offer(group, version), Skipped)
    except ValueError:  # not whole: the learner dead-letters it
        return False


def _check_policy(report: Report, bootstrap: str) -> None:
    versions = [int(r["value"].get("version", 0)) for r in read_range(bootstrap, "policy") if "value" in r]
    backwards = [(a, b) for a, b in zip(versions, versions[1:]) if b < a]
    report.add("policy versions monotone", not backwards,
               f"{len(versions)} announcements, newest v{max(versions, default=0)}"
               + (f"; went back {backwards[:3]}" if backwards else ""))


def _check_letters(report: Report, bootstrap: str, bad_records: list[tuple[str, int, int]],
                   readers: dict[str, tuple[str, ...]]) -> list[dict]:
    """Every injected bad record dead-lettered by every group that reads its topic, and no good one."""
    letters = [r["value"] for r in read_range(bootstrap, "dlq") if "value" in r]
    got = {(l.get("source_topic"), int(l.get("partition", 0)), int(l.get("offset", 0)), l.get("consumer_group"))
           for l in letters}
    expected = {(t, p, o, g) for t, p, o in bad_records for g in readers.get(t, ())}
    unexplained = {x for x in got if x[:3] not in {(t, p, o) for t, p, o in bad_records}}
    report.add("dead letters accounted for", expected <= got and not unexplained,
               f"{len(bad_records)} bad records injected, {len(expected & got)}/{len(expected)} expected letters, "
               f"{len(unexplained)} letters for good records" + (f": {sorted(unexplained)[:3]}" if unexplained else ""))
    return letters


def check_source(report: Report, bootstrap: str, stream: str, rows: int, lead: int) -> None:
    """The prompt source, from `prompts`: one epoch of `rows` drawn with every position present (none
    lost) and repeats no more than `lead` (the batches its faults could cut)."""
    positions: Counter = Counter()
    for rec in read_range(bootstrap, "prompts"):
        origin = rec.get("value", {}).get("origin", {})
        if origin.get("stream") == stream:
            positions[(int(origin.get("epoch", 0)), int(origin.get("position", 0)))] += 1
    lost = [p for p in range(rows) if (0, p) not in positions]
    repeats = sum(n - 1 for n in positions.values())
    report.add("the source lost no position, repeated none beyond its lead", not lost and repeats <= lead,
               f"{len(positions)}/{rows} positions of epoch 0, {len(lost)} lost, {repeats} repeats (allowed {lead})")


def settled(bootstrap: str, run_dir: Path, prompt_ids: set[str], bad_records: list[tuple[str, int, int]],
            readers: dict[str, tuple[str, ...]], batch_groups: int) -> Report | None:
    """The report, once the run is done with what it was fed: every check holds (each prompt's group
    scored, each injected bad record dead-lettered by every group that reads its topic, ...) and the
    learner holds at most a partial batch (fewer than `batch_groups` trainable groups after its newest
    checkpoint).
    None while it is not, or while the broker cannot be read (it may be a fault still recovering). A
    chaos run waits for exactly this, then checks: the conditions themselves, not a timer or a quiet spell."""
    try:
        report = check(bootstrap, run_dir, prompt_ids, bad_records, readers, batch_groups)
    except Exception:  # noqa: BLE001 - the broker may still be coming back
        return None
    return report if report.ok and report.numbers["pending"] < batch_groups else None


def check_evals(report: Report, bootstrap: str, run_dir: Path, wait_s: float = 60.0) -> None:
    """svc_eval and the monitor: every (set, version) on `evals` says the same thing in all its copies
    (a redo after a kill samples the same), and appears exactly once among the monitor's rows (it
    upserts by run, set and version). Waits up to `wait_s` for the monitor to catch up."""
    import time

    from svc_monitor.client import local_address, report as monitor_report

    copies: dict[tuple[str, str, int], list[dict]] = defaultdict(list)
    for rec in read_range(bootstrap, "evals"):
        value = rec.get("value", {})
        copies[(value.get("run_id", ""), value.get("set", ""), int(value.get("policy_version", 0)))].append(value)
    outcome = lambda v: repr({k: v.get(k) for k in ("pass1", "prompt_correct", "prompt_judged", "sha256")})  # noqa: E731
    differing = [key for key, values in copies.items() if len({outcome(v) for v in values}) > 1]
    deadline, rows = time.monotonic() + wait_s, []
    while True:
        try:
            rows = [(r.run_id, r.set, r.policy_version) for r in monitor_report(local_address(run_dir)).evals]
        except Exception:  # noqa: BLE001 - the monitor may be restarting; try again until the deadline
            rows = []
        if set(rows) >= set(copies) or time.monotonic() > deadline:
            break
        time.sleep(2)
    counted = Counter(rows)
    missing = sorted(set(copies) - set(counted))
    twice = sorted(key for key, n in counted.items() if n > 1)
    unknown = sorted(set(counted) - set(copies))
    report.add("each evaluated (set, version) once in the monitor", bool(copies) and not (missing or twice or unknown
                                                                                          or differing),
               f"{len(copies)} results on evals ({sum(len(v) for v in copies.values())} records), "
               f"{len(differing)} with differing copies; monitor: {len(missing)} missing, {len(twice)} twice, "
               f"{len(unknown)} unknown" + (f": {(missing or twice or unknown)[:3]}" if missing or twice or unknown else ""))
    report.numbers.update(eval_results=len(copies))
