"""Checks, compute dtype and per-sequence splitting shared by every lightning attention backend."""
from typing import Callable, Optional

import torch
from torch import Tensor

# fn(q, k, v, slope, initial_state, output_final_state) -> (o, final_state) on one padded batch.
SequenceFn = Callable[[Tensor, Tensor, Tensor, Tensor, Optional[Tensor], bool],
                      tuple[Tensor, Optional[Tensor]]]


def compute_dtype(x: Tensor) -> torch.dtype:
    """fp32 for half inputs (the state must stay fp32); float64 stays float64 for references."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def check_prefill(q: Tensor, k: Tensor, v: Tensor, slope: Tensor, initial_state: Optional[Tensor],
                  cu_seqlens: Optional[Tensor]) -> int:
    """Validate shapes and return N, the number of sequences."""
    if q.dim() != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"expected q, k [B,T,H,D] and v [B,T,H,Dv], got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    B, T, H, D = q.shape
    if slope.shape != (H,):
        raise ValueError(f"slope must be [H={H}], got {tuple(slope.shape)}")
    n = B
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError("cu_seqlens needs packed input with B == 1")
        if cu_seqlens.dim() != 1 or int(cu_seqlens[0]) != 0 or int(cu_seqlens[-1]) != T:
            raise ValueError(f"cu_seqlens must run from 0 to T={T}")
        n = cu_seqlens.numel() - 1
    if initial_state is not None and initial_state.shape != (n, H, D, v.shape[-1]):
        raise ValueError(f"initial_state must be [{n},{H},{D},{v.shape[-1]}], "
                         f"got {tuple(initial_state.shape)}")
    return n


def over_sequences(fn: SequenceFn, q: Tensor, k: Tensor, v: Tensor, slope: Tensor,
                   initial_state: Optional[Tensor], output_final_state: bool,
                   cu_seqlens: Optional[Tensor]) -> tuple[Tensor, Optional[Tensor]]:
    """Validate, then run a padded-batch backend on the batch or once per packed sequence (the
    PyTorch paths have no varlen kernel); the output comes back in q's dtype."""
    check_prefill(q, k, v, slope, initial_state, cu_seqlens)
    if cu_seqlens is None:
        o, final = fn(q, k, v, slope, initial_state, output_final_state)
        return o.to(q.dtype), final
    bounds = cu_seqlens.tolist()
    outs, states = [], []
    for n, (bos, eos) in enumerate(zip(bounds[:-1], bounds[1:])):
        s0 = None if initial_state is None else initial_state[n:n + 1]
        o, s = fn(q[:, bos:eos], k[:, bos:eos], v[:, bos:eos], slope, s0, output_final_state)
        outs.append(o)
        states.append(s)
    final = torch.cat(states) if output_final_state else None
    return torch.cat(outs, dim=1).to(q.dtype), final


def zero_state(q: Tensor, v: Tensor, dtype: torch.dtype) -> Tensor:
    B, _, H, D = q.shape
    return torch.zeros(B, H, D, v.shape[-1], dtype=dtype, device=q.device)
