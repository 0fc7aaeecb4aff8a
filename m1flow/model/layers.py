"""Building blocks of the hybrid model: RMSNorm, partial RoPE, the lightning and softmax attention
layers, the top-k MoE and the post-norm decoder block. Parameter names follow the released
checkpoint so its weights load without renaming."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kernels.lightning_attn import build_slopes, lightning_attn, lightning_attn_decode
from m1flow.model.cache import KVCache, LightningState
from m1flow.model.config import MiniMaxM1Config

LIGHTNING_NORM_EPS = 1e-6  # the released lightning layer builds its output norm with the default eps


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))


class RMSNorm(nn.Module):
    """RMSNorm computed in fp32, cast back, then scaled: the released order of operations."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * F.rms_norm(at_least_fp32(x), (x.shape[-1],), eps=self.eps).to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [..., T, rotary_dim] in fp32 for NeoX-style (rotate-half) rotary embeddings of
    positions [T] (shared by all rows) or [B, T] (one offset per row)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, rotary_dim, 2, device=positions.device, dtype=torch.float32) / rotary_dim)
    freqs = positions.float()[..., None] * inv_freq
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos(), angles.sin()


def apply_partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first rotary_dim dims of x [B, T, H, d] by cos, sin [T, r] or [B, T, r]."""
    r = cos.shape[-1]
    rot, rest = at_least_fp32(x[..., :r]), x[..., r:]
    x1, x2 = rot.chunk(2, dim=-1)
    cos, sin = (cos[None], sin[None]) if cos.dim() == 2 else (cos, sin)
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    rotated = rot * cos + torch.cat((-x2, x1), dim=-1) * sin
    return torch.cat((rotated.to(x.dtype), rest), dim=-1)


class LightningAttention(nn.Module):
    """Linear attention with per-head exponential decay (SiLU q/k/v, no scale, no RoPE), a full-width
    RMSNorm and a sigmoid output gate."""

    def __init__(self, config: MiniMaxM1Config, layer_idx: int) -> None:
        super().__init__()
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        inner = self.num_heads * self.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * inner, bias=False)
        self.output_gate = nn.Linear(config.hidden_size, inner, bias=False)
        self.norm = RMSNorm(inner, LIGHTNING_NORM_EPS)
        self.out_proj = nn.Linear(inner, config.hidden_size, bias=False)
        # A plain attribute, not a buffer: Module.to(bf16) must not round the decay rates. Built on the
        # CPU even inside a meta-device context so a model built on meta still has real slopes.
        with torch.device("cpu"):
            self._slope = build_slopes(self.num_heads, layer_idx, config.num_hidden_layers)

    def slope(self, device: torch.device) -> torch.Tensor:
        if self._slope.device != device:
            self._slope = self._slope.to(device)
        return self._slope

    def forward(self, x: torch.Tensor, cache: LightningState | None = None) -> torch.Tensor:
        b, t, _ = x.shape
        # The released layout is per head: [q_h | k_h | v_h] for h = 0..H-1.
        qkv = F.silu(self.qkv_proj(x)).view(b, t, self.num_heads, 3 * self.head_dim)
        q, k, v = qkv.split(self.head_dim, dim=-1)
        slope = self.slope(x.device)
        if cache is None:
            o, _ = lightning_attn(q, k, v, slope)
        elif t == 1:
            o = lightning_attn_decode(q[:, 0], k[:, 0], v[:, 0], slope, cache.state)[:, None]
        else:
            o, state = lightning_attn(q, k, v, slope, initial_state=cache.state, output_final_state=True)
            cache.state = state.contiguous()  # the decode step updates it in place
        y = self.norm(o.reshape(b, t, -1).to(x.dtype))
        return self.out_proj(torch.sigmoid(self.output_gate(x)) * y)


class SoftmaxAttention(nn.Module):
    """Causal GQA softmax attention with RoPE on the first rotary_dim dims of each head."""

    def __init__(self, config: MiniMaxM1Config) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim, self.rotary_dim, self.rope_theta = config.head_dim, config.rotary_dim, config.rope_theta
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, offset: int | torch.Tensor = 0) -> torch.Tensor:
        """offset: position of x's first token, one int or [B] (rows merged from several prompts)."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim)
        steps = torch.arange(t, device=x.device)
        positions = offset + steps if isinstance(offset, int) else offset.to(x.device)[:, None] + steps
        cos, sin = rope_cos_sin(positions, self.rotary_dim, self.rope_theta)
        q, k = apply_partial_rope(q, cos, sin), apply_partial_rope(k, cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if cache is not None:
            k, v = cache.append(k, v)
        past = k.shape[2] - t
        keys = cache.key_mask() if cache is not None else None  # merged rows: padding is never seen
        mask = keys
        if t > 1 and (past or keys is not None):  # causal, aligned to the last query: i sees keys <= past + i
            causal = torch.arange(past + t, device=x.device)[None, :] <= torch.arange(past, past + t, device=x.device)[:, None]
            mask = causal if keys is None else keys & causal
        o = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=(past == 0 and t > 1 and mask is None), scale=self.head_dim**-0.5, enable_gqa=True
        )
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class Expert(nn.Module):
    """SwiGLU feed-forward: w2(silu(w1 x) * w3 x)."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(hidden, intermediate, bias=False)
        self.w2 = nn.Linear(intermediate, hidden, bias=False)
        self.w3 = nn.Linear(hidden, intermediate, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoE(nn.Module):
    """Top-k mixture of experts; the router runs in fp32 and its top-k weights are renormalised.

    Routing replay (R3, m1flow.model.routing): `replay` [B, T', k] forces the experts of the tokens
    of inputs [B, T <= T', hidden] (-1: the router's own choice), weighted still by the router's
    probabilities of those experts renormalised, so the gate keeps its gradient; `record`, when a
    list, receives each forward's chosen experts [..., k]."""

    def __init__(self, config: MiniMaxM1Config) -> None:
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.gate = nn.Linear(config.hidden_size, config.num_local_experts, bias=False)
        self.experts = nn.ModuleList(
            Expert(config.hidden_size, config.intermediate_size) for _ in range(config.num_local_experts)
        )
        self.replay: torch.Tensor | None = None
        self.record: list[torch.Tensor] | None = None

    def router_logits(self, x: torch.Tensor) -> torch.Tensor:
        """fp32 router logits [N, experts] of x [N, hidden]."""
        return F.linear(at_least_fp32(x), at_least_fp32(self.gate.weight))

    def route(self, x: torch.Tensor, forced: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Weights and indices [N, k] of the experts chosen for each token of x [N, hidden]; where
        `forced` [N, k] is >= 0, those experts instead (replayed)."""
        probs = torch.softmax(self.router_logits(x), dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)
        if forced is not None:
            experts = torch.where(forced >= 0, forced.to(experts.dtype), experts)
            weights = probs.gather(-1, experts)
        return weights / weights.sum(dim=-1, keepdim=True), experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        forced = None if self.replay is None else self.replay[:, : x.shape[1]].reshape(-1, self.top_k)
        weights, chosen = self.route(flat, forced)
        if self.record is not None:
            self.record.append(chosen.view(*x.shape[:-1], self.top_k))
        out = flat.new_zeros(flat.shape, dtype=weights.dtype)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == e)
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows]).to(out.dtype) * weights[rows, slot, None])
        return out.to(x.dtype).view_as(x)


class DecoderLayer(nn.Module):
    """Attention then MoE, each as x = n * alpha + f(n) * beta with n = RMSNorm(x) (post-norm), or
    x = x * alpha + f(n) * beta when postnorm is off."""

    def __init__(self, config: MiniMaxM1Config, layer_idx: int) -> None:
        super().__init__()
        self.is_softmax = config.is_softmax(layer_idx)
        self.postnorm = config.postnorm
        if self.is_softmax:
            self.self_attn: nn.Module = SoftmaxAttention(config)
            self.attn_alpha, self.attn_beta = config.layernorm_full_attention_alpha, config.layernorm_full_attention_beta
        else:
            self.self_attn = LightningAttention(config, layer_idx)
            self.attn_alpha = config.layernorm_linear_attention_alpha
            self.attn_beta = config.layernorm_linear_attention_beta
        self.mlp_alpha, self.mlp_beta = config.layernorm_mlp_alpha, config.layernorm_mlp_beta
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.block_sparse_moe = SparseMoE(config)

    def _residual(self, x: torch.Tensor, normed: torch.Tensor, out: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
        return (normed if self.postnorm else x) * alpha + out * beta

    def forward(self, x: torch.Tensor, cache: LightningState | KVCache | None = None,
                offset: int | torch.Tensor = 0) -> torch.Tensor:
        h = self.input_layernorm(x)
        attn = self.self_attn(h, cache, offset) if self.is_softmax else self.self_attn(h, cache)
        x = self._residual(x, h, attn, self.attn_alpha, self.attn_beta)
        h = self.post_attention_layernorm(x)
        return self._residual(x, h, self.block_sparse_moe(h), self.mlp_alpha, self.mlp_beta)
