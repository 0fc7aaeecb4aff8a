"""Every prefill backend against the float64 token-by-token recurrence on fresh random inputs."""
import pytest
import torch

from kernels.lightning_attn import lightning_attn, select_backend
from la_testing import DEVICE, m1_slopes, rand, reference, rel_err

# The Triton interpreter is slow: it gets short sequences; the chunked path goes to 4096 tokens.
LENGTHS = {"chunk": [1, 63, 64, 65, 777, 4096], "triton": [1, 65, 200]}
HEADS = {"chunk": 4, "triton": 2}


def case(backend, T, dtype=torch.float32, B=2, D=16, with_state=True):
    H = HEADS[backend]
    q, k, v = (rand(B, T, H, D, dtype=dtype) for _ in range(3))
    s0 = rand(B, H, D, D) if with_state else None
    return q, k, v, m1_slopes(H), s0


@pytest.mark.parametrize("backend", ["chunk", "triton"])
@pytest.mark.parametrize("with_state", [False, True])
def test_fp32_matches_recurrence(backend, with_state, use_backend):
    use_backend(backend)
    torch.manual_seed(0)
    for T in LENGTHS[backend]:
        q, k, v, slope, s0 = case(backend, T, with_state=with_state)
        o, state = lightning_attn(q, k, v, slope, s0, output_final_state=True)
        o_ref, state_ref = reference(q, k, v, slope, s0)
        assert o.dtype == torch.float32 and state.dtype == torch.float32
        assert rel_err(o, o_ref) < 1e-5, (T, rel_err(o, o_ref))
        assert rel_err(state, state_ref) < 1e-5, (T, rel_err(state, state_ref))


@pytest.mark.parametrize("backend,T", [("chunk", 1500), ("triton", 130)])
def test_bf16_matches_recurrence(backend, T, use_backend):
    use_backend(backend)
    torch.manual_seed(1)
    q, k, v, slope, s0 = case(backend, T, dtype=torch.bfloat16)
    o, state = lightning_attn(q, k, v, slope, s0, output_final_state=True)
    o_ref, state_ref = reference(q, k, v, slope, s0)
    assert o.dtype == torch.bfloat16 and state.dtype == torch.float32
    assert rel_err(o, o_ref) < 1e-2
    assert rel_err(state, state_ref) < 1e-2


def test_fp16_inputs(use_backend):
    use_backend("chunk")
    torch.manual_seed(2)
    q, k, v, slope, s0 = case("chunk", 300, dtype=torch.float16)
    o, _ = lightning_attn(q, k, v, slope, s0)
    assert o.dtype == torch.float16 and rel_err(o, reference(q, k, v, slope, s0)[0]) < 1e-2


@pytest.mark.parametrize("backend,bounds", [("chunk", [0, 1, 70, 70, 200, 461]),
                                            ("triton", [0, 1, 66, 66, 150])])
def test_packed_sequences(backend, bounds, use_backend):
    """cu_seqlens: each sequence starts from its own state, as if run alone (empty ones too)."""
    use_backend(backend)
    torch.manual_seed(3)
    H, D, N = HEADS[backend], 16, len(bounds) - 1
    q, k, v = (rand(1, bounds[-1], H, D) for _ in range(3))
    s0, slope = rand(N, H, D, D), m1_slopes(H)
    cu = torch.tensor(bounds, dtype=torch.int32, device=DEVICE)
    o, state = lightning_attn(q, k, v, slope, s0, output_final_state=True, cu_seqlens=cu)
    assert o.shape == q.shape and state.shape == (N, H, D, D)
    for n, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        o_ref, s_ref = reference(q[:, a:b], k[:, a:b], v[:, a:b], slope, s0[n:n + 1])
        if b > a:
            assert rel_err(o[:, a:b], o_ref) < 1e-5
        assert rel_err(state[n:n + 1], s_ref) < 1e-5


@pytest.mark.parametrize("backend", ["chunk", "triton"])
def test_large_slopes_stay_finite(backend, use_backend):
    """exp(+s j) would overflow fp32 at s = 4 within one 64-token chunk."""
    use_backend(backend)
    torch.manual_seed(4)
    q, k, v, _, s0 = case(backend, 150)
    slope = torch.tensor([4.0, 1.5], device=DEVICE)[:HEADS[backend]].repeat(2)[:q.shape[2]]
    o, state = lightning_attn(q, k, v, slope, s0, output_final_state=True)
    assert torch.isfinite(o).all() and torch.isfinite(state).all()
    o_ref, s_ref = reference(q, k, v, slope, s0)
    assert rel_err(o, o_ref) < 1e-5 and rel_err(state, s_ref) < 1e-5


def test_default_dispatch(monkeypatch):
    monkeypatch.delenv("M1FLOW_LA_BACKEND", raising=False)
    assert select_backend(torch.zeros(1)) == "chunk"
    monkeypatch.setenv("M1FLOW_LA_BACKEND", "naive")
    assert select_backend(torch.zeros(1)) == "naive"
    monkeypatch.setenv("M1FLOW_LA_BACKEND", "cuda-magic")
    with pytest.raises(ValueError):
        select_backend(torch.zeros(1))


def test_rejects_bad_shapes(use_backend):
    use_backend("chunk")
    q = torch.zeros(2, 5, 2, 8)
    with pytest.raises(ValueError):
        lightning_attn(q, q, q, torch.ones(3))
    with pytest.raises(ValueError):
        lightning_attn(q, q, q, torch.ones(2), cu_seqlens=torch.tensor([0, 5]))
