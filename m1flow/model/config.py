"""Configuration of the hybrid MiniMax-M1 model family.

Field names are those of the released MiniMax-M1 `config.json`, so a released file loads as it is
and a file we write loads in tools that read the release. Keys we do not model (auto_map,
transformers_version, ...) are kept and written back unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from transformers import PreTrainedConfig

LIGHTNING = 0
SOFTMAX = 1


def deepnorm_alpha(num_layers: int) -> float:
    """Residual scale of the post-norm blocks, (2N)^(1/4): 3.5566 for the released 80 layers."""
    return (2 * num_layers) ** 0.25


def hybrid_layout(num_layers: int, softmax_every: int = 8) -> list[int]:
    """Attention type per layer: softmax on every `softmax_every`-th layer (7, 15, ...), else lightning."""
    return [SOFTMAX if (i + 1) % softmax_every == 0 else LIGHTNING for i in range(num_layers)]


class MiniMaxM1Config(BaseModel):
    """Architecture hyper-parameters; defaults are the released MiniMax-M1."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    architectures: list[str] = ["MiniMaxM1ForCausalLM"]
    model_type: str = "minimax_m1"
    vocab_size: int = 200064
    hidden_size: int = 6144
    intermediate_size: int = 9216  # per expert
    num_hidden_layers: int = 80
    num_attention_heads: int = 64
    num_key_value_heads: int = 8  # softmax layers only (GQA)
    head_dim: int = 128
    attn_type_list: list[int]  # 0 lightning, 1 softmax; omitted -> softmax on every 8th layer
    num_local_experts: int = 32
    num_experts_per_tok: int = 2
    rotary_dim: int = 64
    rope_theta: float = 10_000_000.0
    rms_norm_eps: float = 1e-5
    hidden_act: str = "silu"
    postnorm: bool = True
    layernorm_full_attention_alpha: float = 3.5565588200778455
    layernorm_full_attention_beta: float = 1.0
    layernorm_linear_attention_alpha: float = 3.5565588200778455
    layernorm_linear_attention_beta: float = 1.0
    layernorm_mlp_alpha: float = 3.5565588200778455
    layernorm_mlp_beta: float = 1.0
    max_position_embeddings: int = 10_240_000
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_layout(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("attn_type_list") is None:
            data = {**data, "attn_type_list": hybrid_layout(data.get("num_hidden_layers", 80))}
        return data

    @model_validator(mode="after")
    def _check(self) -> "MiniMaxM1Config":
        if len(self.attn_type_list) != self.num_hidden_layers:
            raise ValueError(f"attn_type_list has {len(self.attn_type_list)} entries for {self.num_hidden_layers} layers")
        if set(self.attn_type_list) - {LIGHTNING, SOFTMAX}:
            raise ValueError("attn_type_list entries must be 0 (lightning) or 1 (softmax)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.rotary_dim % 2 or self.rotary_dim > self.head_dim:
            raise ValueError("rotary_dim must be even and at most head_dim")
        if not 1 <= self.num_experts_per_tok <= self.num_local_experts:
            raise ValueError("num_experts_per_tok must be in [1, num_local_experts]")
        if self.hidden_act != "silu":
            raise ValueError(f"only silu is implemented, got {self.hidden_act!r}")
        extra = self.model_extra or {}
        if extra.get("shared_intermediate_size"):  # a released key, 0 in the release
            raise ValueError(f"shared_intermediate_size={extra['shared_intermediate_size']}: "
                             "a shared expert is not implemented (the release has none)")
        if extra.get("sliding_window") is not None:
            raise ValueError(f"sliding_window={extra['sliding_window']}: the release attends to the whole context")
        return self

    def is_softmax(self, layer_idx: int) -> bool:
        return self.attn_type_list[layer_idx] == SOFTMAX

    # ---- presets ---------------------------------------------------------------------------
    @classmethod
    def m1(cls, **overrides: Any) -> "MiniMaxM1Config":
        """The released MiniMax-M1 (456B total, 45.9B active per token)."""
        return cls(**overrides)

    @classmethod
    def tiny(cls, vocab_size: int = 512, **overrides: Any) -> "MiniMaxM1Config":
        """A few-million-parameter hybrid that trains and samples in seconds on two CPU cores."""
        layers = overrides.pop("num_hidden_layers", 4)
        alpha = deepnorm_alpha(layers)
        fields: dict[str, Any] = dict(
            vocab_size=vocab_size,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            attn_type_list=hybrid_layout(layers, softmax_every=min(4, layers)),
            num_local_experts=4,
            num_experts_per_tok=2,
            rotary_dim=16,
            rope_theta=10_000.0,
            layernorm_full_attention_alpha=alpha,
            layernorm_linear_attention_alpha=alpha,
            layernorm_mlp_alpha=alpha,
            max_position_embeddings=65536,
        )
        fields.update(overrides)
        return cls(**fields)

    # ---- files -----------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MiniMaxM1Config":
        return cls.model_validate(data)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, path: str | Path) -> "MiniMaxM1Config":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")


class MiniMaxM1HFConfig(PreTrainedConfig):
    """The same configuration as transformers' AutoConfig sees it (model_type "minimax_m1").

    Registered with AutoConfig (m1flow.model), so `AutoConfig.from_pretrained(dir)` and
    `AutoModelForCausalLM.from_pretrained(dir)` open a hybrid checkpoint like any other; the
    values are validated by MiniMaxM1Config, which the model itself is built from."""

    model_type = "minimax_m1"

    def __init__(self, **kwargs: Any) -> None:
        fields = {k: kwargs[k] for k in MiniMaxM1Config.model_fields if k in kwargs}
        for key, value in MiniMaxM1Config.model_validate(fields).to_dict().items():
            if key not in _HF_OWNED:
                setattr(self, key, value)
        super().__init__(**{k: v for k, v in kwargs.items() if k not in MiniMaxM1Config.model_fields or k in _HF_OWNED})

    def native(self) -> MiniMaxM1Config:
        """The MiniMaxM1Config the model is built from (released keys we do not model kept as extras)."""
        data = self.to_dict()
        for key in _HF_BOOKKEEPING:
            data.pop(key, None)
        return MiniMaxM1Config.from_dict(data)


_HF_OWNED = ("bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings", "architectures")
_HF_BOOKKEEPING = ("_name_or_path", "chunk_size_feed_forward", "dtype", "id2label", "label2id", "is_encoder_decoder",
                   "output_attentions", "output_hidden_states", "problem_type", "return_dict", "transformers_version",
                   "torch_dtype", "use_return_dict")
