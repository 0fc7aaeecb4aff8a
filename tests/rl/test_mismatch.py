"""Mismatch corrections against verl's rollout correction (verl/trainer/ppo/rollout_corr_helper.py).

verl is installed with --no-deps; its package __init__ needs ray, and rollout_corr_helper's module
imports need ray, tensordict and omegaconf too (verl.protocol's DataProto and the config dataclasses,
which the functions used here do not touch). So the functions are taken from verl's own files by
name, unchanged, and run in a namespace that holds what they use: math, torch, typing, and verl's
masked_sum / masked_mean from verl/utils/torch_functional.py (read the same way). Nothing is
replaced: a name the functions use and the namespace lacks raises NameError.
"""
from __future__ import annotations

import ast
import importlib.util
import math
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError

from m1flow.rl.config import AlgorithmConfig
from m1flow.rl.correction import Bounds, CorrectionConfig
from m1flow.rl.mismatch import ROW_COLUMNS, correct, row_sums
from m1flow.rl.objectives import LossSpec, TokenObjective

VERL = Path(importlib.util.find_spec("verl").submodule_search_locations[0])


def verl_defs(path: Path, names: set[str], namespace: dict) -> dict:
    """verl's top-level definitions `names` (functions and constants) from `path`, run in namespace."""
    tree = ast.parse(path.read_text())
    picked = [node for node in tree.body
              if (isinstance(node, ast.FunctionDef) and node.name in names)
              or (isinstance(node, (ast.Assign, ast.AnnAssign)) and
                  {t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                   if isinstance(t, ast.Name)} & names)]
    module = ast.Module(body=picked, type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)  # noqa: S102 - verl's own code, read from its files
    return namespace


@pytest.fixture(scope="module")
def verl():
    functional = verl_defs(VERL / "utils" / "torch_functional.py", {"masked_sum", "masked_mean"},
                           {"torch": torch})
    helper = verl_defs(
        VERL / "trainer" / "ppo" / "rollout_corr_helper.py",
        {"SAFETY_BOUND", "SUPPORTED_ROLLOUT_RS_OPTIONS", "TOKEN_LEVEL_ROLLOUT_RS_OPTIONS",
         "_parse_rollout_is_threshold", "_parse_rollout_rs_thresholds", "compute_rollout_rejection_mask",
         "compute_rs_metrics", "compute_rollout_correction_weights", "compute_is_metrics",
         "compute_offpolicy_metrics"},
        {"math": math, "torch": torch, "Optional": typing.Optional, "Any": typing.Any,
         "verl_F": SimpleNamespace(masked_sum=functional["masked_sum"], masked_mean=functional["masked_mean"])})
    return SimpleNamespace(**helper)


def batch(seed: int, n: int = 12, t: int = 40, spread: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(t)[None, :] < torch.randint(5, t, (n, 1), generator=g)).float()
    mask[:, 0] = 0
    rollout = -torch.rand(n, t, generator=g, dtype=torch.float64).float() * 3
    proximal = rollout + spread * torch.randn(n, t, generator=g)
    logp = proximal + 0.1 * torch.randn(n, t, generator=g)
    adv = torch.randn(n, generator=g)
    return logp, proximal, rollout, adv, mask


def verl_weight(verl, cfg: CorrectionConfig, proximal, rollout, mask):
    """verl's per-token factor: its IS weights times its rejection mask (1 where a part is off).

    verl's rejection statistic k1 is log(p_rollout / p_train), so our interval [lo, hi] on
    p_train / p_rollout is its [1/hi, 1/lo]."""
    log_ratio = proximal - rollout
    weight = mask.clone()
    if cfg.tis_cap is not None or cfg.icepop is not None:
        spec = cfg.tis_cap if cfg.tis_cap is not None else f"{cfg.icepop.lo!r}_{cfg.icepop.hi!r}"
        weight, _ = verl.compute_rollout_correction_weights(log_ratio, mask, "token", spec)
    if cfg.sequence is not None:
        option = {"product": "seq_sum_k1", "geometric": "seq_mean_k1"}[cfg.sequence]
        b = cfg.sequence_bounds
        kept, _ = verl.compute_rollout_rejection_mask(log_ratio, mask, option, f"{1 / b.hi!r}_{1 / b.lo!r}")
        weight = weight * kept
    return weight


# asymmetric bounds: reading the interval on p_rollout / p_train instead would fail the comparison
CORRECTIONS = {
    "tis": CorrectionConfig(tis_cap=1.2),
    "icepop": CorrectionConfig(icepop=Bounds(lo=0.7, hi=1.25)),
    "geometric": CorrectionConfig(sequence="geometric", sequence_bounds=Bounds(lo=0.97, hi=1.2)),
    "product": CorrectionConfig(sequence="product", sequence_bounds=Bounds(lo=0.5, hi=4.0)),
    "tis+geometric": CorrectionConfig(tis_cap=1.5, sequence="geometric", sequence_bounds=Bounds(lo=0.9, hi=1.02)),
    "icepop+product": CorrectionConfig(icepop=Bounds(lo=0.5, hi=2.0), sequence="product",
                                       sequence_bounds=Bounds(lo=0.2, hi=5.0)),
}


@pytest.mark.parametrize("name", sorted(CORRECTIONS))
@pytest.mark.parametrize("loss", ["cispo", "dapo", "grpo"])
def test_loss_and_gradient_equal_verls_correction(verl, name, loss):
    """The corrected loss is the uncorrected one with verl's weights x masks multiplied in, per token."""
    cfg = CORRECTIONS[name]
    for seed in range(3):
        logp, proximal, rollout, adv, mask = batch(seed)
        ours_w = correct(cfg, proximal, rollout, mask).weight
        theirs_w = verl_weight(verl, cfg, proximal, rollout, mask)
        torch.testing.assert_close(ours_w, theirs_w, rtol=1e-6, atol=1e-7)
        assert (ours_w > 0).any() and not torch.equal(ours_w, mask), "the case must keep tokens and change some"

        spec = LossSpec(loss, correction=cfg)
        x = logp.clone().requires_grad_(True)
        ours = TokenObjective.build(proximal, adv, mask, spec, rollout_logp=rollout).loss(x)
        ours.backward()
        plain = TokenObjective.build(proximal, adv, mask, LossSpec(loss))
        y = logp.clone().requires_grad_(True)
        reference = -(plain.coefficients(y) * theirs_w * y).sum()
        reference.backward()
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-5, atol=1e-8)


def test_tis_weight_is_min_of_ratio_and_cap_and_detached():
    logp, proximal, rollout, adv, mask = batch(7, spread=0.5)
    prox = proximal.clone().requires_grad_(True)
    parts = correct(CorrectionConfig(tis_cap=1.3), prox, rollout, mask)
    expected = torch.minimum((proximal - rollout).exp(), torch.tensor(1.3)) * mask
    torch.testing.assert_close(parts.weight, expected)
    assert not parts.weight.requires_grad
    assert parts.truncated.sum() == ((proximal - rollout).exp() > 1.3)[mask > 0].sum() > 0


def sums(cfg, proximal, rollout, mask, measured=None) -> dict[str, float]:
    rows = row_sums(cfg, proximal, rollout, mask, mask if measured is None else measured)
    return dict(zip(ROW_COLUMNS, rows.sum(0).tolist()))


def test_kl_estimates_equal_verls(verl):
    logp, proximal, rollout, adv, mask = batch(3, spread=0.2)
    total = sums(None, proximal, rollout, mask)
    theirs = verl.compute_offpolicy_metrics(proximal, rollout, mask)
    assert total["k1"] / total["measured"] == pytest.approx(theirs["kl"], rel=1e-5)
    assert total["k3"] / total["measured"] == pytest.approx(theirs["k3_kl"], rel=1e-5)
    assert total["dropped"] == total["truncated"] == 0


def test_shares_count_tokens_and_sequences_and_kl_only_the_measured_ones():
    _, proximal, rollout, _, mask = batch(5, spread=0.4)
    cfg = CorrectionConfig(icepop=Bounds(lo=0.7, hi=1.4), sequence="geometric",
                           sequence_bounds=Bounds(lo=0.9, hi=1.1))
    measured = mask.clone()
    measured[::2] = 0
    total = sums(cfg, proximal, rollout, mask, measured)
    dropped = (correct(cfg, proximal, rollout, mask).weight == 0) & (mask > 0)
    assert total["dropped"] == dropped.sum() > 0 and total["dropped_seq"] == dropped.any(-1).sum()
    assert total["sequences"] == (mask > 0).any(-1).sum() and total["truncated"] == 0
    assert total["measured"] == measured.sum() and total["k1"] == pytest.approx(sums(None, proximal, rollout, measured)["k1"])


def test_scale_tightens_towards_one():
    cfg = CorrectionConfig(tis_cap=2.0, icepop=Bounds(lo=0.5, hi=2.0), sequence="geometric")
    tight = cfg.scaled(0.5)
    assert tight.tis_cap == pytest.approx(2 ** 0.5)
    assert (tight.icepop.lo, tight.icepop.hi) == pytest.approx((0.5 ** 0.5, 2 ** 0.5))
    assert tight.sequence_bounds.hi == pytest.approx(1.01 ** 0.5)
    assert cfg.scaled(1.0) == cfg


def test_correction_needs_rollout_logprobs():
    _, proximal, _, adv, mask = batch(1)
    with pytest.raises(ValueError, match="rollout's log-probs"):
        TokenObjective.build(proximal, adv, mask, LossSpec(correction=CorrectionConfig(tis_cap=2.0)))


@pytest.mark.parametrize(("block", "field"), [
    ({"tis_cap": 0}, "tis_cap"),
    ({"tis_cap": -1.5}, "tis_cap"),
    ({"icepop": {"lo": 2.0, "hi": 0.5}}, "icepop"),
    ({"icepop": {"lo": 0, "hi": 2}}, "icepop.lo"),
    ({"sequence": "geometric", "sequence_bounds": {"lo": 1.2, "hi": 0.9}}, "sequence_bounds"),
    ({"sequence": "arithmetic"}, "sequence"),
])
def test_nonsense_bounds_are_refused_naming_the_field(block, field):
    with pytest.raises(ValidationError) as err:
        AlgorithmConfig(correction=block)
    assert f"correction.{field}" in str(err.value).replace("\n", ".").replace(" ", "")


def test_the_bounds_in_force_by_name():
    cfg = CorrectionConfig(tis_cap=2.0, sequence="geometric")
    assert cfg.in_force() == {"tis_cap": 2.0, "sequence_lo": 0.99, "sequence_hi": 1.01}
    assert CorrectionConfig(icepop=Bounds(lo=0.5, hi=2.0)).scaled(0.5).in_force() == pytest.approx(
        {"icepop_lo": 0.5 ** 0.5, "icepop_hi": 2 ** 0.5})
