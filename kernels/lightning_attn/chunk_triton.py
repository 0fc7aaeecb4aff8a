"""Chunked lightning attention prefill in Triton: one kernel, one launch forward, three backward.

One program owns one (sequence, head, block of BV value columns). It walks the sequence chunk by
chunk keeping its [D, BV] fp32 slice of the state in registers, so the state never touches HBM
between chunks; splitting the value dimension multiplies the programs to fill the SMs at batch 1.
Packed sequences (cu_seqlens) are native: each program reads its bounds.

Backward, three launches and no partial sums: dq is the forward kernel run on (do, v, k) from the
transposed initial state; dv and the initial-state gradient come from a reverse walk over the
chunks carrying dS (the gradient of the state) on chip; dk is the same reverse walk run on
(do, v, q) carrying dS^T.

Dots run on the input dtype (bf16/fp16 tensor cores, fp32 accumulate) or, for fp32 inputs, as
IEEE fp32 (input_precision="ieee"; Triton would otherwise use TF32). The Triton interpreter
(TRITON_INTERPRET=1) computes half-precision dots wrongly on CPU, so there every dot runs in fp32.

Sizing for sm_90 (ptxas on the compiled kernel; no GPU measured it yet): at a 64-token chunk,
D 128 and 8 warps a program takes about 255 registers a thread with wgmma dots and no spills
up to BV 32 (about 100 bytes at BV 64, forward), so an SM runs one program at a time and
`value_block` picks the split that needs the fewest waves. tests/kernels/la_compile_sm90.py
compiles the kernels exactly as launched.
"""
import os
from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

from .inputs import check_prefill

CHUNK = 64


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def dot_config(dtype: torch.dtype) -> tuple[tl.dtype, str]:
    """Operand dtype and precision of every tl.dot for inputs of this dtype."""
    if dtype == torch.float32 or interpreting():
        return tl.float32, "ieee"
    return {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[dtype], "tf32"


def value_block(programs: int, dv: int, device: torch.device) -> int:
    """Value-block width: fewest waves, then the narrowest block. A program (BT 64, D 128, 8 warps)
    takes the whole register file of an SM, so each wave is one program per SM; every value block
    recomputes Q K^T, and a narrower one shortens the serial chain only within a wave."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" \
        else 132
    widths = [bv for bv in (16, 32, 64) if bv <= max(16, triton.next_power_of_2(dv))]
    return min(widths, key=lambda bv: (triton.cdiv(programs * triton.cdiv(dv, bv), sms), bv))


def walk_config(N: int, H: int, K: int, V: int, dtype: torch.dtype, device: torch.device,
                use_state_in: bool, store_state: bool, reverse: bool) -> tuple[tuple, dict, dict]:
    """Grid, constexprs and compile options of one `_walk_kernel` launch (also used to compile
    the kernel for a GPU that is not here, in the tests)."""
    bk, bv = max(16, triton.next_power_of_2(K)), value_block(N * H, V, device)
    dot_dt, prec = dot_config(dtype)
    constexprs = dict(H=H, K=K, V=V, BT=CHUNK, BK=bk, BV=bv, USE_STATE_IN=use_state_in,
                      STORE_STATE=store_state, REVERSE=reverse, DOT_DT=dot_dt, PREC=prec)
    return (N * H, triton.cdiv(V, bv)), constexprs, dict(num_warps=8 if bk >= 128 else 4,
                                                         num_stages=2)


def check_launchable(x: Tensor) -> None:
    if not x.is_cuda and not interpreting():
        raise RuntimeError("Triton lightning attention needs CUDA tensors, or TRITON_INTERPRET=1 "
                           "set before kernels.lightning_attn's Triton modules are imported")


@triton.jit
def _mm(a, b, DOT_DT: tl.constexpr, PREC: tl.constexpr):
    return tl.dot(a.to(DOT_DT), b.to(DOT_DT), input_precision=PREC)


@triton.jit
def _chunk_decays(s, m, o_t):
    """Intra-chunk mask exp(-s (i-j)) for i >= j, query exp(-s (i+1)), key exp(-s (m-1-j)) and
    whole-chunk exp(-s m) decays; every exponent is <= 0."""
    diff = o_t[:, None] - o_t[None, :]
    mask = tl.where(diff >= 0, tl.exp(-s * tl.maximum(diff, 0).to(tl.float32)), 0.0)
    q_decay = tl.exp(-s * (o_t + 1).to(tl.float32))
    k_decay = tl.exp(-s * tl.maximum(m - 1 - o_t, 0).to(tl.float32))
    return mask, q_decay, k_decay, tl.exp(-s * m.to(tl.float32))


@triton.jit
def _state_tile(ptr, i_n, i_h, i_v, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                BK: tl.constexpr, BV: tl.constexpr):
    """Pointers and mask of this program's [BK, BV] slice of a [N, H, K, V] state."""
    rows, cols = tl.arange(0, BK), i_v * BV + tl.arange(0, BV)
    base = ptr + (i_n * H + i_h).to(tl.int64) * K * V
    return base + rows[:, None] * V + cols[None, :], (rows < K)[:, None] & (cols < V)[None, :]


@triton.jit
def _token_tile(ptr, bos, T, i_h, i_c, col, H: tl.constexpr, D: tl.constexpr,
                BT: tl.constexpr, BD: tl.constexpr):
    """Pointers and mask of chunk i_c (rows) and columns col.. of one head of a packed
    [tokens, H, D] tensor, for the sequence starting at token bos. The int64 base moves with the
    chunk, so the per-element offsets stay int32 at any length."""
    rows, cols = tl.arange(0, BT), col + tl.arange(0, BD)
    base = ptr + ((bos + i_c * BT) * H + i_h) * D
    mask = (i_c * BT + rows < T)[:, None] & (cols < D)[None, :]
    return base + rows[:, None] * (H * D) + cols[None, :], mask


@triton.jit
def _load_tile(ptr, bos, T, i_h, i_c, col, H: tl.constexpr, D: tl.constexpr,
               BT: tl.constexpr, BD: tl.constexpr):
    ptrs, valid = _token_tile(ptr, bos, T, i_h, i_c, col, H, D, BT, BD)
    return tl.load(ptrs, mask=valid, other=0.0)


@triton.jit
def _walk_kernel(q, k, v, out, slope, state_in, state_out, cu_seqlens,
                 H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                 BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                 USE_STATE_IN: tl.constexpr, STORE_STATE: tl.constexpr, REVERSE: tl.constexpr,
                 DOT_DT: tl.constexpr, PREC: tl.constexpr):
    """Forward walk, first chunk to last, carrying the state S:
        out_i = sum_{j<=i} exp(-s (i-j)) (q_i . k_j) v_j + exp(-s (i+1)) q_i S
        S <- exp(-s m) S + (K * exp(-s (m-1-j)))^T V
    Reverse walk (backward pass, v = dO), last chunk to first, carrying R = dL/dS at the end of
    the chunk; it is the forward walk with q and k swapped and time mirrored:
        out_j = sum_{i>=j} exp(-s (i-j)) (k_j . q_i) do_i + exp(-s (m-1-j)) k_j R     (= dv_j)
        R <- exp(-s m) R + (Q * exp(-s (i+1)))^T dO;   after the first chunk R = dL/dS0."""
    i_nh, i_v = tl.program_id(0), tl.program_id(1)
    i_n, i_h = i_nh // H, i_nh % H
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    T = (tl.load(cu_seqlens + i_n + 1) - tl.load(cu_seqlens + i_n)).to(tl.int32)
    s = tl.load(slope + i_h).to(tl.float32)
    b_s = tl.zeros([BK, BV], dtype=tl.float32)
    if USE_STATE_IN:
        s_ptrs, s_valid = _state_tile(state_in, i_n, i_h, i_v, H, K, V, BK, BV)
        b_s += tl.load(s_ptrs, mask=s_valid, other=0.0).to(tl.float32)

    n_chunks = tl.cdiv(T, BT)
    for j in range(0, n_chunks):
        if REVERSE:
            i_c = n_chunks - 1 - j
        else:
            i_c = j
        b_q = _load_tile(q, bos, T, i_h, i_c, 0, H, K, BT, BK)
        b_k = _load_tile(k, bos, T, i_h, i_c, 0, H, K, BT, BK)
        b_v = _load_tile(v, bos, T, i_h, i_c, i_v * BV, H, V, BT, BV)
        b_m, q_decay, k_decay, g = _chunk_decays(s, tl.minimum(T - i_c * BT, BT),
                                                  tl.arange(0, BT))
        if REVERSE:
            b_x, b_y, x_decay, y_decay = b_k, b_q, k_decay, q_decay
            b_m = tl.trans(b_m)
        else:
            b_x, b_y, x_decay, y_decay = b_q, b_k, q_decay, k_decay

        # Decays scale the narrow [BT, BV] side (diag(d) Q S = diag(d) (Q S), (d K)^T V =
        # K^T (d V)): an fp32 copy of a [BT, BK] tile would spill registers.
        b_o = _mm(_mm(b_x, tl.trans(b_y), DOT_DT, PREC) * b_m, b_v, DOT_DT, PREC)
        b_o += _mm(b_x, b_s, DOT_DT, PREC) * x_decay[:, None]
        b_s = b_s * g + _mm(tl.trans(b_y), b_v.to(tl.float32) * y_decay[:, None], DOT_DT, PREC)
        o_ptrs, o_valid = _token_tile(out, bos, T, i_h, i_c, i_v * BV, H, V, BT, BV)
        tl.store(o_ptrs, b_o.to(out.dtype.element_ty), mask=o_valid)
    if STORE_STATE:
        s_ptrs, s_valid = _state_tile(state_out, i_n, i_h, i_v, H, K, V, BK, BV)
        tl.store(s_ptrs, b_s, mask=s_valid)


def _walk(q: Tensor, k: Tensor, v: Tensor, slope: Tensor, state_in: Optional[Tensor],
          cu_seqlens: Tensor, want_state: bool, reverse: bool = False
          ) -> tuple[Tensor, Optional[Tensor]]:
    """Run the forward or the reverse walk on packed q, k [1, T, H, K], v [1, T, H, V] from
    state_in [N, H, K, V] (or zeros); returns the [1, T, H, V] output and the state at the end."""
    H, K, V, N = q.shape[2], q.shape[3], v.shape[-1], cu_seqlens.numel() - 1
    out = torch.empty_like(v, dtype=q.dtype)
    state_out = q.new_empty(N, H, K, V, dtype=torch.float32) if want_state else None
    grid, constexprs, options = walk_config(N, H, K, V, q.dtype, q.device, state_in is not None,
                                            want_state, reverse)
    _walk_kernel[grid](q, k, v, out, slope, state_in, state_out, cu_seqlens, **constexprs,
                       **options)
    return out, state_out


class LightningAttnFunction(torch.autograd.Function):
    """Packed inputs [1, T, H, D] with cu_seqlens; gradients for q, k, v and the initial state."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, slope: Tensor, s0: Optional[Tensor],
                cu_seqlens: Tensor, want_state: bool):
        o, s_out = _walk(q, k, v, slope, s0, cu_seqlens, want_state)
        ctx.save_for_backward(q, k, v, slope, s0, cu_seqlens)
        ctx.s0_dtype = None if s0 is None else s0.dtype
        return o, s_out

    @staticmethod
    def backward(ctx, do: Tensor, ds_final: Optional[Tensor]):
        q, k, v, slope, s0, cu_seqlens = ctx.saved_tensors
        do = do.to(q.dtype).contiguous()
        ds_final = None if ds_final is None else ds_final.float().contiguous()
        s0_t = None if s0 is None else s0.transpose(-1, -2).contiguous()
        ds_final_t = None if ds_final is None else ds_final.transpose(-1, -2).contiguous()
        dq, _ = _walk(do, v, k, slope, s0_t, cu_seqlens, False)
        dk, _ = _walk(do, v, q, slope, ds_final_t, cu_seqlens, False, reverse=True)
        dv, ds0 = _walk(q, k, do, slope, ds_final, cu_seqlens, ctx.needs_input_grad[4],
                        reverse=True)
        ds0 = None if ds0 is None else ds0.to(ctx.s0_dtype)
        return dq, dk, dv, None, ds0, None, None


def triton_lightning_attn(q: Tensor, k: Tensor, v: Tensor, slope: Tensor,
                          initial_state: Optional[Tensor] = None, output_final_state: bool = False,
                          cu_seqlens: Optional[Tensor] = None) -> tuple[Tensor, Optional[Tensor]]:
    """Same contract as `lightning_attn`, for CUDA tensors (or CPU under the interpreter)."""
    check_prefill(q, k, v, slope, initial_state, cu_seqlens)
    check_launchable(q)
    if q.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"the Triton path takes fp32, bf16 or fp16 inputs, not {q.dtype}")
    B, T, H, _ = q.shape
    if cu_seqlens is None:
        cu_seqlens = torch.arange(B + 1, device=q.device) * T
    cu_seqlens = cu_seqlens.to(device=q.device, dtype=torch.int32).contiguous()
    packed = [x.to(q.dtype).reshape(1, B * T, H, x.shape[-1]).contiguous() for x in (q, k, v)]
    s0 = None if initial_state is None else initial_state.contiguous()
    o, state = LightningAttnFunction.apply(*packed, slope.float().contiguous(), s0, cu_seqlens,
                                           output_final_state)
    return o.reshape(B, T, H, -1), state
