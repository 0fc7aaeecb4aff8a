"""The hybrid MiniMax-M1 causal language model: embeddings, lightning/softmax decoder layers with
MoE, final norm and an fp32 LM head; checkpoint I/O in the released layout (config.json +
safetensors with the released parameter names)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from m1flow.model import interop
from m1flow.model.cache import HybridCache, KVCache, LightningState
from m1flow.model.config import MiniMaxM1Config, MiniMaxM1HFConfig
from m1flow.model.layers import DecoderLayer, RMSNorm, at_least_fp32

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"  # sharded checkpoints, as the release ships
MAX_SHARD_BYTES = 4 << 30


def save_weights(state: dict[str, torch.Tensor], directory: Path, max_shard_bytes: int = MAX_SHARD_BYTES) -> None:
    """One safetensors file, or shards named as transformers names them plus their index when the
    tensors exceed max_shard_bytes (the released checkpoint's layout)."""
    sizes = {name: t.numel() * t.element_size() for name, t in state.items()}
    if sum(sizes.values()) <= max_shard_bytes:
        save_file(state, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
        return
    shards: list[list[str]] = [[]]
    filled = 0
    for name in state:
        if shards[-1] and filled + sizes[name] > max_shard_bytes:
            shards.append([])
            filled = 0
        shards[-1].append(name)
        filled += sizes[name]
    weight_map = {}
    for i, names in enumerate(shards):
        shard = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({n: state[n] for n in names}, str(directory / shard), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(names, shard))
    index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
    (directory / WEIGHTS_INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def load_weights(directory: Path, device: str) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory, single-file or sharded."""
    index = directory / WEIGHTS_INDEX
    if not index.exists():
        return load_file(str(directory / WEIGHTS_FILE), device=device)
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
        state.update(load_file(str(directory / shard), device=device))
    return state


class MiniMaxM1Model(nn.Module):
    """Decoder stack; `model.*` in the released checkpoint."""

    def __init__(self, config: MiniMaxM1Config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, cache: HybridCache | None = None) -> torch.Tensor:
        offset = cache.positions() if cache is not None else 0
        x = self.embed_tokens(input_ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, cache.layers[i] if cache is not None else None, offset)
        if cache is not None:
            cache.seq_len += input_ids.shape[1]
        return self.norm(x)


class MiniMaxM1ForCausalLM(nn.Module):
    """The causal LM. Registered with transformers' AutoModelForCausalLM (m1flow.model), whose
    from_pretrained/from_config land in the methods below; forward returns fp32 logits."""

    config_class = MiniMaxM1HFConfig

    def __init__(self, config: MiniMaxM1Config) -> None:
        super().__init__()
        self.config = config
        self.model = MiniMaxM1Model(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    # ---- compute ---------------------------------------------------------------------------
    def hidden_states(self, input_ids: torch.Tensor, cache: HybridCache | None = None) -> torch.Tensor:
        """Final normed hidden states [B, T, hidden], before the LM head; appends to `cache` if given."""
        return self.model(input_ids, cache)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM head in fp32 (float64 for a float64 model): the report traces an RL training/inference mismatch to this layer's precision."""
        return F.linear(at_least_fp32(hidden), at_least_fp32(self.lm_head.weight))

    def forward(self, input_ids: torch.Tensor, cache: HybridCache | None = None) -> torch.Tensor:
        """Logits [B, T, V] in fp32."""
        return self.logits(self.hidden_states(input_ids, cache))

    def new_cache(self, batch_size: int) -> HybridCache:
        cfg, weight = self.config, self.lm_head.weight
        layers: list[LightningState | KVCache] = []
        for i in range(cfg.num_hidden_layers):
            if cfg.is_softmax(i):
                empty = weight.new_empty(batch_size, cfg.num_key_value_heads, 0, cfg.head_dim)
                layers.append(KVCache(empty, empty.clone()))
            else:
                shape = (batch_size, cfg.num_attention_heads, cfg.head_dim, cfg.head_dim)
                layers.append(LightningState(torch.zeros(shape, dtype=torch.float32, device=weight.device)))
        return HybridCache(layers)

    # ---- checkpoints -----------------------------------------------------------------------
    def save_pretrained(self, directory: str | Path, max_shard_size: int = MAX_SHARD_BYTES, **_: object) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.config.to_json(directory / CONFIG_FILE)
        state = {k: v.contiguous() for k, v in self.state_dict().items()}
        if self.config.tie_word_embeddings:
            del state["lm_head.weight"]
        save_weights(state, directory, max_shard_size)

    @classmethod
    def from_pretrained(
        cls, directory: str | Path, device: str | torch.device | None = None, dtype: torch.dtype | None = None,
        **hf_kwargs: object,
    ) -> "MiniMaxM1ForCausalLM":
        """Build on the meta device and adopt the stored tensors (no second copy, no random init).

        Also what AutoModelForCausalLM.from_pretrained calls: its `dtype`/`torch_dtype` and
        `device_map` (one device) are honoured, hub arguments ignored (local directories only).
        Opens the released layout and transformers' `minimax` directories (m1flow.model.interop)."""
        directory = Path(directory)
        if not (directory / CONFIG_FILE).exists():
            raise FileNotFoundError(f"{directory} is not a local model directory (no {CONFIG_FILE})")
        dtype = dtype or hf_kwargs.get("torch_dtype")
        dtype = dtype if isinstance(dtype, torch.dtype) else None  # "auto": as stored
        device = device or hf_kwargs.get("device_map") or "cpu"
        data = json.loads((directory / CONFIG_FILE).read_text())
        state = load_weights(directory, str(device))
        if interop.is_transformers_minimax(data):  # transformers' own MiniMax: translated, or refused
            config = interop.from_transformers_config(data, str(directory / CONFIG_FILE))
            state = interop.adopt_weights(state, config, str(directory))
        else:
            config = MiniMaxM1Config.from_dict(data)
        with torch.device("meta"):
            model = cls(config)
        if config.tie_word_embeddings:
            state["lm_head.weight"] = state["model.embed_tokens.weight"]
        model.load_state_dict(state, strict=True, assign=True)
        if config.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
        if dtype is not None:
            model.to(dtype)
        return model.eval()

    @classmethod
    def _from_config(cls, config: MiniMaxM1HFConfig | MiniMaxM1Config, **_: object) -> "MiniMaxM1ForCausalLM":
        """AutoModelForCausalLM.from_config: a freshly initialised model."""
        return cls(config.native() if isinstance(config, MiniMaxM1HFConfig) else config)


def count_parameters(config: MiniMaxM1Config) -> tuple[int, int]:
    """(total, active per token). Active counts what one token's forward multiplies through: all
    attention and norm weights, the router, and top-k of the experts; like the report's 45.9B it
    leaves out the embedding table and the LM head."""
    with torch.device("meta"):
        model = MiniMaxM1ForCausalLM(config)
    total = sum(p.numel() for p in model.parameters())
    io = model.model.embed_tokens.weight.numel() + (0 if config.tie_word_embeddings else model.lm_head.weight.numel())
    experts = sum(p.numel() for layer in model.model.layers for p in layer.block_sparse_moe.experts.parameters())
    idle = experts * (config.num_local_experts - config.num_experts_per_tok) // config.num_local_experts
    return total, total - io - idle
