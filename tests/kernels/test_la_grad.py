"""Gradients of the chunked and Triton paths against autograd through the float64 recurrence."""
import pytest
import torch

from kernels.lightning_attn import lightning_attn
from la_testing import DEVICE, m1_slopes, rand, reference, rel_err


def grads(fn, inputs, w_o, w_s):
    """Gradients of sum(o * w_o) (+ sum(final_state * w_s)) with respect to `inputs`."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    o, state = fn(*leaves)
    loss = (o.double() * w_o).sum()
    if w_s is not None:
        loss = loss + (state.double() * w_s).sum()
    loss.backward()
    return [x.grad for x in leaves]


def check(q, k, v, s0, cu=None, bounds=None, tol=1e-5):
    slope = m1_slopes(q.shape[2])
    with_state = s0 is not None
    inputs = [q, k, v] + ([s0] if with_state else [])
    w_o = torch.randn(*q.shape, dtype=torch.float64)
    w_s = torch.randn(*s0.shape, dtype=torch.float64) if with_state else None

    def ours(q, k, v, s0=None):
        return lightning_attn(q, k, v, slope, s0, with_state, cu)

    def ref(q, k, v, s0=None):
        if bounds is None:
            return reference(q, k, v, slope, s0)
        parts = [reference(q[:, a:b], k[:, a:b], v[:, a:b], slope, s0[n:n + 1])
                 for n, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
        return torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts])

    got = grads(ours, inputs, w_o.to(DEVICE), None if w_s is None else w_s.to(DEVICE))
    want = grads(ref, inputs, w_o, w_s)
    for name, g, r, x in zip("q k v initial_state".split(), got, want, inputs):
        assert g.dtype == x.dtype
        assert rel_err(g, r) < tol, (name, rel_err(g, r))


@pytest.mark.parametrize("backend,T,D", [("chunk", 150, 8), ("chunk", 700, 16),
                                         ("triton", 100, 16)])
@pytest.mark.parametrize("with_state", [True, False])
def test_grads_match_recurrence(backend, T, D, with_state, use_backend):
    use_backend(backend)
    torch.manual_seed(10)
    q, k, v = (rand(2, T, 2, D) for _ in range(3))
    check(q, k, v, rand(2, 2, D, D) if with_state else None)


@pytest.mark.parametrize("backend", ["chunk", "triton"])
def test_bf16_grads(backend, use_backend):
    use_backend(backend)
    torch.manual_seed(12)
    q, k, v = (rand(1, 90, 2, 16, dtype=torch.bfloat16) for _ in range(3))
    check(q, k, v, rand(1, 2, 16, 16), tol=1e-2)


@pytest.mark.parametrize("backend", ["chunk", "triton"])
def test_packed_grads(backend, use_backend):
    use_backend(backend)
    torch.manual_seed(11)
    bounds = [0, 30, 100, 101]
    q, k, v = (rand(1, bounds[-1], 2, 16) for _ in range(3))
    check(q, k, v, rand(3, 2, 16, 16), torch.tensor(bounds, device=DEVICE), bounds)
