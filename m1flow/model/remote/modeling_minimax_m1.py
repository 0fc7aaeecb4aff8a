"""MiniMax-M1 (lightning + softmax attention, MoE) for `trust_remote_code=True`, copied into every
hybrid policy directory by m1flow.checkpoint so the policy opens in plain transformers.

Self-contained: torch and transformers only, never m1flow. The same computation as m1flow.model
(tests/model/test_remote_code.py holds the two to the same logits): post-norm residuals scaled by
alpha/beta, lightning attention with per-head decay in fp32, softmax attention with RoPE on the
first `rotary_dim` dims of each head, a top-k MoE with an fp32 router, an fp32 LM head. Parameter
names are the released checkpoint's. Forward only (no KV cache): `generate` recomputes the prefix
each step, so it is for checking a policy, not for serving one.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_minimax_m1 import MiniMaxM1Config

LIGHTNING_NORM_EPS = 1e-6
BLOCK = 64


def _fp32(x):
    return x.to(torch.promote_types(x.dtype, torch.float32))


def build_slopes(num_heads, layer_idx, num_layers):
    """The release's decay rates: ALiBi-style per head, scaled down with depth."""
    def power_of_two(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    c = 2 ** int(math.floor(math.log2(num_heads)))
    base = power_of_two(num_heads) if c == num_heads else power_of_two(c) + power_of_two(2 * c)[0::2][: num_heads - c]
    scale = 1.0 - layer_idx / max(num_layers - 1, 1) + 1e-5
    return torch.tensor([s * scale for s in base], dtype=torch.float64).float()


def lightning_attention(q, k, v, slope):
    """o_t = q_t S_t, S_t = exp(-s) S_{t-1} + k_t^T v_t, block by block; q, k, v [B, H, T, d]."""
    dt = torch.promote_types(q.dtype, torch.float32)
    q, k, v = q.to(dt), k.to(dt), v.to(dt)
    s = slope.to(dt)[None, :, None, None]
    b, h, t, d = q.shape
    state = q.new_zeros(b, h, d, v.shape[-1])
    out = []
    for start in range(0, t, BLOCK):
        qb, kb, vb = q[:, :, start:start + BLOCK], k[:, :, start:start + BLOCK], v[:, :, start:start + BLOCK]
        n = qb.shape[2]
        i = torch.arange(n, device=q.device, dtype=dt)
        gap = i[:, None] - i[None, :]
        within = torch.where(gap >= 0, torch.exp(-s * gap.clamp(min=0)), torch.zeros((), dtype=dt, device=q.device))
        o = (qb @ kb.transpose(-1, -2) * within) @ vb + (qb * torch.exp(-s * (i[:, None] + 1))) @ state
        state = torch.exp(-s * n) * state + (kb * torch.exp(-s * (n - 1 - i)[:, None])).transpose(-1, -2) @ vb
        out.append(o)
    return torch.cat(out, dim=2)


class MiniMaxM1RMSNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return self.weight * F.rms_norm(_fp32(x), (x.shape[-1],), eps=self.eps).to(x.dtype)


class MiniMaxM1LightningAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        inner = self.num_heads * self.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * inner, bias=False)
        self.output_gate = nn.Linear(config.hidden_size, inner, bias=False)
        self.norm = MiniMaxM1RMSNorm(inner, LIGHTNING_NORM_EPS)
        self.out_proj = nn.Linear(inner, config.hidden_size, bias=False)
        with torch.device("cpu"):  # not a buffer: real values even when built on meta, never cast to bf16
            self.slope = build_slopes(self.num_heads, layer_idx, config.num_hidden_layers)

    def forward(self, x, mask, positions):
        b, t, _ = x.shape
        qkv = F.silu(self.qkv_proj(x))
        if mask is not None:  # padding contributes nothing to the state
            qkv = qkv * mask[:, :, None].to(qkv.dtype)
        q, k, v = qkv.view(b, t, self.num_heads, 3 * self.head_dim).split(self.head_dim, dim=-1)
        o = lightning_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), self.slope.to(x.device))
        y = self.norm(o.transpose(1, 2).reshape(b, t, -1).to(x.dtype))
        return self.out_proj(torch.sigmoid(self.output_gate(x)) * y)


class MiniMaxM1Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim, self.rotary_dim, self.rope_theta = config.head_dim, config.rotary_dim, config.rope_theta
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)

    def rope(self, x, positions):
        r = self.rotary_dim
        inv_freq = 1.0 / self.rope_theta ** (torch.arange(0, r, 2, device=x.device, dtype=torch.float32) / r)
        freqs = positions.float()[..., None] * inv_freq
        angles = torch.cat((freqs, freqs), dim=-1)[:, :, None, :]  # [B, T, 1, r]
        rot, rest = _fp32(x[..., :r]), x[..., r:]
        x1, x2 = rot.chunk(2, dim=-1)
        rotated = rot * angles.cos() + torch.cat((-x2, x1), dim=-1) * angles.sin()
        return torch.cat((rotated.to(x.dtype), rest), dim=-1)

    def forward(self, x, mask, positions):
        b, t, _ = x.shape
        q = self.rope(self.q_proj(x).view(b, t, self.num_heads, self.head_dim), positions).transpose(1, 2)
        k = self.rope(self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim), positions).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        keep = causal if mask is None else causal[None, None] & mask[:, None, None, :].bool()
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=self.head_dim ** -0.5, enable_gqa=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class MiniMaxM1Expert(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.w1 = nn.Linear(hidden, intermediate, bias=False)
        self.w2 = nn.Linear(intermediate, hidden, bias=False)
        self.w3 = nn.Linear(hidden, intermediate, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MiniMaxM1SparseMoE(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.gate = nn.Linear(config.hidden_size, config.num_local_experts, bias=False)
        self.experts = nn.ModuleList(MiniMaxM1Expert(config.hidden_size, config.intermediate_size)
                                     for _ in range(config.num_local_experts))

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        probs = torch.softmax(F.linear(_fp32(flat), _fp32(self.gate.weight)), dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = flat.new_zeros(flat.shape, dtype=weights.dtype)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == e)
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows]).to(out.dtype) * weights[rows, slot, None])
        return out.to(x.dtype).view_as(x)


class MiniMaxM1DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        softmax = config.attn_type_list[layer_idx] == 1
        self.postnorm = config.postnorm
        if softmax:
            self.self_attn = MiniMaxM1Attention(config)
            self.attn_alpha, self.attn_beta = config.layernorm_full_attention_alpha, config.layernorm_full_attention_beta
        else:
            self.self_attn = MiniMaxM1LightningAttention(config, layer_idx)
            self.attn_alpha = config.layernorm_linear_attention_alpha
            self.attn_beta = config.layernorm_linear_attention_beta
        self.mlp_alpha, self.mlp_beta = config.layernorm_mlp_alpha, config.layernorm_mlp_beta
        self.input_layernorm = MiniMaxM1RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = MiniMaxM1RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.block_sparse_moe = MiniMaxM1SparseMoE(config)

    def forward(self, x, mask, positions):
        h = self.input_layernorm(x)
        x = (h if self.postnorm else x) * self.attn_alpha + self.self_attn(h, mask, positions) * self.attn_beta
        h = self.post_attention_layernorm(x)
        return (h if self.postnorm else x) * self.mlp_alpha + self.block_sparse_moe(h) * self.mlp_beta


class MiniMaxM1PreTrainedModel(PreTrainedModel):
    config_class = MiniMaxM1Config
    base_model_prefix = "model"
    _no_split_modules = ["MiniMaxM1DecoderLayer"]

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
        elif isinstance(module, MiniMaxM1RMSNorm):
            nn.init.ones_(module.weight)


class MiniMaxM1Model(MiniMaxM1PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(MiniMaxM1DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = MiniMaxM1RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def forward(self, input_ids, attention_mask=None):
        if attention_mask is not None and bool(attention_mask.all()):
            attention_mask = None
        if attention_mask is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None].expand(input_ids.shape[0], -1)
        else:  # left padding: positions count real tokens only
            positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, attention_mask, positions)
        return self.norm(x)


class MiniMaxM1ForCausalLM(MiniMaxM1PreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.model = MiniMaxM1Model(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        hidden = self.model(input_ids, attention_mask)
        logits = F.linear(_fp32(hidden), _fp32(self.lm_head.weight))  # the fp32 head (float64 for float64)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}  # no cache: the whole prefix
