import json

import pytest
import torch

from m1flow.model import MiniMaxM1Config, MiniMaxM1ForCausalLM, count_parameters

# The released MiniMax-M1 config.json, as published (attn_type_list spelled out below).
RELEASED = {
    "architectures": ["MiniMaxM1ForCausalLM"],
    "attention_dropout": 0.0,
    "auto_map": {
        "AutoConfig": "configuration_minimax_m1.MiniMaxM1Config",
        "AutoModelForCausalLM": "modeling_minimax_m1.MiniMaxM1ForCausalLM",
    },
    "bos_token_id": None,
    "eos_token_id": None,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 6144,
    "initializer_range": 0.02,
    "intermediate_size": 9216,
    "layernorm_full_attention_alpha": 3.5565588200778455,
    "layernorm_full_attention_beta": 1.0,
    "layernorm_linear_attention_alpha": 3.5565588200778455,
    "layernorm_linear_attention_beta": 1.0,
    "layernorm_mlp_alpha": 3.5565588200778455,
    "layernorm_mlp_beta": 1.0,
    "max_position_embeddings": 10240000,
    "model_type": "minimax_m1",
    "num_attention_heads": 64,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "output_router_logits": False,
    "postnorm": True,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000000,
    "rotary_dim": 64,
    "router_aux_loss_coef": 0.001,
    "router_jitter_noise": 0.0,
    "shared_intermediate_size": 0,
    "shared_moe_mode": "sigmoid",
    "sliding_window": None,
    "tie_word_embeddings": False,
    "transformers_version": "4.45.2",
    "use_cache": True,
    "vocab_size": 200064,
}
RELEASED["attn_type_list"] = [1 if i % 8 == 7 else 0 for i in range(80)]


def test_released_config_loads_and_keeps_unknown_keys(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(RELEASED))
    cfg = MiniMaxM1Config.from_json(path)
    assert cfg.hidden_size == 6144 and cfg.num_hidden_layers == 80 and cfg.rotary_dim == 64
    assert [i for i, t in enumerate(cfg.attn_type_list) if t == 1] == list(range(7, 80, 8))
    assert cfg.model_extra["auto_map"] == RELEASED["auto_map"]
    assert cfg.model_extra["shared_moe_mode"] == "sigmoid"
    cfg.to_json(tmp_path / "out.json")
    written = json.loads((tmp_path / "out.json").read_text())
    for key, value in RELEASED.items():
        assert written[key] == value, key


def test_m1_preset_is_the_release():
    cfg = MiniMaxM1Config.m1()
    for key, value in RELEASED.items():
        if key in MiniMaxM1Config.model_fields:
            assert getattr(cfg, key) == value, key


def test_released_parameter_counts():
    """456B total and 45.9B activated per token, as the report states."""
    total, active = count_parameters(MiniMaxM1Config.m1())
    assert total == pytest.approx(456e9, rel=0.01)
    assert active == pytest.approx(45.9e9, rel=0.01)


def test_released_model_builds_on_meta_with_released_names():
    cfg = MiniMaxM1Config.m1(num_hidden_layers=8, attn_type_list=[0] * 7 + [1])  # same layer kinds, fewer
    with torch.device("meta"):
        model = MiniMaxM1ForCausalLM(cfg)
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert shapes["model.embed_tokens.weight"] == (200064, 6144)
    assert shapes["lm_head.weight"] == (200064, 6144)
    assert shapes["model.norm.weight"] == (6144,)
    assert shapes["model.layers.0.self_attn.qkv_proj.weight"] == (3 * 8192, 6144)
    assert shapes["model.layers.0.self_attn.output_gate.weight"] == (8192, 6144)
    assert shapes["model.layers.0.self_attn.norm.weight"] == (8192,)
    assert shapes["model.layers.0.self_attn.out_proj.weight"] == (6144, 8192)
    assert shapes["model.layers.7.self_attn.q_proj.weight"] == (8192, 6144)
    assert shapes["model.layers.7.self_attn.k_proj.weight"] == (1024, 6144)
    assert shapes["model.layers.7.self_attn.v_proj.weight"] == (1024, 6144)
    assert shapes["model.layers.7.self_attn.o_proj.weight"] == (6144, 8192)
    assert shapes["model.layers.3.block_sparse_moe.gate.weight"] == (32, 6144)
    assert shapes["model.layers.3.block_sparse_moe.experts.31.w1.weight"] == (9216, 6144)
    assert shapes["model.layers.3.block_sparse_moe.experts.31.w2.weight"] == (6144, 9216)
    assert shapes["model.layers.3.block_sparse_moe.experts.31.w3.weight"] == (9216, 6144)
    assert shapes["model.layers.3.input_layernorm.weight"] == (6144,)
    assert shapes["model.layers.3.post_attention_layernorm.weight"] == (6144,)
    # Slopes are recomputed, not stored: nothing else is in the state dict.
    assert set(model.state_dict()) == set(shapes)


def test_tiny_preset_is_small_and_hybrid():
    cfg = MiniMaxM1Config.tiny(vocab_size=1000)
    total, active = count_parameters(cfg)
    assert 1e6 < total < 10e6 and active < total
    assert cfg.attn_type_list.count(1) == 1 and len(cfg.attn_type_list) == cfg.num_hidden_layers
    assert MiniMaxM1Config.tiny(hidden_size=256).hidden_size == 256


def test_layout_default_and_validation():
    assert MiniMaxM1Config(num_hidden_layers=16).attn_type_list == [0] * 7 + [1] + [0] * 7 + [1]
    with pytest.raises(ValueError):
        MiniMaxM1Config(num_hidden_layers=4, attn_type_list=[0, 1])
    with pytest.raises(ValueError):
        MiniMaxM1Config(num_attention_heads=64, num_key_value_heads=6)
    with pytest.raises(ValueError):
        MiniMaxM1Config(rotary_dim=130)
