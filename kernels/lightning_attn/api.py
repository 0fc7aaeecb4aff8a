"""Backend choice: Triton kernels on CUDA tensors (if triton is installed), PyTorch elsewhere.

M1FLOW_LA_BACKEND=triton|chunk|naive forces one (read at every call), e.g. to run the Triton
kernels on CPU under TRITON_INTERPRET=1 in tests.
"""
import importlib.util
import os
from typing import Optional

from torch import Tensor

from .chunk import chunk_lightning_attn
from .naive import naive_decode, naive_lightning_attn

BACKENDS = ("triton", "chunk", "naive")
ENV_VAR = "M1FLOW_LA_BACKEND"


def select_backend(x: Tensor) -> str:
    forced = os.environ.get(ENV_VAR, "").strip().lower()
    if forced:
        if forced not in BACKENDS:
            raise ValueError(f"{ENV_VAR}={forced!r}: expected one of {BACKENDS}")
        return forced
    return "triton" if x.is_cuda and importlib.util.find_spec("triton") else "chunk"


def lightning_attn(q: Tensor, k: Tensor, v: Tensor, slope: Tensor,
                   initial_state: Optional[Tensor] = None, output_final_state: bool = False,
                   cu_seqlens: Optional[Tensor] = None) -> tuple[Tensor, Optional[Tensor]]:
    """Causal linear attention with per-head exponential decay (MiniMax-M1 semantics).

    q, k, v [B,T,H,D]; slope [H] fp32 (layer-scaled, see build_slopes); initial_state [N,H,D,D];
    cu_seqlens [N+1] packs N sequences into B == 1. No 1/sqrt(d) scale, no RoPE.
    Returns o [B,T,H,D] in q's dtype and, if asked, the final state [N,H,D,D] in fp32
    (float64 for float64 inputs)."""
    backend = select_backend(q)
    if backend == "triton":
        from .chunk_triton import triton_lightning_attn
        return triton_lightning_attn(q, k, v, slope, initial_state, output_final_state, cu_seqlens)
    fn = chunk_lightning_attn if backend == "chunk" else naive_lightning_attn
    return fn(q, k, v, slope, initial_state, output_final_state, cu_seqlens)


def lightning_attn_decode(q: Tensor, k: Tensor, v: Tensor, slope: Tensor, state: Tensor,
                          slot_ids: Optional[Tensor] = None) -> Tensor:
    """One generated token per row: q, k, v [B,H,D]; state [S,H,D,D] fp32 updated in place, row b
    on state[slot_ids[b]] (default arange(B); ids must be distinct). Returns o [B,H,D]."""
    if q.dim() != 3 or k.shape != q.shape or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"expected q, k [B,H,D] and v [B,H,Dv], got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if state.dim() != 4 or state.shape[1:] != (q.shape[1], q.shape[2], v.shape[2]):
        raise ValueError(f"state must be [S,{q.shape[1]},{q.shape[2]},{v.shape[2]}], "
                         f"got {tuple(state.shape)}")
    if select_backend(q) == "triton":
        from .decode_triton import triton_decode
        return triton_decode(q, k, v, slope, state, slot_ids)
    return naive_decode(q, k, v, slope, state, slot_ids)
