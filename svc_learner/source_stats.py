"""One learner step's figures per source and verifier kind, as `metrics` records labelled
{source, kind}: what the batch was made of (groups, samples trained), how it scored (mean reward,
accuracy, mean length over the usable samples), its train/inference mismatch (correlation, KL
estimates, the shares a correction truncated or dropped: svc_learner.precision.mismatch_values) and
the groups skipped since the previous step.

Partial credit: the reward is the verifier's float (0.5 for half a puzzle) and enters the mean reward
as it is; accuracy is the share of `correct` verdicts among the usable samples that have one, so a
sample without a verdict (partial credit, GenRM-only) counts in the reward and not in accuracy, and a
(source, kind) whose samples have no verdict publishes no accuracy at all. Label values are capped
(m1flow.accounting.MAX_LABELS distinct sources and kinds by name, the rest "other").
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from m1flow.accounting import SourceKindLabels, split_by_source
from m1flow.group_totals import GroupTotals
from m1flow.rl.selection import Selected, Skipped

from .precision import mismatch_values

PREFIX = "learner/source/"


@dataclass(frozen=True)
class SourceMetric:
    name: str
    value: float
    labels: dict[str, str]


def source_metrics(selected: Sequence[Selected], skipped: Sequence[Skipped], labels: SourceKindLabels,
                   mismatch: Tensor | None = None, corrected: bool = False) -> list[SourceMetric]:
    """The step's per-(source, kind) metrics, sorted by labels then name. `mismatch`: the batch's
    per-response mismatch sums in batch order (StepStats.rows: the selected samples, group by group)."""
    out: list[SourceMetric] = []
    ends = torch.tensor([len(sel.samples) for sel in selected]).cumsum(0).tolist()
    rows_of = {id(sel): slice(end - len(sel.samples), end) for sel, end in zip(selected, ends)}
    trained = split_by_source(selected, lambda sel: labels(sel.group))
    for (source, kind), part in trained.items():
        tags = {"source": source, "kind": kind}
        totals = GroupTotals.of(sel.group for sel in part)
        values = {"groups": len(part), "samples_trained": sum(len(sel.samples) for sel in part),
                  "samples": totals.samples, "judged": totals.judged}
        if totals.samples:
            values["reward_mean"] = totals.reward_sum / totals.samples
            values["length_mean"] = totals.length_sum / totals.samples
        if totals.judged:
            values["accuracy"] = totals.correct / totals.judged
        if mismatch is not None:
            values |= mismatch_values(torch.cat([mismatch[rows_of[id(sel)]] for sel in part]).sum(0), corrected)
        out += [SourceMetric(PREFIX + name, float(v), tags) for name, v in values.items()]
    for (source, kind), part in split_by_source(skipped, lambda s: labels(s.group)).items():
        out.append(SourceMetric(PREFIX + "groups_skipped", float(len(part)), {"source": source, "kind": kind}))
    return sorted(out, key=lambda m: (m.labels["source"], m.labels["kind"], m.name))
