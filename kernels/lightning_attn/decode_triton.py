"""Batched lightning attention decode step in Triton, on slot-addressed fp32 states, in place.

Decode is memory bound: each (row, head) reads and writes its [D, D] fp32 state once (128 KB at
D = 128). One program owns one (row, head, block of BV value columns), so even batch 1 with 64
heads launches enough programs to keep every SM streaming; the whole batch is one launch.
"""
from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

from .chunk_triton import check_launchable


@triton.jit
def _decode_kernel(q, k, v, o, slope, state, slot_ids,
                   H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                   BK: tl.constexpr, BV: tl.constexpr):
    """S = exp(-s) S + k^T v ; o = q S, for state[slot_ids[b], h, :, block]."""
    i_bh, i_v = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    slot = tl.load(slot_ids + i_b).to(tl.int64)
    decay = tl.exp(-tl.load(slope + i_h).to(tl.float32))
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    b_q = tl.load(q + i_bh * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_k = tl.load(k + i_bh * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_v = tl.load(v + i_bh * V + o_v, mask=m_v, other=0.0).to(tl.float32)
    s_ptr = state + (slot * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
    m_s = m_k[:, None] & m_v[None, :]
    b_s = tl.load(s_ptr, mask=m_s, other=0.0) * decay + b_k[:, None] * b_v[None, :]
    tl.store(s_ptr, b_s, mask=m_s)
    b_o = tl.sum(b_q[:, None] * b_s, axis=0)
    tl.store(o + i_bh * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)


def decode_config(B: int, H: int, K: int, V: int) -> tuple[tuple, dict, dict]:
    """Grid, constexprs and compile options of one `_decode_kernel` launch: narrow value blocks
    at small batch (more programs to fill the SMs), wide ones at large batch."""
    bk = triton.next_power_of_2(K)
    bv = min(triton.next_power_of_2(V), 16 if B * H < 64 else 32 if B * H < 512 else 64)
    return (B * H, triton.cdiv(V, bv)), dict(H=H, K=K, V=V, BK=bk, BV=bv), \
        dict(num_warps=4 if bk * bv >= 4096 else 2)


def triton_decode(q: Tensor, k: Tensor, v: Tensor, slope: Tensor, state: Tensor,
                  slot_ids: Optional[Tensor] = None) -> Tensor:
    """Same contract as `lightning_attn_decode`; state must be a contiguous fp32 tensor."""
    check_launchable(q)
    if state.dtype != torch.float32 or not state.is_contiguous():
        raise ValueError("the decode state must be a contiguous fp32 tensor (updated in place)")
    B, H, K = q.shape
    V = v.shape[-1]
    if slot_ids is None:
        slot_ids = torch.arange(B, device=q.device)
    slot_ids = slot_ids.to(device=q.device, dtype=torch.int32).contiguous()
    q, k, v = (x.contiguous() for x in (q, k.to(q.dtype), v.to(q.dtype)))
    o = torch.empty_like(v)
    grid, constexprs, options = decode_config(B, H, K, V)
    _decode_kernel[grid](q, k, v, o, slope.float().contiguous(), state, slot_ids, **constexprs,
                         **options)
    return o
