"""The lightning attention recurrence token by token: the reference every other path must match.

    S_t = exp(-s) S_{t-1} + k_t^T v_t,    o_t = q_t S_t,    S_{-1} = initial state (or 0)
"""
from typing import Optional

import torch
from torch import Tensor

from .inputs import compute_dtype, over_sequences, zero_state


def recurrent_step(q: Tensor, k: Tensor, v: Tensor, decay: Tensor, state: Tensor
                   ) -> tuple[Tensor, Tensor]:
    """One token for every (row, head): q, k [B,H,D], v [B,H,Dv], decay [H] = exp(-s),
    state [B,H,D,Dv] -> (o [B,H,Dv], new state). Out of place, so autograd can run through it."""
    state = decay[:, None, None] * state + k.unsqueeze(-1) * v.unsqueeze(-2)
    return torch.einsum("bhd,bhde->bhe", q, state), state


def _naive_one(q: Tensor, k: Tensor, v: Tensor, slope: Tensor, initial_state: Optional[Tensor],
               output_final_state: bool) -> tuple[Tensor, Optional[Tensor]]:
    dt = compute_dtype(q)
    state = zero_state(q, v, dt) if initial_state is None else initial_state.to(dt)
    decay = torch.exp(-slope.to(dt))
    q, k, v = (x.to(dt) for x in (q, k, v))
    outs = []
    for t in range(q.shape[1]):
        o, state = recurrent_step(q[:, t], k[:, t], v[:, t], decay, state)
        outs.append(o)
    o = torch.stack(outs, dim=1) if outs else v.new_zeros(v.shape, dtype=dt)
    return o, (state if output_final_state else None)


def naive_lightning_attn(q: Tensor, k: Tensor, v: Tensor, slope: Tensor,
                         initial_state: Optional[Tensor] = None, output_final_state: bool = False,
                         cu_seqlens: Optional[Tensor] = None) -> tuple[Tensor, Optional[Tensor]]:
    """Same contract as `lightning_attn`; output in q's dtype except that the state is not cast."""
    return over_sequences(_naive_one, q, k, v, slope, initial_state, output_final_state, cu_seqlens)


def naive_decode(q: Tensor, k: Tensor, v: Tensor, slope: Tensor, state: Tensor,
                 slot_ids: Optional[Tensor] = None) -> Tensor:
    """One decode step for B rows, reading and writing state[slot_ids] in place (PyTorch path)."""
    B = q.shape[0]
    if slot_ids is None:
        slot_ids = torch.arange(B, device=q.device)
    slot_ids = slot_ids.to(device=state.device, dtype=torch.long)
    dt = torch.promote_types(compute_dtype(q), state.dtype)
    s = state.index_select(0, slot_ids).to(dt)
    o, s = recurrent_step(q.to(dt), k.to(dt), v.to(dt), torch.exp(-slope.to(dt)), s)
    state.index_copy_(0, slot_ids, s.to(state.dtype))
    return o.to(q.dtype)
