"""The learner's per-source metrics: reward, accuracy, length, samples and groups per {source, kind},
groups skipped per source, partial credit in the reward and not in accuracy, labels capped."""
from __future__ import annotations

import pytest

from m1flow.accounting import OTHER, BoundedLabels, SourceKindLabels, scored_kind, source_of
from m1flow.contracts import events
from m1flow.rl.config import AlgorithmConfig
from m1flow.rl.selection import Selected, Skipped
from m1flow.status import Status
from svc_learner.source_stats import source_metrics
from tests.rl.scored import group


def sourced(gid: str, rewards: list[float], source: str, kind: str, correct: list[bool | None],
            statuses: list[Status] | None = None) -> events.ScoredGroup:
    g = group(gid, rewards, statuses=statuses)
    g.source, g.verifier_kind, g.task_type = source, kind, "t"
    for sample, verdict in zip(g.samples, correct):
        if verdict is not None:
            sample.correct = verdict
    return g


def select(groups: list[events.ScoredGroup]) -> tuple[list[Selected], list[Skipped]]:
    outcomes = [AlgorithmConfig().select(g, 0) for g in groups]
    return [o for o in outcomes if isinstance(o, Selected)], [o for o in outcomes if isinstance(o, Skipped)]


def by_key(metrics) -> dict[tuple[str, str, str], float]:
    return {(m.labels["source"], m.labels["kind"], m.name.removeprefix("learner/source/")): m.value for m in metrics}


def test_each_source_and_kind_gets_its_own_reward_accuracy_length_and_counts():
    groups = [
        sourced("a", [1.0, 0.0, 1.0, 1.0], "gsm8k", "math", [True, False, True, True]),
        sourced("b", [0.0, 1.0, 0.0, 0.0], "gsm8k", "math", [False, True, False, False],
                statuses=[Status.OK, Status.OK, Status.OK, Status.VERIFIER_TIMEOUT]),
        # partial credit: half the puzzle right, no verdict; and one fully right with its verdict
        sourced("c", [0.5, 0.5, 1.0, 0.0], "rg:leg_counting", "rg:leg_counting", [None, None, True, False]),
        sourced("d", [1.0, 1.0, 1.0, 1.0], "rg:leg_counting", "rg:leg_counting", [True] * 4),  # nothing to learn
    ]
    selected, skipped = select(groups)
    assert [s.group_id for s in skipped] == ["d"]
    m = by_key(source_metrics(selected, skipped, SourceKindLabels()))
    gsm = {k[2]: v for k, v in m.items() if k[:2] == ("gsm8k", "math")}
    assert gsm == pytest.approx({"groups": 2, "samples": 7, "samples_trained": 7, "judged": 7,
                                 "reward_mean": 4 / 7, "accuracy": 4 / 7, "length_mean": 2.0})
    rg = {k[2]: v for k, v in m.items() if k[:2] == ("rg:leg_counting", "rg:leg_counting")}
    # the 0.5s count in the mean reward (2/4) but not in accuracy: 1 correct of the 2 judged
    assert rg == pytest.approx({"groups": 1, "samples": 4, "samples_trained": 4, "judged": 2,
                                "reward_mean": 0.5, "accuracy": 0.5, "length_mean": 2.0, "groups_skipped": 1})


def test_a_source_without_verdicts_publishes_no_accuracy():
    selected, _ = select([sourced("g", [0.25, 0.75], "judge-only", "genrm", [None, None])])
    m = by_key(source_metrics(selected, [], SourceKindLabels()))
    assert ("judge-only", "genrm", "accuracy") not in m
    assert m[("judge-only", "genrm", "reward_mean")] == pytest.approx(0.5)
    assert m[("judge-only", "genrm", "judged")] == 0


def test_records_without_source_or_kind_use_their_task_type():
    old = group("o", [1.0, 0.0])
    old.task_type = "arith"
    assert (source_of(old), scored_kind(old)) == ("arith", "arith")
    assert source_of(events.Rollout(task_type="math", source="gsm8k")) == "gsm8k"
    assert source_of(events.ScoredGroup()) == scored_kind(events.ScoredGroup()) == "?"


def test_label_values_are_capped_the_rest_is_other():
    labels = BoundedLabels(limit=2)
    assert [labels(s) for s in ("a", "b", "c", "a", "d", "b")] == ["a", "b", OTHER, "a", OTHER, "b"]
    pair = SourceKindLabels(limit=1)
    groups = [sourced(str(i), [1.0, 0.0], f"src{i}", f"kind{i}", [True, False]) for i in range(3)]
    selected, _ = select(groups)
    m = by_key(source_metrics(selected, [], pair))
    assert m[("src0", "kind0", "groups")] == 1 and m[(OTHER, OTHER, "groups")] == 2


def test_each_source_gets_the_mismatch_of_its_own_samples():
    """Rows in batch order (the selected samples, group by group) split by source: a source whose
    engine disagreed more shows the larger KL and the larger dropped share."""
    import torch

    from m1flow.rl.correction import Bounds, CorrectionConfig
    from m1flow.rl.mismatch import row_sums
    from svc_learner.precision import mismatch_values

    selected, _ = select([sourced("a", [1.0, 0.0, 1.0, 0.0], "gsm8k", "math", [None] * 4),
                          sourced("b", [0.0, 1.0, 0.0, 1.0], "mbpp", "code", [None] * 4),
                          sourced("c", [1.0, 0.0, 0.0, 0.0], "gsm8k", "math", [None] * 4)])
    n = sum(len(s.samples) for s in selected)
    g = torch.Generator().manual_seed(0)
    train = -torch.rand(n, 10, generator=g)
    noise = torch.where(torch.arange(n) // 4 == 1, 0.5, 0.05)[:, None]  # group b's engine: the noisy one
    infer = train + noise * torch.randn(n, 10, generator=g)
    cfg = CorrectionConfig(icepop=Bounds(lo=0.8, hi=1.25))
    rows = row_sums(cfg, train, infer, torch.ones(n, 10), torch.ones(n, 10))
    got = by_key(source_metrics(selected, [], SourceKindLabels(), rows, corrected=True))
    math_rows = torch.cat([rows[:4], rows[8:]]).sum(0)
    for name, value in mismatch_values(math_rows, True).items():
        assert got["gsm8k", "math", name] == pytest.approx(value)
    assert got["mbpp", "code", "train_infer_k3"] > 10 * got["gsm8k", "math", "train_infer_k3"]
    assert got["mbpp", "code", "correction_dropped_frac"] > got["gsm8k", "math", "correction_dropped_frac"]
    assert not any(k[2].startswith("train_infer") for k in by_key(source_metrics(selected, [], SourceKindLabels())))
