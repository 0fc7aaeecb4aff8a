import pytest
import torch

from svc_learner.logprobs import fused_head_loss, naive_token_logprobs, token_logprobs
from m1flow.rl.objectives import LossSpec, TokenObjective, policy_loss


def _inputs(n=3, t=37, d=16, v=50, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(n, t, d, generator=g) * 0.5).to(dtype).requires_grad_()
    weight = torch.randn(v, d, generator=g).to(dtype).requires_grad_()
    targets = torch.randint(0, v, (n, t), generator=g)
    return hidden, weight, targets


def _naive_with_entropy(hidden, weight, targets):
    logq = torch.log_softmax((hidden @ weight.T).float(), dim=-1)
    return logq.gather(-1, targets[..., None]).squeeze(-1), -(logq.exp() * logq).sum(-1)


@pytest.mark.parametrize("chunk", [7, 1, 200, None])  # 7 and 200 do not divide 3 * 37 tokens
def test_values_and_grads_match_naive(chunk):
    hidden, weight, targets = _inputs()
    upstream = torch.randn(targets.shape, generator=torch.Generator().manual_seed(1))
    logp = token_logprobs(hidden, weight, targets, chunk_size=chunk)
    gh, gw = torch.autograd.grad((logp * upstream).sum(), (hidden, weight))
    ref = naive_token_logprobs(hidden, weight, targets)
    rh, rw = torch.autograd.grad((ref * upstream).sum(), (hidden, weight))
    assert logp.dtype == torch.float32 and logp.shape == targets.shape
    torch.testing.assert_close(logp, ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(gh, rh, rtol=0, atol=1e-5)
    torch.testing.assert_close(gw, rw, rtol=0, atol=1e-5)


def test_entropy_values_and_grads_match_naive():
    hidden, weight, targets = _inputs(t=13)
    g = torch.Generator().manual_seed(2)
    up_lp, up_h = torch.randn(targets.shape, generator=g), torch.randn(targets.shape, generator=g)
    logp, ent = token_logprobs(hidden, weight, targets, chunk_size=5, return_entropy=True)
    grads = torch.autograd.grad((logp * up_lp + ent * up_h).sum(), (hidden, weight))
    ref_lp, ref_ent = _naive_with_entropy(hidden, weight, targets)
    ref_grads = torch.autograd.grad((ref_lp * up_lp + ref_ent * up_h).sum(), (hidden, weight))
    torch.testing.assert_close(ent, ref_ent, rtol=0, atol=1e-5)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_unused_entropy_output_does_not_change_grads():
    hidden, weight, targets = _inputs(t=9)
    logp, _ = token_logprobs(hidden, weight, targets, chunk_size=4, return_entropy=True)
    gh = torch.autograd.grad(logp.sum(), hidden)[0]
    ref = torch.autograd.grad(naive_token_logprobs(hidden, weight, targets).sum(), hidden)[0]
    torch.testing.assert_close(gh, ref, rtol=0, atol=1e-5)


def test_low_precision_inputs_get_grads_in_their_dtype():
    hidden, weight, targets = _inputs(t=11, dtype=torch.bfloat16)
    logp = token_logprobs(hidden, weight, targets, chunk_size=6)
    gh, gw = torch.autograd.grad(logp.sum(), (hidden, weight))
    assert logp.dtype == torch.float32
    assert gh.dtype == torch.bfloat16 and gw.dtype == torch.bfloat16
    ref = naive_token_logprobs(hidden, weight, targets)
    torch.testing.assert_close(logp, ref, rtol=0, atol=1e-4)


def test_frozen_weight_only_hidden_gets_grad():
    hidden, weight, targets = _inputs(t=5)
    weight = weight.detach()
    logp = token_logprobs(hidden, weight, targets, chunk_size=3)
    (gh,) = torch.autograd.grad(logp.sum(), (hidden,))
    ref = torch.autograd.grad(naive_token_logprobs(hidden, weight, targets).sum(), hidden)[0]
    torch.testing.assert_close(gh, ref, rtol=0, atol=1e-5)


def _policy_problem(n=41, seed=3):
    """Flat tokens with old log-probs spread so that CISPO's and PPO's clips both fire."""
    hidden, weight, targets = _inputs(n=1, t=n, seed=seed)
    hidden, targets = hidden.detach().view(n, -1).requires_grad_(), targets.view(n)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        old = naive_token_logprobs(hidden, weight, targets) + 0.6 * torch.randn(n, generator=g)
    adv = torch.randn(n, generator=g)
    mask = (torch.rand(n, generator=g) > 0.2).float()
    return hidden, weight, targets, old, adv, mask


def _flat_objective(old, adv, mask, loss=LossSpec()):
    """The objective of one response whose tokens are the flat problem's, flattened back."""
    objective = TokenObjective.build(old[None], adv[None], mask[None], loss)
    return objective.select(torch.ones(1, len(old), dtype=torch.bool))


@pytest.mark.parametrize("algo", ["cispo", "dapo", "grpo"])
@pytest.mark.parametrize("chunk", [6, 1, 100])
def test_fused_head_loss_equals_logprobs_then_policy_loss(algo, chunk):
    """Same loss, log-probs, entropy and gradients as the naive head followed by policy_loss."""
    hidden, weight, targets, old, adv, mask = _policy_problem()
    flat = _flat_objective(old, adv, mask, LossSpec(algo, norm="sample_token"))
    loss, logp, ent = fused_head_loss(hidden, weight, targets, flat.coefficients, chunk, return_entropy=True)
    gh, gw = torch.autograd.grad(loss, (hidden, weight))

    ref_logp = naive_token_logprobs(hidden, weight, targets)
    ref_loss, stats = policy_loss(ref_logp[None], old[None], adv[None], mask[None], LossSpec(algo, norm="sample_token"))
    rh, rw = torch.autograd.grad(ref_loss, (hidden, weight))
    assert stats["clip_high_frac"] > 0  # the clip is exercised, so the coefficient depends on logp
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logp, ref_logp.detach(), rtol=0, atol=1e-5)
    torch.testing.assert_close(ent, _naive_with_entropy(hidden, weight, targets)[1].detach(), rtol=0, atol=1e-5)
    torch.testing.assert_close(gh, rh, rtol=0, atol=1e-6)
    torch.testing.assert_close(gw, rw, rtol=0, atol=1e-6)


def test_fused_head_loss_scales_with_upstream_and_keeps_dtypes():
    hidden, weight, targets, old, adv, mask = _policy_problem(n=17)
    hidden, weight = hidden.detach().bfloat16().requires_grad_(), weight.detach().bfloat16().requires_grad_()
    objective = _flat_objective(old, adv, mask)
    loss, _, _ = fused_head_loss(hidden, weight, targets, objective.coefficients, chunk_size=5)
    gh, gw = torch.autograd.grad(loss * 3.0, (hidden, weight))
    ref = objective.loss(naive_token_logprobs(hidden, weight, targets))
    rh, rw = torch.autograd.grad(ref * 3.0, (hidden, weight))
    assert gh.dtype == torch.bfloat16 and gw.dtype == torch.bfloat16
    torch.testing.assert_close(gh.float(), rh.float(), rtol=2e-2, atol=1e-4)
    torch.testing.assert_close(gw.float(), rw.float(), rtol=2e-2, atol=1e-4)


def test_fused_head_loss_without_grad_mode_has_no_backward():
    hidden, weight, targets, old, adv, mask = _policy_problem(n=9)
    objective = _flat_objective(old, adv, mask)
    with torch.no_grad():
        loss, logp, _ = fused_head_loss(hidden, weight, targets, objective.coefficients, chunk_size=4)
    torch.testing.assert_close(logp, naive_token_logprobs(hidden, weight, targets).detach(), rtol=0, atol=1e-5)
    assert not loss.requires_grad
    with pytest.raises(ValueError, match=r"\[n, D\]"):
        fused_head_loss(hidden[None], weight, targets, objective.coefficients)
