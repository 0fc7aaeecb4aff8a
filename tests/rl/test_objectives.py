"""The three registered policy losses against hand-computed values on tiny tensors."""

import math

import pytest
import torch

from m1flow.rl.objectives import POLICY_LOSSES, LossSpec, Totals, policy_loss

# Two responses, four tokens each; ratios r = exp(logp - old) chosen by hand.
RATIOS = torch.tensor([[0.5, 1.0, 1.25, 1.5], [0.5, 1.0, 1.25, 1.5]])
ADV = torch.tensor([1.0, -1.0])
MASK = torch.ones(2, 4)


def _logp_old(ratios=RATIOS):
    old = torch.full(ratios.shape, -1.0)
    logp = (old + ratios.log()).requires_grad_()
    return logp, old


def _grad(loss, logp):
    return torch.autograd.grad(loss, logp)[0]


def test_cispo_clips_only_the_weight_and_keeps_every_token():
    logp, old = _logp_old()
    loss, stats = policy_loss(logp, old, ADV, MASK, LossSpec("cispo", eps_high=0.2))  # eps_low: no bound
    # weight = clip(r, -inf, 1.2) = [0.5, 1, 1.2, 1.2]; d loss / d logp = -w * A / 8 tokens
    expected = torch.tensor([[-0.5, -1.0, -1.2, -1.2], [0.5, 1.0, 1.2, 1.2]]) / 8
    torch.testing.assert_close(_grad(loss, logp), expected)
    # value with A = (2, 1): -(1/8) sum w A logp, logp = -1 + log r
    value, _ = policy_loss(logp, old, torch.tensor([2.0, 1.0]), MASK, LossSpec("cispo", eps_high=0.2))
    w = torch.tensor([0.5, 1.0, 1.2, 1.2])
    lp = torch.log(torch.tensor([0.5, 1.0, 1.25, 1.5])) - 1
    assert value.item() == pytest.approx(-3 * (w * lp).sum().item() / 8, abs=1e-6)
    assert stats["clip_high_frac"].item() == pytest.approx(4 / 8)
    assert stats["clip_low_frac"].item() == 0.0
    assert stats["masked_frac"].item() == 0.0
    assert stats["num_tokens"].item() == 8
    assert stats["ratio_mean"].item() == pytest.approx((0.5 + 1 + 1.25 + 1.5) / 4)


def test_grpo_masks_the_tokens_ppo_clips():
    logp, old = _logp_old()
    loss, stats = policy_loss(logp, old, ADV, MASK, LossSpec("grpo", eps_low=0.2, eps_high=0.2))
    # A > 0: r = 1.25 and 1.5 exceed 1.2 -> masked; A < 0: r = 0.5 below 0.8 -> masked.
    # Kept tokens carry weight r (PPO's gradient r A d logp).
    expected = torch.tensor([[-0.5, -1.0, 0.0, 0.0], [0.0, 1.0, 1.25, 1.5]]) / 8
    torch.testing.assert_close(_grad(loss, logp), expected)
    assert stats["masked_frac"].item() == pytest.approx(3 / 8)
    assert stats["clip_high_frac"].item() == pytest.approx(4 / 8)  # r > 1.2, either sign of A
    assert stats["clip_low_frac"].item() == pytest.approx(2 / 8)


def test_dapo_decoupled_clip_keeps_what_grpo_drops():
    logp, old = _logp_old()
    loss, _ = policy_loss(logp, old, ADV, MASK, LossSpec("dapo", eps_low=0.2, eps_high=0.28))
    # r = 1.25 < 1.28 now stays in for A > 0; r = 1.5 is still dropped.
    expected = torch.tensor([[-0.5, -1.0, -1.25, 0.0], [0.0, 1.0, 1.25, 1.5]]) / 8
    torch.testing.assert_close(_grad(loss, logp), expected)


@pytest.mark.parametrize("algo,eps", [("grpo", (0.2, 0.2)), ("dapo", (0.2, 0.28))])
def test_ppo_gradient_equals_the_clipped_surrogate(algo, eps):
    """Independent reference: autograd of -mean(min(r A, clip(r) A)) with r carrying the gradient."""
    g = torch.Generator().manual_seed(0)
    old = torch.randn(3, 7, generator=g) - 2
    logp = (old + 0.4 * torch.randn(3, 7, generator=g)).requires_grad_()
    adv = torch.randn(3, generator=g)
    mask = (torch.rand(3, 7, generator=g) > 0.3).float()
    loss, _ = policy_loss(logp, old, adv, mask, LossSpec(algo, eps_low=eps[0], eps_high=eps[1]))
    r = torch.exp(logp - old)
    a = adv[:, None]
    surrogate = torch.minimum(r * a, r.clamp(1 - eps[0], 1 + eps[1]) * a)
    ref_loss = -(surrogate * mask).sum() / mask.sum()
    torch.testing.assert_close(_grad(loss, logp), _grad(ref_loss, logp))


def test_cispo_gradient_survives_where_ppo_is_zero():
    logp, old = _logp_old(torch.tensor([[3.0, 0.2]]))  # far outside any trust region
    for adv, idx in ((torch.tensor([1.0]), 0), (torch.tensor([-1.0]), 1)):
        mask = torch.ones(1, 2)
        cispo = _grad(policy_loss(logp, old, adv, mask, LossSpec("cispo", eps_high=0.2))[0], logp)
        ppo = _grad(policy_loss(logp, old, adv, mask, LossSpec("grpo"))[0], logp)
        assert ppo[0, idx].item() == 0.0
        assert cispo[0, idx].item() != 0.0
    # and the clipped weight bounds it: 1.2 for r = 3 under A = +1
    cispo = _grad(policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), LossSpec(eps_high=0.2))[0], logp)
    assert cispo[0, 0].item() == pytest.approx(-1.2 / 2)


def test_masked_tokens_have_no_effect():
    logp, old = _logp_old()
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    loss, stats = policy_loss(logp, old, ADV, mask, LossSpec("cispo", eps_high=0.2))
    expected = torch.tensor([[-0.5, -1.0, 0, 0], [0.5, 0, 0, 0]]) / 3
    torch.testing.assert_close(_grad(loss, logp), expected)
    assert stats["num_tokens"].item() == 3
    assert stats["clip_high_frac"].item() == 0.0


def test_normalisations_by_hand():
    # on-policy (r = 1); response 0 has 1 token, response 1 has 3 tokens; A = 1 for both
    lp = torch.tensor([[-1.0, 0.0, 0.0], [-2.0, -3.0, -4.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.ones(2)
    token = policy_loss(lp, lp.detach(), adv, mask, LossSpec(norm="token"))[0]
    sample = policy_loss(lp, lp.detach(), adv, mask, LossSpec(norm="sample"))[0]
    mixed = policy_loss(lp, lp.detach(), adv, mask, LossSpec(norm="sample_token"))[0]
    assert token.item() == pytest.approx(10 / 4)  # -(-1 - 2 - 3 - 4) / 4
    assert sample.item() == pytest.approx((1 / 1 + 9 / 3) / 2)
    assert mixed.item() == pytest.approx(0.5 * (10 / 4 + 2.0))
    # per-token gradient: token norm treats tokens alike, sample norm favours the short response
    torch.testing.assert_close(_grad(token, lp)[mask.bool()], torch.full((4,), -0.25))
    torch.testing.assert_close(_grad(sample, lp)[mask.bool()], torch.tensor([-0.5, -1 / 6, -1 / 6, -1 / 6]))


def test_per_token_advantages_and_global_totals():
    logp, old = _logp_old()
    adv = ADV[:, None].expand(2, 4)
    loss_vec, _ = policy_loss(logp, old, ADV, MASK)
    loss_tok, _ = policy_loss(logp, old, adv, MASK)
    torch.testing.assert_close(loss_vec, loss_tok)
    # twice as many tokens globally -> half the loss share on this rank
    loss_half, _ = policy_loss(logp, old, ADV, MASK, totals=Totals(tokens=16, samples=4))
    assert loss_half.item() == pytest.approx(loss_vec.item() / 2)


def test_drift_stats_count_the_positive_tokens_beyond_the_trust_region():
    logp, old = _logp_old()
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])  # the last token of response 2 is padding
    for algo in ("cispo", "dapo"):
        _, stats = policy_loss(logp, old, ADV, mask, LossSpec(algo, eps_high=0.28))
        # |log r| of 0.5, 1, 1.25, 1.5 (both rows; row 2 without 1.5) over 7 tokens
        expected = (2 * (math.log(2) + 0 + math.log(1.25)) + math.log(1.5)) / 7
        assert stats["abs_log_ratio"].item() == pytest.approx(expected)
        assert stats["pos_frac"].item() == pytest.approx(4 / 7)  # response 1 has A > 0
        assert stats["pos_clip_high_frac"].item() == pytest.approx(1 / 7)  # only r = 1.5 > 1.28 with A > 0


def test_entropy_stat_and_bad_arguments():
    logp, old = _logp_old()
    ent = torch.full((2, 4), math.log(2.0))
    _, stats = policy_loss(logp, old, ADV, MASK, entropy=ent)
    assert stats["entropy"].item() == pytest.approx(math.log(2.0))
    with pytest.raises(ValueError, match="unknown policy loss 'ppo2'; known: cispo, dapo, grpo"):
        LossSpec("ppo2")
    with pytest.raises(ValueError):
        LossSpec(norm="seq")


def test_registry_holds_the_three_losses_with_their_default_clip_ranges():
    assert POLICY_LOSSES.names() == ("cispo", "dapo", "grpo")
    assert (LossSpec("cispo").eps_low, LossSpec("cispo").eps_high) == (float("inf"), 0.28)
    assert (LossSpec("dapo").eps_low, LossSpec("dapo").eps_high) == (0.2, 0.28)
    assert (LossSpec("grpo", eps_high=0.3).eps_low, LossSpec("grpo", eps_high=0.3).eps_high) == (0.2, 0.3)
