import copy

import pytest
import torch
from learner_fixtures import arch, make_batch, tiny_model  # noqa: F401  (arch: fixture)
from pydantic import ValidationError

from m1flow import lm
from m1flow.rl.objectives import LossSpec
from svc_learner.batching import pack_sequences
from svc_learner.optim import make_optimizer
from svc_learner.update import SequenceLogprobs, TrainConfig, train_on_batch


def _sequence_logp(model, batch):
    with torch.no_grad():
        return SequenceLogprobs(model)(batch.input_ids, batch.response_mask)[0].sum(-1)


def test_scored_tokens_are_shifted_by_one(arch):
    """logp[:, t] must be log softmax(head(h[:, t-1]))[input_ids[:, t]] on response tokens only,
    and the model's own logits (its forward) must be what the learner's fp32 head computes."""
    model = tiny_model(arch)
    batch = make_batch(model, n=3)
    with torch.no_grad():
        logp = SequenceLogprobs(model)(batch.input_ids, batch.response_mask)[0]
        full = torch.log_softmax(lm.logits(model, batch.input_ids), -1)
        out = model(batch.input_ids)
        torch.testing.assert_close(getattr(out, "logits", out).float(), lm.logits(model, batch.input_ids),
                                   rtol=0, atol=1e-4)
    ref = full[:, :-1].gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    mask = batch.response_mask[:, 1:].bool()
    torch.testing.assert_close(logp[:, 1:][mask], ref[mask], rtol=0, atol=1e-5)
    assert (logp[:, 1:][~mask] == 0).all() and (logp[:, 0] == 0).all()


def test_logprobs_are_those_of_the_temperature_each_sample_was_drawn_at(arch):
    """Per sample, log softmax(logits / T): the engines' processed log-probs with top-p 1."""
    from m1flow.sampling import processed_logprobs

    model = tiny_model(arch)
    batch = make_batch(model, n=3)
    temperature = torch.tensor([0.5, 1.0, 2.0])
    with torch.no_grad():
        logp = SequenceLogprobs(model)(batch.input_ids, batch.response_mask, None, temperature)[0]
        logits = lm.logits(model, batch.input_ids)[:, :-1]
    mask = batch.response_mask[:, 1:].bool()
    for row, t in enumerate(temperature.tolist()):
        ref = processed_logprobs(logits[row], batch.input_ids[row, 1:], t, 1.0)
        torch.testing.assert_close(logp[row, 1:][mask[row]], ref[mask[row]], rtol=0, atol=1e-5)
    assert torch.equal(batch.temperature, torch.ones(3))  # a batch without temperatures: 1.0


@pytest.mark.parametrize("algo", ["cispo", "dapo", "grpo"])
def test_step_raises_positive_and_lowers_negative_samples(algo, arch):
    model = tiny_model(arch)
    adv = torch.tensor([1.0, -1.0] * 4)
    batch = make_batch(model, n=8, advantages=adv)
    before = _sequence_logp(model, batch)
    cfg = TrainConfig(lr=3e-3, minibatches=2)
    stats = train_on_batch(model, make_optimizer(model.parameters(), cfg.lr), batch, cfg, LossSpec(algo))
    change = _sequence_logp(model, batch) - before
    assert stats["updates"] == 2 and stats["num_tokens"] == batch.response_mask[:, 1:].sum()
    assert (change[adv > 0] > 0).all(), change
    assert (change[adv < 0] < 0).all(), change
    assert stats["train_infer_corr"] == pytest.approx(1.0, abs=1e-6)  # on-policy rollout log-probs


def test_recompute_replaces_rollout_logprobs(arch):
    model = tiny_model(arch)
    batch = make_batch(model, n=4)
    batch.rollout_logp = batch.rollout_logp - 0.5 * batch.response_mask  # engine disagrees by 0.5 nat
    for source, ratio in (("rollout", torch.exp(torch.tensor(0.5)).item()), ("recompute", 1.0)):
        m = copy.deepcopy(model)
        cfg = TrainConfig(minibatches=1, old_logp_source=source, lr=1e-3)
        stats = train_on_batch(m, make_optimizer(m.parameters(), cfg.lr), batch, cfg)
        assert stats["ratio_mean"] == pytest.approx(ratio, rel=1e-5)


def test_config_is_typed():
    assert TrainConfig().minibatches == 4
    with pytest.raises(ValidationError):
        TrainConfig(algo="cispo")  # the algorithm is chosen in `algorithm`, not here
    with pytest.raises(ValidationError):
        TrainConfig(minibatch=4)  # typo of a knob is an error, not ignored


def test_pack_sequences_aligns_logprobs_with_their_tokens():
    ids, mask, logp = pack_sequences([[5, 6], [7]], [[1, 2, 3], [4]], [[-0.1, -0.2, -0.3], [-0.4]], pad_id=9)
    assert ids.tolist() == [[5, 6, 1, 2, 3], [7, 4, 9, 9, 9]]
    assert mask.tolist() == [[0, 0, 1, 1, 1], [0, 1, 0, 0, 0]]
    torch.testing.assert_close(logp, torch.tensor([[0, 0, -0.1, -0.2, -0.3], [0, -0.4, 0, 0, 0]]))


def test_minibatches_shrink_so_every_rank_gets_samples():
    from svc_learner.update import Ranks, minibatch_indices

    assert [i.tolist() for i in minibatch_indices(5, 4, Ranks())] == [[0, 1], [2], [3], [4]]
    shares = [minibatch_indices(3, 2, Ranks(rank=r, world=2)) for r in range(2)]
    assert [[i.tolist() for i in s] for s in shares] == [[[0, 2]], [[1]]]  # one minibatch of all 3
    assert minibatch_indices(1, 4, Ranks(rank=0, world=2)) == []


@pytest.mark.parametrize("algo", ["cispo", "grpo"])
def test_fused_head_loss_takes_the_same_steps_as_logprobs_then_loss(algo, arch):
    base = tiny_model(arch)
    batch = make_batch(base, n=8)
    batch.rollout_logp = batch.rollout_logp + 0.5 * torch.randn_like(batch.rollout_logp)  # off-policy: clips fire
    runs = []
    for fused in (True, False):
        model = copy.deepcopy(base)
        cfg = TrainConfig(lr=3e-3, minibatches=4, fused_loss=fused)
        stats = train_on_batch(model, make_optimizer(model.parameters(), cfg.lr), batch, cfg, LossSpec(algo))
        runs.append((model, stats))
    (fused_model, fused_stats), (plain_model, plain_stats) = runs
    assert fused_stats["clip_high_frac"] > 0 and fused_stats["updates"] == 4
    for key in ("loss", "clip_high_frac", "masked_frac", "ratio_mean", "entropy", "grad_norm"):
        assert fused_stats[key] == pytest.approx(plain_stats[key], rel=1e-5, abs=1e-7), key
    for p, q in zip(fused_model.parameters(), plain_model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=2e-5)  # Adam: lr-sized steps from near-equal grads


def test_checkpoint_rotation_keeps_superseded_ones_for_their_grace_period(tmp_path):
    """A reader handed the current checkpoint has grace_s to read it before rotation may remove it."""
    import os
    import time

    from m1flow.checkpoint import STATE_FILE, rotate

    now = time.time()
    for version, superseded_ago in enumerate([500, 400, 30, 20, 10, 0]):
        d = tmp_path / f"v{version:06d}"
        d.mkdir()
        (d / STATE_FILE).write_text("{}")
        os.utime(d / STATE_FILE, (now - superseded_ago, now - superseded_ago))
    # v0 was superseded when v1 was written (400 s ago), v1 when v2 was (30 s ago), ...
    removed = rotate(tmp_path, keep=2, grace_s=60)
    assert [p.name for p in removed] == ["v000000"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"v{v:06d}" for v in range(1, 6)]
    assert [p.name for p in rotate(tmp_path, keep=2, grace_s=0)] == ["v000001", "v000002", "v000003"]


def test_the_precision_correlation_reads_only_the_samples_of_the_trained_version(arch):
    """A pipeline trains on samples one to three versions old; their log-probs differ from the
    trained weights by the updates since (staleness), which must not read as a precision problem."""
    from svc_learner.optim import make_optimizer as opt
    from svc_learner.update import SequenceLogprobs as Scorer, run_updates

    model = tiny_model(arch)
    batch = make_batch(model, n=8)
    stale = torch.arange(8) % 2 == 1
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(batch.rollout_logp.shape, generator=g) * batch.response_mask
    batch.rollout_logp = torch.where(stale[:, None], batch.rollout_logp + noise, batch.rollout_logp)
    batch.policy_version = torch.where(stale, torch.tensor(3), torch.tensor(5))
    cfg = TrainConfig(lr=1e-6, minibatches=1)
    runs = {}
    for version in (None, 5, 7):
        m = copy.deepcopy(model)
        runs[version] = run_updates(Scorer.configured(m, cfg), opt(m.parameters(), cfg.lr), batch, cfg,
                                    LossSpec("cispo"), version=version)
    assert runs[5]["train_infer_corr"] == pytest.approx(1.0, abs=1e-6)
    assert runs[None]["train_infer_corr"] < 0.99  # every sample: the stale ones' drift counts
    assert runs[5]["train_infer_tokens"] < runs[None]["train_infer_tokens"]
    assert "train_infer_corr" not in runs[7] and runs[7]["train_infer_tokens"] == 0  # none drawn by v7
