"""The hybrid model inside vLLM, as an out-of-tree model (vLLM's plugin mechanism).

vLLM 0.32 dropped MiniMax-M1 ("supported until v0.23.0") and its transformers backend refuses
linear attention, so `register()` puts this class under the architecture name the policy's
config.json carries. It is built the way vLLM's own hybrid linear-attention models are:
* each lightning layer is a `LinearAttention` (a vLLM state layer): its fp32 state [H, d, d] per
  request lives in vLLM's state cache, found through the layer's `state_indices_tensor`, zeroed
  when a request starts, advanced by a prefill (m1flow's chunked kernel, from the cached state)
  or a decode step (the recurrent kernel, in place);
* each softmax layer keeps its keys and values in vLLM's paged KV cache (`Attention`), with the
  partial RoPE of m1flow.model.layers;
* norms, the MoE and the lightning layer's projections are m1flow.model's own modules, so the
  parameter names are the checkpoint's and the arithmetic is the native model's; the LM head is
  computed in fp32.
Tensor parallelism is not implemented (tensor_parallel_size 1). The engine that uses it:
m1flow.engines.vllm_engine (enable_prefix_caching off for this model: vLLM can only cache
a state layer's prefix in its `align` mode).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from vllm.config import VllmConfig
from vllm.forward_context import get_forward_context
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.mamba.linear.base import LinearAttention
from vllm.model_executor.layers.mamba.linear import minimax_linear_attn  # noqa: F401  (registers torch.ops.vllm.linear_attention)
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateCopyFuncCalculator, MambaStateShapeCalculator
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.interfaces import HasInnerState, IsHybrid

from kernels.lightning_attn import lightning_attn, lightning_attn_decode
from m1flow.model.config import MiniMaxM1Config
from m1flow.model.layers import LightningAttention, RMSNorm, SparseMoE, apply_partial_rope, rope_cos_sin

ARCHITECTURE = "MiniMaxM1ForCausalLM"
STATE_DTYPE = torch.float32  # bf16 loses the small increments of a long recurrence


def register() -> None:
    """vLLM plugin entry point (group `vllm.general_plugins`): serve the hybrid under its architecture name."""
    from vllm import ModelRegistry

    ModelRegistry.register_model(ARCHITECTURE, MiniMaxM1VllmForCausalLM)


def native_config(hf_config: Any) -> MiniMaxM1Config:
    """m1flow's config from whichever config class vLLM loaded (m1flow's, or the remote code's)."""
    return MiniMaxM1Config.from_dict({k: getattr(hf_config, k) for k in MiniMaxM1Config.model_fields
                                      if getattr(hf_config, k, None) is not None})


class VllmLightning(LinearAttention):
    """A lightning layer whose recurrent state lives in vLLM's state cache."""

    def __init__(self, hf_config: Any, config: MiniMaxM1Config, vllm_config: VllmConfig, prefix: str) -> None:
        super().__init__(hf_config, vllm_config, prefix)
        native = LightningAttention(config, self.layer_idx)
        self.qkv_proj, self.output_gate, self.norm, self.out_proj = (
            native.qkv_proj, native.output_gate, native.norm, native.out_proj)
        self._slope = native._slope  # fp32, not a parameter
        context = vllm_config.compilation_config.static_forward_context
        if prefix in context:
            raise ValueError(f"duplicate layer name {prefix}")
        context[prefix] = self

    def get_state_dtype(self) -> tuple[torch.dtype]:
        return (STATE_DTYPE,)

    def forward(self, hidden_states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        output = torch.empty_like(hidden_states)
        torch.ops.vllm.linear_attention(hidden_states, output, positions, self.prefix)  # calls _forward
        return output

    def _forward(self, hidden_states: torch.Tensor, output: torch.Tensor, positions: torch.Tensor) -> None:
        metadata = (get_forward_context().attn_metadata or {}).get(self.prefix)
        n = hidden_states.shape[0] if metadata is None else metadata.num_prefill_tokens + metadata.num_decode_tokens
        x = hidden_states[:n]
        q, k, v = F.silu(self.qkv_proj(x)).view(n, self.num_heads, 3 * self.head_dim).split(self.head_dim, dim=-1)
        slope = self._slope.to(x.device)
        if metadata is None:  # a profiling run: no state
            o = lightning_attn(q[None], k[None], v[None], slope)[0][0]
        else:
            o = self._with_state(q, k, v, slope, metadata)
        y = self.norm(o.reshape(n, -1).to(x.dtype))
        output[:n] = self.out_proj(torch.sigmoid(self.output_gate(x)) * y)

    def _with_state(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slope: torch.Tensor, m: Any) -> torch.Tensor:
        """Decodes first (one token each, batched), then each prefill from its cached or a zero state."""
        state = self.kv_cache[0]  # [slots, H, d, d]
        slots = m.state_indices_tensor.long()
        starts, seq_lens = m.query_start_loc.tolist(), m.seq_lens.tolist()
        nd = m.num_decode_tokens
        parts = []
        if m.num_decodes:
            fresh = slots[: m.num_decodes][torch.tensor(seq_lens[: m.num_decodes]) == 1]
            state[fresh] = 0  # a one-token prompt is scheduled as a decode
            parts.append(lightning_attn_decode(q[:nd], k[:nd], v[:nd], slope, state, slots[: m.num_decodes]))
        for r in range(m.num_decodes, m.num_decodes + m.num_prefills):
            a, b = starts[r], starts[r + 1]
            slot = int(slots[r])
            initial = None if seq_lens[r] == b - a else state[slot : slot + 1]
            o, final = lightning_attn(q[None, a:b], k[None, a:b], v[None, a:b], slope,
                                      initial_state=initial, output_final_state=True)
            state[slot] = final[0].to(state.dtype)
            parts.append(o[0])
        return torch.cat(parts, dim=0)


class VllmSoftmax(nn.Module):
    """A softmax layer on vLLM's paged KV cache, with RoPE on the first rotary_dim dims of each head."""

    def __init__(self, config: MiniMaxM1Config, vllm_config: VllmConfig, prefix: str) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (
            config.num_attention_heads, config.num_key_value_heads, config.head_dim)
        self.rotary_dim, self.rope_theta = config.rotary_dim, config.rope_theta
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)
        self.attn = Attention(self.num_heads, self.head_dim, self.head_dim**-0.5, num_kv_heads=self.num_kv_heads,
                              cache_config=vllm_config.cache_config, prefix=f"{prefix}.attn")

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        cos, sin = rope_cos_sin(positions[None], self.rotary_dim, self.rope_theta)
        q = apply_partial_rope(self.q_proj(x).view(1, t, self.num_heads, self.head_dim), cos, sin)
        k = apply_partial_rope(self.k_proj(x).view(1, t, self.num_kv_heads, self.head_dim), cos, sin)
        o = self.attn(q.reshape(t, -1), k.reshape(t, -1), self.v_proj(x))
        return self.o_proj(o)


class VllmDecoderLayer(nn.Module):
    """m1flow.model.layers.DecoderLayer with vLLM's attention layers: the same residual arithmetic."""

    def __init__(self, hf_config: Any, config: MiniMaxM1Config, vllm_config: VllmConfig, prefix: str, i: int) -> None:
        super().__init__()
        self.is_softmax, self.postnorm = config.is_softmax(i), config.postnorm
        if self.is_softmax:
            self.self_attn: nn.Module = VllmSoftmax(config, vllm_config, f"{prefix}.self_attn")
            self.attn_alpha, self.attn_beta = config.layernorm_full_attention_alpha, config.layernorm_full_attention_beta
        else:
            self.self_attn = VllmLightning(hf_config, config, vllm_config, f"{prefix}.self_attn")
            self.attn_alpha = config.layernorm_linear_attention_alpha
            self.attn_beta = config.layernorm_linear_attention_beta
        self.mlp_alpha, self.mlp_beta = config.layernorm_mlp_alpha, config.layernorm_mlp_beta
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.block_sparse_moe = SparseMoE(config)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        h = self.input_layernorm(x)
        x = (h if self.postnorm else x) * self.attn_alpha + self.self_attn(h, positions) * self.attn_beta
        h = self.post_attention_layernorm(x)
        return (h if self.postnorm else x) * self.mlp_alpha + self.block_sparse_moe(h) * self.mlp_beta


class VllmHybridModel(nn.Module):
    def __init__(self, vllm_config: VllmConfig, prefix: str) -> None:
        super().__init__()
        hf_config = vllm_config.model_config.hf_config
        config = native_config(hf_config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(VllmDecoderLayer(hf_config, config, vllm_config, f"{prefix}.layers.{i}", i)
                                    for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor,
                inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        for layer in self.layers:
            x = layer(x, positions)
        return self.norm(x)


class MiniMaxM1VllmForCausalLM(nn.Module, HasInnerState, IsHybrid):
    """What vLLM builds for a policy whose architecture is MiniMaxM1ForCausalLM."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        if vllm_config.parallel_config.tensor_parallel_size != 1:
            raise ValueError("the hybrid model's vLLM plugin runs with tensor_parallel_size 1 only")
        self.config = native_config(vllm_config.model_config.hf_config)
        self.model = VllmHybridModel(vllm_config, "model")
        self.lm_head = nn.Linear(self.config.hidden_size, self.config.vocab_size, bias=False)
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor, intermediate_tensors: Any = None,
                inputs_embeds: torch.Tensor | None = None, **_: Any) -> torch.Tensor:
        return self.model(input_ids, positions, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The fp32 LM head, as in the native model and the learner."""
        return F.linear(hidden_states.float(), self.lm_head.weight.float())

    # ---- the state cache ------------------------------------------------------------------
    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config: VllmConfig) -> tuple[tuple[int, int, int]]:
        config = native_config(vllm_config.model_config.hf_config)
        return MambaStateShapeCalculator.linear_attention_state_shape(
            num_heads=config.num_attention_heads, tp_size=1, head_dim=config.head_dim)

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config: VllmConfig) -> tuple[torch.dtype]:
        return (STATE_DTYPE,)

    @classmethod
    def get_mamba_state_copy_func(cls) -> tuple:
        return MambaStateCopyFuncCalculator.linear_attention_state_copy_func()

    # ---- weights --------------------------------------------------------------------------
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """The checkpoint's tensors by name (also what reload_weights streams in); an unknown name
        is an error, as it is for the native model. Each goes through its parameter's
        `weight_loader`, vLLM's convention: an in-place reload puts the layers on the meta device and
        wraps those loaders to materialise each layer once its tensors are in, so a plain copy into
        the parameter would land in a meta tensor and the old weights would be put back."""
        params = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            if name not in params:
                raise KeyError(f"checkpoint tensor {name} has no place in {type(self).__name__}")
            param = params[name]
            getattr(param, "weight_loader", default_weight_loader)(param, tensor)
            loaded.add(name)
        if self.config.tie_word_embeddings:
            loaded.add("lm_head.weight")
        return loaded | {n for n in params if ".attn." in n}  # vLLM's own scales, not in checkpoints
