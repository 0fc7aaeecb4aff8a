"""Chunked lightning attention in PyTorch: the CPU path, differentiable through autograd.

Inside a chunk of m tokens (positions j = 0..m-1) with the state S carried from the chunks before:
    O = ((Q K^T) * M) V + (Q * exp(-s (j+1))) S,   M[i,j] = exp(-s (i-j)) for i >= j, else 0
    S <- exp(-s m) S + (K * exp(-s (m-1-j)))^T V
Every decay is exp of a non-positive number, so nothing overflows whatever the slope.
"""
from typing import Optional

import torch
from torch import Tensor

from .inputs import compute_dtype, over_sequences, zero_state

CHUNK_SIZE = 64
CHUNKS_PER_BLOCK = 16  # chunks handled by one batched step; bounds the stacked states' memory


def chunk_decays(s: Tensor, m: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Decays of an m-token chunk for slopes s [H]: intra mask [H,m,m], query [H,m], key [H,m]
    and whole-chunk [H] factors."""
    pos = torch.arange(m, dtype=s.dtype, device=s.device)
    diff = pos[:, None] - pos[None, :]
    mask = torch.exp(-s[:, None, None] * diff.clamp(min=0)) * (diff >= 0)
    q_decay = torch.exp(-s[:, None] * (pos + 1))
    k_decay = torch.exp(-s[:, None] * (m - 1 - pos))
    return mask, q_decay, k_decay, torch.exp(-s * m)


def _chunks(q: Tensor, k: Tensor, v: Tensor, s: Tensor, state: Tensor, m: int
            ) -> tuple[Tensor, Tensor]:
    """q, k [B,H,n*m,D], v [B,H,n*m,Dv]: n chunks of m tokens, intra-chunk work batched over n."""
    B, H, T, D = q.shape
    n = T // m
    qc, kc, vc = (x.reshape(B, H, n, m, x.shape[-1]) for x in (q, k, v))
    mask, q_decay, k_decay, g = chunk_decays(s, m)
    o = ((qc @ kc.transpose(-1, -2)) * mask[:, None]) @ vc
    kv = (kc * k_decay[:, None, :, None]).transpose(-1, -2) @ vc  # [B,H,n,D,Dv]
    starts = []
    for c in range(n):
        starts.append(state)
        state = g[:, None, None] * state + kv[:, :, c]
    o = o + (qc * q_decay[:, None, :, None]) @ torch.stack(starts, dim=2)
    return o.reshape(B, H, T, -1), state


def _chunk_one(q: Tensor, k: Tensor, v: Tensor, slope: Tensor, initial_state: Optional[Tensor],
               output_final_state: bool, chunk_size: int = CHUNK_SIZE
               ) -> tuple[Tensor, Optional[Tensor]]:
    dt = compute_dtype(q)
    state = zero_state(q, v, dt) if initial_state is None else initial_state.to(dt)
    s = slope.to(dt)
    q, k, v = (x.to(dt).transpose(1, 2) for x in (q, k, v))  # [B,H,T,D]
    T = q.shape[2]
    block = chunk_size * CHUNKS_PER_BLOCK
    outs = []
    for start in range(0, T, block):
        end = min(start + block, T)
        full = start + (end - start) // chunk_size * chunk_size
        for a, b, m in ((start, full, chunk_size), (full, end, end - full)):
            if b > a:
                o, state = _chunks(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], s, state, m)
                outs.append(o)
    o = torch.cat(outs, dim=2) if outs else v.new_zeros(v.shape, dtype=dt)
    return o.transpose(1, 2), (state if output_final_state else None)


def chunk_lightning_attn(q: Tensor, k: Tensor, v: Tensor, slope: Tensor,
                         initial_state: Optional[Tensor] = None, output_final_state: bool = False,
                         cu_seqlens: Optional[Tensor] = None) -> tuple[Tensor, Optional[Tensor]]:
    """Same contract as `lightning_attn`; packed sequences run one after another."""
    return over_sequences(_chunk_one, q, k, v, slope, initial_state, output_final_state, cu_seqlens)
