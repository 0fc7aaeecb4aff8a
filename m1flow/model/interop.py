"""Opening transformers' own MiniMax checkpoints (`model_type: minimax`, its `save_pretrained`) as
m1flow's hybrid model: the config translated to the released field names, the weights (already in
the released layout) taken as they are, transformers' decay buffers dropped.

The two implementations agree wherever the translation is accepted (tests/model/test_interop.py,
float64 logits against transformers' MiniMaxForCausalLM). Where they differ in meaning the
translation refuses, naming the setting, rather than load a different model:
* RoPE: transformers rotates the whole head; only plain RoPE over the full head translates
  (rotary_dim = head_dim); scaled RoPE or a partial_rotary_factor does not.
* decay slopes: transformers computes base^(h+1) with base = 2^(-8/H), which is the release's only
  when H is a power of two; and it scales layer i by 1 - i/(N-1+1e-5) + 1e-5, which for a lightning
  last layer is about twice the release's 1e-5. (For the other layers the two scales differ by under
  1e-5 relative: the release's are used.) The slopes stored in the checkpoint are checked as well.
* sliding-window attention, which the release does not have.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from kernels.lightning_attn import build_slopes
from m1flow.model.config import LIGHTNING, SOFTMAX, MiniMaxM1Config

TRANSFORMERS_MODEL_TYPE = "minimax"
LAYER_TYPES = {"linear_attention": LIGHTNING, "full_attention": SOFTMAX}
DECAY_BUFFERS = ("slope_rate", "query_decay", "key_decay", "diagonal_decay")
SLOPE_RTOL = 1e-4


class UntranslatableConfig(ValueError):
    """A transformers MiniMax setting whose meaning m1flow's hybrid model (the release's) does not share."""


def _refuse(source: str, setting: str, why: str) -> None:
    raise UntranslatableConfig(f"{source}: {setting}: {why}; m1flow will not load it as the released architecture")


def from_transformers_config(data: dict[str, Any], source: str = "config.json") -> MiniMaxM1Config:
    """The MiniMaxM1Config of a transformers `minimax` config.json (a dict), or UntranslatableConfig."""
    heads, layers = data["num_attention_heads"], data["num_hidden_layers"]
    head_dim = data.get("head_dim") or data["hidden_size"] // heads
    kinds = data.get("layer_types") or ["full_attention" if (i + 1) % 2 else "linear_attention" for i in range(layers)]
    unknown = sorted(set(kinds) - set(LAYER_TYPES))
    if unknown:
        _refuse(source, "layer_types", f"{unknown} are neither linear_attention nor full_attention")
    layout = [LAYER_TYPES[k] for k in kinds]
    rope = dict(data.get("rope_parameters") or {"rope_theta": data.get("rope_theta", 1e6)})
    if rope.get("rope_type", "default") != "default":
        _refuse(source, "rope_parameters.rope_type", f"{rope['rope_type']!r} scaling is not the release's plain RoPE")
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        _refuse(source, "rope_parameters.partial_rotary_factor",
                "transformers' MiniMax rotates the whole head whatever this says, the release rotary_dim of it")
    if data.get("sliding_window") is not None:
        _refuse(source, "sliding_window", "the release attends to the whole context")
    if LIGHTNING in layout and 2 ** int(math.log2(heads)) != heads:
        _refuse(source, "num_attention_heads",
                f"{heads} is not a power of two, and for such head counts transformers' decay slopes "
                "(base^(h+1)) are not the release's (interleaved ALiBi slopes)")
    if layout[-1] == LIGHTNING and layers > 1:
        _refuse(source, "layer_types[-1]", "a lightning last layer decays at 1e-5 + 1e-5/(N-1) of its base "
                "rate in transformers, at 1e-5 in the release")
    fields = dict(
        vocab_size=data["vocab_size"], hidden_size=data["hidden_size"], intermediate_size=data["intermediate_size"],
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=data.get("num_key_value_heads") or heads,
        head_dim=head_dim, attn_type_list=layout, num_local_experts=data["num_local_experts"],
        num_experts_per_tok=data["num_experts_per_tok"], rotary_dim=head_dim, rope_theta=rope["rope_theta"],
        rms_norm_eps=data["rms_norm_eps"], hidden_act=data.get("hidden_act", "silu"), postnorm=True,
        layernorm_full_attention_alpha=data.get("full_attn_alpha_factor", 1),
        layernorm_full_attention_beta=data.get("full_attn_beta_factor", 1),
        layernorm_linear_attention_alpha=data.get("linear_attn_alpha_factor", 1),
        layernorm_linear_attention_beta=data.get("linear_attn_beta_factor", 1),
        layernorm_mlp_alpha=data.get("mlp_alpha_factor", 1), layernorm_mlp_beta=data.get("mlp_beta_factor", 1),
        max_position_embeddings=data.get("max_position_embeddings", 131072),
        initializer_range=data.get("initializer_range", 0.02), tie_word_embeddings=data.get("tie_word_embeddings", False),
        bos_token_id=data.get("bos_token_id"), eos_token_id=_first(data.get("eos_token_id")),
        pad_token_id=data.get("pad_token_id"))
    try:
        return MiniMaxM1Config(**fields)
    except ValueError as err:
        raise UntranslatableConfig(f"{source}: {err}") from err


def adopt_weights(state: dict[str, torch.Tensor], config: MiniMaxM1Config, source: str = "weights") -> dict[str, torch.Tensor]:
    """The checkpoint's tensors without transformers' decay buffers, after checking that the slopes it
    stored are the release's (so a checkpoint edited by hand is refused too)."""
    kept = {}
    for name, tensor in state.items():
        parts = name.split(".")
        if parts[-1] not in DECAY_BUFFERS:
            kept[name] = tensor
            continue
        if parts[-1] == "slope_rate":
            layer = int(parts[2])
            expected = build_slopes(config.num_attention_heads, layer, config.num_hidden_layers).double()
            if not torch.allclose(tensor.double().flatten(), expected, rtol=SLOPE_RTOL, atol=0):
                _refuse(source, name, "the stored decay slopes are not the release's for this layer")
    return kept


def is_transformers_minimax(config: dict[str, Any]) -> bool:
    return config.get("model_type") == TRANSFORMERS_MODEL_TYPE


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


def source_name(directory: Path) -> str:
    return str(directory / "config.json")
