"""What a replay changed: its output records matched with the original's by their trace ids, and
the differences that matter for each kind of replay.

* reward (`scored`): per sample (rollout id) the verdict: status, correct, reward, detail. A flip is
  a changed `correct` or `status`; flips are counted by verifier kind and by the shape of the detail
  before and after (numbers and quoted text masked, so "got 8, want 7" and "got 3, want 2" are one).
* rollout (`rollouts`): per rollout id the sampled tokens (the first position that differs) and
  whether the log-probs agree on the tokens both sampled alike.
* learner (`policy`, `metrics`): per policy version the step's loss and the weights' SHA-256; the
  first version where either differs.

Pure functions over decoded messages; ops/diff_cli.py reads the topics.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from m1flow.contracts import events
from m1flow.status import status_of

REWARD_TOL = 1e-6
LOGPROB_TOL = 1e-3
LOSS_TOL = 1e-6
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def detail_shape(detail: str) -> str:
    """A verifier detail with its particulars masked: quoted text as '…', numbers as N."""
    return _NUMBER.sub("N", _QUOTED.sub("'…'", detail))[:120]


# ------------------------------------------------------------------------------- verdicts
@dataclass(frozen=True)
class SampleVerdict:
    status: str
    correct: bool | None
    reward: float
    detail: str

    @classmethod
    def of(cls, sample: events.ScoredSample) -> SampleVerdict:
        return cls(status_of(sample).name, sample.correct if sample.HasField("correct") else None,
                   float(sample.reward), sample.detail)

    def label(self) -> str:
        verdict = "-" if self.correct is None else "correct" if self.correct else "wrong"
        return f"{self.status} {verdict} {self.reward:g}"


def some(ids: list[str], what: str) -> str:
    """`N <what>: ` and the first ten of them: a report line that stays one line on a large replay."""
    return f"{len(ids)} {what}: " + ", ".join(ids[:10])


@dataclass
class VerdictChange:
    group_id: str
    rollout_id: str
    kind: str
    before: SampleVerdict
    after: SampleVerdict
    changed: list[str]  # the fields that differ: status, correct, reward, detail

    @property
    def flipped(self) -> bool:
        """The verdict itself changed (not only the reward's size or the detail's wording)."""
        return "correct" in self.changed or "status" in self.changed


@dataclass
class VerdictDiff:
    groups: int = 0  # replayed groups matched with an original
    samples: int = 0  # samples compared
    changes: list[VerdictChange] = field(default_factory=list)
    no_original: list[str] = field(default_factory=list)  # replayed groups whose original was not found
    unmatched_samples: list[str] = field(default_factory=list)  # a rollout id in one of the two only

    @property
    def flips(self) -> list[VerdictChange]:
        return [c for c in self.changes if c.flipped]

    @property
    def differs(self) -> bool:
        return bool(self.changes or self.no_original or self.unmatched_samples)

    def by_kind(self) -> Counter[str]:
        return Counter(c.kind for c in self.flips)

    def by_detail(self) -> Counter[tuple[str, str, str]]:
        """Flips per (kind, detail shape before, detail shape after)."""
        return Counter((c.kind, detail_shape(c.before.detail), detail_shape(c.after.detail)) for c in self.flips)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "reward", "differs": self.differs, "groups": self.groups, "samples": self.samples,
                "flipped": len(self.flips), "changed": len(self.changes), "by_kind": dict(self.by_kind()),
                "by_detail": [{"kind": k, "before": b, "after": a, "count": n}
                              for (k, b, a), n in self.by_detail().most_common()],
                "changes": [{**asdict(c), "flipped": c.flipped} for c in self.changes],
                "no_original": self.no_original, "unmatched_samples": self.unmatched_samples}

    def lines(self) -> list[str]:
        flips = self.flips
        out = [f"reward replay: {self.groups} groups, {self.samples} samples compared; {len(flips)} verdicts flipped, "
               f"{len(self.changes) - len(flips)} other changes (reward or detail only)"]
        if flips:
            out.append("flipped by verifier kind: " + ", ".join(f"{k} {n}" for k, n in self.by_kind().most_common()))
            out.append("flipped by detail (before -> after):")
            out += [f"  {n:>5}  {k}: " + (f"{b!r} (detail unchanged)" if a == b else f"{b!r} -> {a!r}")
                    for (k, b, a), n in self.by_detail().most_common()]
        if self.changes:
            out.append(f"{'rollout':<40}{'kind':<10}{'before':<24}{'after':<24}changed")
            for c in self.changes:
                out.append(f"{c.rollout_id:<40}{c.kind:<10}{c.before.label():<24}{c.after.label():<24}"
                           f"{','.join(c.changed)}")
                if "detail" in c.changed:
                    out.append(f"{'':<4}detail: {c.before.detail!r} -> {c.after.detail!r}")
        if self.no_original:
            out.append(some(self.no_original, "replayed groups have no original in the range read"))
        if self.unmatched_samples:
            out.append(some(self.unmatched_samples, "samples in only one of the two"))
        return out


def compare_verdicts(original: Mapping[str, events.ScoredGroup], replayed: Mapping[str, events.ScoredGroup],
                     reward_tol: float = REWARD_TOL) -> VerdictDiff:
    """Each replayed group's samples against the original group's, matched by rollout id."""
    diff = VerdictDiff()
    for gid, again in sorted(replayed.items()):
        first = original.get(gid)
        if first is None:
            diff.no_original.append(gid)
            continue
        diff.groups += 1
        kind = again.verifier_kind or again.task_type
        before = {s.rollout_id: s for s in first.samples}
        after = {s.rollout_id: s for s in again.samples}
        diff.unmatched_samples += sorted(before.keys() ^ after.keys())
        for rid in sorted(before.keys() & after.keys(), key=lambda r: after[r].index):
            diff.samples += 1
            b, a = SampleVerdict.of(before[rid]), SampleVerdict.of(after[rid])
            changed = [name for name, same in (("status", b.status == a.status), ("correct", b.correct == a.correct),
                                               ("reward", abs(b.reward - a.reward) <= reward_tol),
                                               ("detail", b.detail == a.detail)) if not same]
            if changed:
                diff.changes.append(VerdictChange(gid, rid, kind, b, a, changed))
    return diff


# ------------------------------------------------------------------------------- rollouts
@dataclass
class SampleChange:
    rollout_id: str
    tokens_equal: bool
    first_difference: int | None  # the first token position that differs (None: equal)
    lengths: tuple[int, int]  # original, replayed
    logprob_max_diff: float | None  # over the positions before first_difference (None: none)
    logprobs_agree: bool
    versions: tuple[int, int]


@dataclass
class RolloutDiff:
    samples: int = 0
    changes: list[SampleChange] = field(default_factory=list)
    no_original: list[str] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        return bool(self.changes or self.no_original)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "rollout", "differs": self.differs, "samples": self.samples,
                "tokens_differ": sum(not c.tokens_equal for c in self.changes),
                "logprobs_disagree": sum(not c.logprobs_agree for c in self.changes),
                "changes": [asdict(c) for c in self.changes], "no_original": self.no_original}

    def lines(self) -> list[str]:
        tokens = sum(not c.tokens_equal for c in self.changes)
        logps = sum(not c.logprobs_agree for c in self.changes)
        out = [f"rollout replay: {self.samples} samples compared; {tokens} sampled other tokens, {logps} have "
               f"log-probs that disagree on the tokens sampled alike"]
        if self.changes:
            out.append(f"{'rollout':<40}{'tokens':<26}{'log-probs':<28}versions")
            for c in self.changes:
                tokens_text = "equal" if c.tokens_equal else f"differ at {c.first_difference} ({c.lengths[0]} vs {c.lengths[1]})"
                gap = "-" if c.logprob_max_diff is None else f"{c.logprob_max_diff:.2g}"
                logp = f"{'agree' if c.logprobs_agree else 'DISAGREE'} (max |diff| {gap})"
                out.append(f"{c.rollout_id:<40}{tokens_text:<26}{logp:<28}v{c.versions[0]} / v{c.versions[1]}")
        if self.no_original:
            out.append(some(self.no_original, "replayed rollouts have no original in the range read"))
        return out


def compare_rollouts(original: Mapping[str, events.Rollout], replayed: Mapping[str, events.Rollout],
                     logprob_tol: float = LOGPROB_TOL) -> RolloutDiff:
    """Each replayed rollout against the original of the same rollout id."""
    diff = RolloutDiff()
    for rid, again in sorted(replayed.items()):
        first = original.get(rid)
        if first is None:
            diff.no_original.append(rid)
            continue
        diff.samples += 1
        a, b = list(first.token_ids), list(again.token_ids)
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        equal = a == b
        gaps = [abs(x - y) for x, y in zip(first.logprobs[:same], again.logprobs[:same])]
        worst = max(gaps) if gaps else None
        agree = worst is None or worst <= logprob_tol
        if not equal or not agree:
            diff.changes.append(SampleChange(rid, equal, None if equal else same, (len(a), len(b)),
                                             worst, agree, (first.policy_version, again.policy_version)))
    return diff


# ------------------------------------------------------------------------------- learner
@dataclass(frozen=True)
class Step:
    """What a learner said about one policy version: its step's loss (metrics, or the announcement's
    stats) and its weights' SHA-256 (the announcement)."""

    version: int
    loss: float | None = None
    sha256: str | None = None


@dataclass
class LearnerDiff:
    versions: list[int] = field(default_factory=list)  # compared, in order
    first: int | None = None  # the first version whose loss or weights differ
    reason: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    no_original: list[int] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        return self.first is not None or bool(self.no_original)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "learner", "differs": self.differs, "versions": self.versions, "first": self.first,
                "reason": self.reason, "steps": self.rows, "no_original": self.no_original}

    def lines(self) -> list[str]:
        head = (f"learner replay: {len(self.versions)} versions compared; "
                + (f"first difference at v{self.first}: {self.reason}" if self.first is not None
                   else "losses and weights equal"))
        out = [head, f"{'version':<9}{'loss (original)':>18}{'loss (replay)':>18}  weights"]
        for row in self.rows:
            out.append(f"v{row['version']:<8}{_num(row['loss_original']):>18}{_num(row['loss_replay']):>18}  "
                       f"{row['weights']}")
        if self.no_original:
            out.append("no original record of versions " + ", ".join(f"v{v}" for v in self.no_original))
        return out


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def compare_learner(original: Mapping[int, Step], replayed: Mapping[int, Step],
                    loss_tol: float = LOSS_TOL) -> LearnerDiff:
    """Version by version: the first whose loss (beyond loss_tol, relative) or weights differ."""
    diff = LearnerDiff()
    for version in sorted(replayed):
        again, first = replayed[version], original.get(version)
        if first is None:
            diff.no_original.append(version)
            continue
        diff.versions.append(version)
        weights = ("unknown" if not (first.sha256 and again.sha256)
                   else "equal" if first.sha256 == again.sha256 else "DIFFER")
        diff.rows.append({"version": version, "loss_original": first.loss, "loss_replay": again.loss,
                          "sha256_original": first.sha256, "sha256_replay": again.sha256, "weights": weights})
        if diff.first is not None:
            continue
        if first.loss is not None and again.loss is not None and not _close(first.loss, again.loss, loss_tol):
            diff.first, diff.reason = version, f"loss {first.loss:.6g} vs {again.loss:.6g}"
        elif weights == "DIFFER":
            diff.first, diff.reason = version, f"weights {first.sha256[:12]} vs {again.sha256[:12]}"
    return diff


def _close(a: float, b: float, tol: float) -> bool:
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)
