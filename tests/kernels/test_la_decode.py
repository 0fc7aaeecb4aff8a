"""Decode steps: agree with one long prefill, and touch only the slots they address."""
import pytest
import torch

from kernels.lightning_attn import lightning_attn, lightning_attn_decode, naive_decode
from la_testing import DEVICE, m1_slopes, rand, reference, rel_err


@pytest.mark.parametrize("backend", ["chunk", "triton"])
def test_prefill_then_decode_equals_long_prefill(backend, use_backend):
    use_backend(backend)
    torch.manual_seed(20)
    B, T0, steps, H, D = 2, 70, 5, 2, 16
    q, k, v = (rand(B, T0 + steps, H, D) for _ in range(3))
    slope = m1_slopes(H)
    o_pre, state = lightning_attn(q[:, :T0], k[:, :T0], v[:, :T0], slope, output_final_state=True)
    # The two rows live in slots 3 and 1 of a larger cache.
    cache = torch.zeros(4, H, D, D, device=DEVICE)
    slots = torch.tensor([3, 1], device=DEVICE)
    cache[slots] = state
    outs = [lightning_attn_decode(q[:, t], k[:, t], v[:, t], slope, cache, slots)
            for t in range(T0, T0 + steps)]
    o_ref, s_ref = reference(q, k, v, slope)
    o = torch.cat([o_pre, torch.stack(outs, dim=1)], dim=1)
    assert rel_err(o, o_ref) < 1e-5
    assert rel_err(cache[slots], s_ref) < 1e-5


@pytest.mark.parametrize("backend", ["chunk", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_touches_only_addressed_slots(backend, dtype, use_backend):
    use_backend(backend)
    torch.manual_seed(21)
    S, H, D = 6, 2, 16
    cache = rand(S, H, D, D)
    before = cache.clone()
    slots = torch.tensor([4, 1], device=DEVICE)
    q, k, v = (rand(2, H, D, dtype=dtype) for _ in range(3))
    slope = m1_slopes(H)
    o = lightning_attn_decode(q, k, v, slope, cache, slots)
    assert o.dtype == dtype and cache.dtype == torch.float32
    untouched = [i for i in range(S) if i not in (4, 1)]
    assert torch.equal(cache[untouched], before[untouched])
    ref_cache = before.double().cpu()
    o_ref = naive_decode(q.double().cpu(), k.double().cpu(), v.double().cpu(), slope.cpu(),
                         ref_cache, slots.cpu())
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel_err(o, o_ref) < tol
    assert rel_err(cache[slots], ref_cache[slots.cpu()]) < 1e-5


def test_default_slots_are_rows(use_backend):
    use_backend("chunk")
    torch.manual_seed(22)
    cache = rand(3, 2, 8, 8)
    q, k, v = (rand(3, 2, 8) for _ in range(3))
    slope = m1_slopes(2)
    expected = cache.clone()
    o_explicit = lightning_attn_decode(q, k, v, slope, expected, torch.arange(3))
    o_default = lightning_attn_decode(q, k, v, slope, cache)
    assert torch.equal(o_default, o_explicit) and torch.equal(cache, expected)
