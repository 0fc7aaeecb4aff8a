"""Per-token log-probabilities of sampled tokens without materialising [tokens, vocab] logits.

With V = 200K and 32K tokens, fp32 logits alone take 26 GB, and autograd keeps several tensors of
that size for the backward pass. The function below streams over chunks of tokens in both passes:
the forward keeps only the per-token log-sum-exp, the backward recomputes each chunk's logits from
the hidden states and the head weight. Peak memory is then a few [chunk, V] fp32 buffers plus the
weight gradient, whatever the sequence length.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Number of fp32 logits one chunk may hold (2**25 floats = 128 MiB): bounds memory in bytes,
# independent of the vocabulary size.
CHUNK_ELEMENTS = 2**25


def default_chunk_size(vocab_size: int) -> int:
    return max(1, CHUNK_ELEMENTS // vocab_size)


def _chunk_logits(hidden: Tensor, weight: Tensor) -> Tensor:
    """Logits of one chunk: the matmul runs in the inputs' dtype, the result is upcast to fp32."""
    return (hidden @ weight.T).float()


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
            top = z.amax(dim=-1)
            z.sub_(top[:, None])  # in place: one [chunk, V] buffer when no entropy is asked for
            shifted_target = z.gather(1, targets[start:end, None]).squeeze(1)
            if with_entropy:
                e = z.exp()
                total = e.sum(-1)
                entropy[start:end] = total.log() - (e * z).sum(-1) / total
            else:
                total = z.exp_().sum(-1)
            lse[start:end] = top + total.log()
            logp[start:end] = shifted_target - total.log()
        ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.set_materialize_grads(False)  # an unused entropy output costs no backward work
        ctx.chunk_size = chunk_size
        ctx.with_entropy = with_entropy
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: Tensor | None, grad_entropy: Tensor | None):
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        n, chunk = hidden.shape[0], ctx.chunk_size
        use_entropy = ctx.with_entropy and grad_entropy is not None
        if grad_logp is None:
            if not use_entropy:
                return None, None, None, None, None
            grad_logp = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
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
            if need_h:
                grad_h[start:end] = (grad_z.to(weight.dtype) @ weight).to(hidden.dtype)
            if need_w:
                grad_w.addmm_(grad_z.T, hidden[start:end].float())
        if need_w:
            grad_w = grad_w.to(weight.dtype)
        return grad_h, grad_w, None, None, None


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


def naive_token_logprobs(hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
    """The reference the chunked version must equal; materialises all logits (tests, benchmark)."""
    logq = torch.log_softmax((hidden @ weight.T).float(), dim=-1)
    return logq.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
