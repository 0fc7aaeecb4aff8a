"""Each layer against its definition, written here independently (quadratic forms in float64)."""

import torch
import torch.nn.functional as F

from m1flow.model import MiniMaxM1Config
from m1flow.model.layers import DecoderLayer, LightningAttention, SoftmaxAttention, SparseMoE

CFG = MiniMaxM1Config.tiny(vocab_size=64)


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def test_lightning_layer_matches_definition():
    torch.manual_seed(0)
    layer_idx, T = 1, 11
    layer = LightningAttention(CFG, layer_idx).double()
    with torch.no_grad():
        layer.norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, T, CFG.hidden_size, dtype=torch.float64)
    H, D, L = CFG.num_attention_heads, CFG.head_dim, CFG.num_hidden_layers
    s = torch.tensor([2 ** (-8 * (h + 1) / H) * (1 - layer_idx / (L - 1) + 1e-5) for h in range(H)], dtype=torch.float64)
    qkv = F.silu(x @ layer.qkv_proj.weight.T).view(2, T, H, 3 * D)
    q, k, v = qkv[..., :D], qkv[..., D : 2 * D], qkv[..., 2 * D :]
    t = torch.arange(T, dtype=torch.float64)
    gap = t[:, None] - t[None, :]
    decay = torch.where(gap >= 0, torch.exp(-s[:, None, None] * gap.clamp(min=0)), torch.zeros(()))
    o = torch.einsum("bhtp,bphd->bthd", torch.einsum("bthd,bphd->bhtp", q, k) * decay, v).reshape(2, T, H * D)
    o = rms(o, 1e-6) * layer.norm.weight
    expected = (torch.sigmoid(x @ layer.output_gate.weight.T) * o) @ layer.out_proj.weight.T
    torch.testing.assert_close(layer(x), expected, rtol=1e-6, atol=1e-8)


def test_softmax_layer_matches_definition():
    torch.manual_seed(0)
    T, offset = 7, 5
    layer = SoftmaxAttention(CFG).double()
    x = torch.randn(2, T, CFG.hidden_size, dtype=torch.float64)
    H, Hkv, D, r = CFG.num_attention_heads, CFG.num_key_value_heads, CFG.head_dim, CFG.rotary_dim
    q = (x @ layer.q_proj.weight.T).view(2, T, H, D)
    k = (x @ layer.k_proj.weight.T).view(2, T, Hkv, D)
    v = (x @ layer.v_proj.weight.T).view(2, T, Hkv, D)
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    freq = CFG.rope_theta ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
    turn = torch.polar(torch.ones(T, r // 2, dtype=torch.float64), pos[:, None] * freq)[None, :, None]

    def rotate(z):  # pairs (i, i + r/2) rotate as complex numbers; dims past r pass through
        c = torch.complex(z[..., : r // 2], z[..., r // 2 : r]) * turn
        return torch.cat((c.real, c.imag, z[..., r:]), dim=-1)

    q, k = rotate(q), rotate(k)
    group = H // Hkv
    k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)  # query head h reads kv head h // group
    scores = torch.einsum("bthd,bphd->bhtp", q, k) / D**0.5
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.einsum("bhtp,bphd->bthd", scores.softmax(-1), v).reshape(2, T, H * D)
    expected = o @ layer.o_proj.weight.T
    torch.testing.assert_close(layer(x, offset=offset), expected, rtol=1e-5, atol=1e-6)


def test_moe_matches_dense_top2_mixture():
    torch.manual_seed(0)
    moe = SparseMoE(CFG).double()
    x = torch.randn(3, 5, CFG.hidden_size, dtype=torch.float64)
    probs = torch.softmax(x @ moe.gate.weight.T, dim=-1)
    top2 = probs.topk(2, dim=-1)
    mask = torch.zeros_like(probs).scatter(-1, top2.indices, 1.0)
    weights = probs * mask / (probs * mask).sum(-1, keepdim=True)
    dense = torch.stack(
        [(F.silu(x @ e.w1.weight.T) * (x @ e.w3.weight.T)) @ e.w2.weight.T for e in moe.experts], dim=-2
    )
    expected = (weights[..., None] * dense).sum(-2)
    torch.testing.assert_close(moe(x), expected, rtol=1e-6, atol=1e-8)


def test_postnorm_block_scales_the_normed_input():
    """With attention and experts silenced, a post-norm block is n2 * a_mlp with n2 = RMSNorm(n1 * a_attn)."""
    torch.manual_seed(0)
    layer = DecoderLayer(CFG, 0).double()
    with torch.no_grad():
        layer.self_attn.out_proj.weight.zero_()
        for expert in layer.block_sparse_moe.experts:
            expert.w2.weight.zero_()
        layer.input_layernorm.weight.uniform_(0.5, 1.5)
        layer.post_attention_layernorm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 4, CFG.hidden_size, dtype=torch.float64)
    n1 = rms(x, CFG.rms_norm_eps) * layer.input_layernorm.weight
    n2 = rms(n1 * CFG.layernorm_linear_attention_alpha, CFG.rms_norm_eps) * layer.post_attention_layernorm.weight
    torch.testing.assert_close(layer(x), n2 * CFG.layernorm_mlp_alpha)
    assert CFG.layernorm_mlp_alpha != 1.0
