"""The learner's mismatch corrections and what it publishes of them: an engine whose log-probs
disagree with the learner's (a perturbed copy) is measured (correlation, KL k1 and k3) and corrected
(shares truncated and dropped), per step and per source."""
from __future__ import annotations

import copy

import pytest
import torch
from learner_fixtures import make_batch, tiny_model

from m1flow.rl.correction import Bounds, CorrectionConfig
from m1flow.rl.objectives import LossSpec
from svc_learner.optim import make_optimizer
from svc_learner.update import SequenceLogprobs, TrainConfig, run_updates, trainable_mask

ARCH = "qwen2"


def perturbed(model, n: int = 8, noise: float = 0.3):
    """A batch as an engine with slightly different numerics would report it: the learner's own
    log-probs of the tokens, plus noise."""
    batch = make_batch(model, n=n)
    with torch.no_grad():
        exact = SequenceLogprobs(model)(batch.input_ids, batch.response_mask)[0]
    g = torch.Generator().manual_seed(1)
    batch.rollout_logp = (exact + noise * torch.randn(exact.shape, generator=g)) * batch.response_mask
    return batch, exact


def train(model, batch, correction: CorrectionConfig | None, lr: float = 1e-3):
    m = copy.deepcopy(model)
    cfg = TrainConfig(lr=lr, minibatches=2, old_logp_source="recompute")
    stats = run_updates(SequenceLogprobs.configured(m, cfg), make_optimizer(m.parameters(), lr), batch, cfg,
                        LossSpec("cispo", correction=correction), version=0)
    return m, stats


def test_the_step_publishes_the_mismatch_and_what_the_correction_did():
    model = tiny_model(ARCH)
    batch, exact = perturbed(model)
    cfg = CorrectionConfig(tis_cap=1.2, icepop=Bounds(lo=0.7, hi=1.4))
    _, stats = train(model, batch, cfg)
    mask = trainable_mask(batch) > 0
    log_ratio = (exact - batch.rollout_logp)[mask].double()
    ratio = log_ratio.exp()
    assert stats["train_infer_k1"] == pytest.approx(float(-log_ratio.mean()), rel=1e-4)
    assert stats["train_infer_k3"] == pytest.approx(float((ratio - 1 - log_ratio).mean()), rel=1e-4)
    assert stats["train_infer_corr"] < 0.999
    dropped = (ratio < 0.7) | (ratio > 1.4)
    assert stats["correction_dropped_frac"] == pytest.approx(float(dropped.double().mean()))
    assert stats["correction_truncated_frac"] == pytest.approx(float((ratio > 1.2).double().mean()))
    assert 0 < stats["correction_dropped_seq_frac"] <= 1 and stats["correction_dropped_frac"] > 0

    _, plain = train(model, batch, None)
    assert "correction_dropped_frac" not in plain and plain["train_infer_k1"] == stats["train_infer_k1"]


def test_a_correction_that_drops_every_token_leaves_the_model_as_it_was():
    model = tiny_model(ARCH)
    batch, _ = perturbed(model, noise=1.0)
    everything = CorrectionConfig(sequence="product", sequence_bounds=Bounds(lo=0.9999, hi=1.0001))
    trained, stats = train(model, batch, everything, lr=1e-2)
    assert stats["correction_dropped_seq_frac"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), trained.parameters()))
    moved, _ = train(model, batch, None, lr=1e-2)
    assert not all(torch.equal(a, b) for a, b in zip(model.parameters(), moved.parameters()))
