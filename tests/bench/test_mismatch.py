"""bench/mismatch.py's core on a tiny config: the perturbed engine makes a real mismatch (the learner's
own statistics say so, against the reference arm's), each correction acts (TIS truncates, IcePop drops,
`none` does neither), and the monitor's rule, fed the learner's statistics, scales the bounds of the
steered arm's next step."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from m1flow import checkpoint
from svc_monitor.config import MismatchConfig

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import mismatch  # noqa: E402
from learning import Deadline, LocalScorer, Settings  # noqa: E402

TINY = Settings(steps=2, group=4, batch=4, minibatches=2, window=8, eval_every=2, eval_prompts=4, eval_samples=2)
NOISE = 0.5  # strong enough that a few of ~250 tokens pass TIS's cap of 2 (rho's spread grows with the noise)


def test_perturbed_weights_leave_the_learners_alone_and_differ_per_version(qwen2_policy: Path) -> None:
    model = checkpoint.load_model(qwen2_policy)
    state = model.state_dict()
    before = {k: v.clone() for k, v in state.items()}
    a, b, again = (mismatch.perturbed(state, 0.1, seed) for seed in (1, 2, 1))
    name = next(k for k, v in state.items() if v.is_floating_point() and v.numel() > 1000)
    assert all(torch.equal(state[k], before[k]) for k in state)  # the learner's weights untouched
    spread = ((a[name] - state[name]).std() / state[name].std()).item()
    assert spread == pytest.approx(0.1, rel=0.1)
    assert not torch.equal(a[name], b[name]) and torch.equal(a[name], again[name])  # per version, reproducible


def test_the_mismatch_is_real_and_each_correction_acts(qwen2_policy: Path) -> None:
    # the monitor's thresholds; tightens after one bad step (its stop at max_dropped aside: at noise 0.5
    # IcePop drops more than that from the first step, tests/monitor/test_rules.py checks the stop)
    rule = MismatchConfig(enabled=True, tighten_after=1, max_dropped=1.0)
    with LocalScorer() as scorer:
        runs = mismatch.run(mismatch.ORDER, [NOISE], [0], TINY, qwen2_policy, Deadline(300), scorer, rule)
    ref, none, tis, icepop, steered = (runs[name][0] for name in mismatch.ORDER)
    assert ref.mean("train_infer_k3") < 1e-5 and ref.mean("train_infer_corr") > 0.999  # same weights: no mismatch
    for arm in (none, tis, icepop, steered):
        assert arm.mean("train_infer_k3") > rule.kl_high > 100 * max(ref.mean("train_infer_k3"), 1e-7)
        assert arm.mean("train_infer_corr") < ref.mean("train_infer_corr")
    assert "correction_truncated_frac" not in none.steps[0]  # nothing corrects it
    assert tis.mean("correction_truncated_frac") > 0 and tis.mean("correction_dropped_frac") == 0
    assert icepop.mean("correction_dropped_frac") > 0 and icepop.mean("correction_truncated_frac") == 0
    assert [s["correction_scale"] for s in steered.steps] == [1.0, rule.factor]  # the rule, from step 1's stats
    assert [s["correction_scale"] for s in tis.steps] == [1.0, 1.0]  # no rule: the configured bounds
    for arm in (ref, none, tis, icepop, steered):
        assert [p.step for p in arm.curve.points] == [0, 2] and 0 <= arm.curve.final <= 1
    mean = mismatch.interval([0.2, 0.4, 0.6])
    assert mean[0] == pytest.approx(0.4) and mean[1] == pytest.approx(4.303 * 0.2 / 3 ** 0.5, rel=0.03)
