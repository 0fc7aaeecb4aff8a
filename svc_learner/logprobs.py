"""Per-token log-probabilities of sampled tokens without materialising [tokens, vocab] logits.

With V = 200K and 32K tokens, fp32 logits alone take 26 GB, and autograd keeps several tensors of
that size for the backward pass. Both functions below stream over chunks of tokens, so peak memory
is a few [chunk, V] fp32 buffers plus the weight gradient, whatever the sequence length:

* token_logprobs: log pi(target) (and entropy) with a chunked backward. The forward keeps only the
  per-token log-sum-exp; the backward recomputes each chunk's logits: four [chunk, D] x [D, V]
  matmuls per chunk where the naive version needs three.
* fused_head_loss: for a loss that is linear in log pi with coefficients that may depend on log pi
  itself (detached), as every policy-gradient objective here is. Each chunk's gradient is formed
  while its logits exist, so there is no recomputation: three matmuls, like the naive version,
  and the backward only scales the gradients the forward already computed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

# Number of fp32 logits one chunk may hold (2**25 floats = 128 MiB): bounds memory in bytes,
# independent of the vocabulary size.
CHUNK_ELEMENTS = 2**25

# coefficients(logp_chunk, start, end) -> c_chunk: the loss is -sum(c * logp) with c treated as a
# constant (detached), so d loss / d logp = -c.
Coefficients = Callable[[Tensor, int, int], Tensor]


def default_chunk_size(vocab_size: int) -> int:
    return max(1, CHUNK_ELEMENTS // vocab_size)


def _chunk_logits(hidden: Tensor, weight: Tensor) -> Tensor:
    """Logits of one chunk: the matmul runs in the inputs' dtype, the result is upcast to fp32."""
    return (hidden @ weight.T).float()


def _rowdot(a: Tensor, b: Tensor) -> Tensor:
    """sum(a * b, -1) for [C, V] inputs without a third [C, V] buffer."""
    return (a.unsqueeze(1) @ b.unsqueeze(2)).view(-1)


def _softmax_pieces(z: Tensor, targets: Tensor, with_entropy: bool) -> tuple[Tensor, Tensor, Tensor | None, Tensor, Tensor]:
    """From one chunk's fp32 logits z (overwritten): lse, log p(target), entropy, exp(z - max), its row sum.

    Without entropy, exp(z - max) is written into z itself: one [chunk, V] buffer in all.
    """
    top = z.amax(dim=-1)
    z.sub_(top[:, None])
    shifted_target = z.gather(1, targets[:, None]).squeeze(1)
    e = z.exp() if with_entropy else z.exp_()
    total = e.sum(-1)
    log_total = total.log()
    entropy = log_total - _rowdot(e, z) / total if with_entropy else None
    return top + log_total, shifted_target - log_total, entropy, e, total


def _head_grads(grad_z: Tensor, hidden: Tensor, weight: Tensor, grad_h: Tensor | None, grad_w: Tensor | None) -> None:
    """Backpropagate one chunk's logit gradient into grad_h (rows of this chunk) and grad_w (accumulated)."""
    if grad_h is not None:
        grad_h.copy_(grad_z.to(weight.dtype) @ weight)
    if grad_w is not None:
        grad_w.addmm_(grad_z.T, hidden.float())


class _ChunkedTokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int, with_entropy: bool):
        n = hidden.shape[0]
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.empty(n if with_entropy else 0, dtype=torch.float32, device=hidden.device)
        for start in range(0, n, chunk_size):
            end = min(start + chunk_size, n)
            z = _chunk_logits(hidden[start:end], weight)
            lse[start:end], logp[start:end], ent, _, _ = _softmax_pieces(z, targets[start:end], with_entropy)
            if with_entropy:
                entropy[start:end] = ent
        ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.set_materialize_grads(False)  # an unused entropy output costs no backward work
        ctx.chunk_size = chunk_size
        ctx.with_entropy = with_entropy
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: Tensor | None, grad_entropy: Tensor | None):
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        n, chunk = hidden.shape[0], ctx.chunk_size
        use_entropy = ctx.with_entropy and grad_entropy is not None
        if grad_logp is None:
            if not use_entropy:
                return None, None, None, None, None
            grad_logp = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        grad_h = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if ctx.needs_input_grad[1] else None
        rows = torch.arange(min(chunk, n), device=hidden.device)
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            g = grad_logp[start:end, None].float()
            # d logp_t / d z = onehot(target) - p ; d H / d z = -p * (log p + H)
            logq = _chunk_logits(hidden[start:end], weight).sub_(lse[start:end, None])
            if use_entropy:
                p = logq.exp()
                coef = logq.add_(entropy[start:end, None]).mul_(-grad_entropy[start:end, None].float()).sub_(g)
                grad_z = coef.mul_(p)
            else:
                grad_z = logq.exp_().mul_(-g)  # in place: p, then -g p
            grad_z[rows[: end - start], targets[start:end]] += g.squeeze(1)
            _head_grads(grad_z, hidden[start:end], weight, grad_h[start:end] if grad_h is not None else None, grad_w)
        return grad_h, grad_w.to(weight.dtype) if grad_w is not None else None, None, None, None


class _FusedHeadLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, coefficients: Coefficients,
                chunk_size: int, with_entropy: bool, with_grads: bool):
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.empty(n if with_entropy else 0, dtype=torch.float32, device=hidden.device)
        loss = torch.zeros((), dtype=torch.float64, device=hidden.device)
        grad_h = torch.empty_like(hidden) if with_grads else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if with_grads else None
        rows = torch.arange(min(chunk_size, n), device=hidden.device)
        for start in range(0, n, chunk_size):
            end = min(start + chunk_size, n)
            z = _chunk_logits(hidden[start:end], weight)
            _, lp, ent, e, total = _softmax_pieces(z, targets[start:end], with_entropy)
            logp[start:end] = lp
            if with_entropy:
                entropy[start:end] = ent
            c = coefficients(lp, start, end).detach().float()
            loss -= (c.double() * lp.double()).sum()
            if with_grads:  # d(-c logp)/dz = c (p - onehot)
                grad_z = e.mul_((c / total)[:, None])
                grad_z[rows[: end - start], targets[start:end]] -= c
                _head_grads(grad_z, hidden[start:end], weight, grad_h[start:end], grad_w)
        ctx.save_for_backward(grad_h, grad_w.to(weight.dtype) if with_grads else None)
        ctx.mark_non_differentiable(logp, entropy)
        return loss.float(), logp, entropy

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_logp: Tensor, _grad_entropy: Tensor):
        grad_h, grad_w = ctx.saved_tensors
        if grad_h is None:
            raise RuntimeError("fused_head_loss ran without gradients (under no_grad); it cannot backpropagate")
        if not torch.equal(grad_loss, torch.ones_like(grad_loss)):
            grad_h, grad_w = grad_h * grad_loss.to(grad_h.dtype), grad_w * grad_loss.to(grad_w.dtype)
        return grad_h, grad_w, None, None, None, None, None


def token_logprobs(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    chunk_size: int | None = None,
    return_entropy: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """fp32 log pi(target) (and the entropy of pi) for hidden states [..., D] and a head [V, D].

    Equals log_softmax((hidden @ weight.T).float()).gather(targets); gradients reach hidden and
    weight in their own dtypes. To run the head in another precision, cast both inputs first.
    """
    lead = targets.shape
    h = hidden.reshape(-1, hidden.shape[-1])
    t = targets.reshape(-1).long()
    chunk = chunk_size or default_chunk_size(weight.shape[0])
    logp, entropy = _ChunkedTokenLogprobs.apply(h, weight, t, chunk, return_entropy)
    if return_entropy:
        return logp.view(lead), entropy.view(lead)
    return logp.view(lead)


def fused_head_loss(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    coefficients: Coefficients,
    chunk_size: int | None = None,
    return_entropy: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(loss, log pi(target), entropy) for loss = -sum_t c_t log pi(target_t), hidden [n, D], head [V, D].

    coefficients(logp[start:end], start, end) gives c for tokens start..end-1 from their (detached)
    log-probs; it is called once per chunk, in order. The gradient of the loss with respect to
    hidden and weight is computed during this call (only when grad mode is on and an input needs
    it), so the returned loss is meant for one backward. logp and entropy carry no gradient.
    """
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"hidden must be [n, D] and targets [n]; got {tuple(hidden.shape)}, {tuple(targets.shape)}")
    chunk = chunk_size or default_chunk_size(weight.shape[0])
    with_grads = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    loss, logp, entropy = _FusedHeadLoss.apply(hidden, weight, targets.long(), coefficients, chunk,
                                               return_entropy, with_grads)
    return loss, logp, entropy if return_entropy else None


def naive_token_logprobs(hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
    """The reference the chunked version must equal; materialises all logits (tests, benchmark)."""
    logq = torch.log_softmax((hidden @ weight.T).float(), dim=-1)
    return logq.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
