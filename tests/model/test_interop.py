"""transformers -> m1flow: transformers' own MiniMax checkpoints (`save_pretrained`, model_type
`minimax`) open as m1flow's hybrid model with the same logits in float64, and the settings whose
meaning differs between the two implementations are refused by name."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import MiniMaxConfig, MiniMaxForCausalLM

from m1flow import checkpoint
from m1flow.model import MiniMaxM1ForCausalLM
from m1flow.model.interop import UntranslatableConfig

V = 97
L, S = "linear_attention", "full_attention"


def transformers_minimax(**overrides) -> MiniMaxForCausalLM:
    fields = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                  layer_types=[L, S, L, S], block_size=16, full_attn_alpha_factor=1.7, linear_attn_alpha_factor=1.3,
                  mlp_alpha_factor=1.5, mlp_beta_factor=0.8, rope_parameters={"rope_theta": 10_000.0, "rope_type": "default"})
    fields.update(overrides)
    torch.manual_seed(0)
    config = MiniMaxConfig(**fields, experts_implementation="eager", attn_implementation="eager")  # float64 runs
    model = MiniMaxForCausalLM(config).double().eval()
    with torch.no_grad():  # random weights everywhere, non-trivial norms
        for name, p in model.named_parameters():
            p.copy_(torch.empty_like(p).uniform_(0.5, 1.5) if "norm" in name else torch.randn_like(p) * 0.1)
    return model


@pytest.mark.parametrize("layout", [[L, S, L, S], [S, L, L, S, L, L, S]])
def test_transformers_minimax_opens_as_the_hybrid_with_the_same_float64_logits(layout, tmp_path):
    theirs = transformers_minimax(num_hidden_layers=len(layout), layer_types=layout)
    theirs.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "minimax"
    assert checkpoint.is_hybrid(tmp_path)
    ours = checkpoint.load_model(tmp_path, dtype=torch.float64)
    assert type(ours) is MiniMaxM1ForCausalLM
    assert ours.config.rotary_dim == ours.config.head_dim and ours.config.layernorm_mlp_beta == 0.8
    ids = torch.randint(0, V, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = theirs(ids).logits.double()
        got = ours(ids)
        # m1flow's cached decoding (the prompt, then token by token) gives transformers' logits too
        cache = ours.new_cache(2)
        steps = [ours(ids[:, :30], cache)]
        steps += [ours(ids[:, t : t + 1], cache) for t in range(30, 40)]
    gap = (got - expected).abs().max().item()
    print(f"\nlayout {layout}: max |logit gap| full forward {gap:.1e}, scale {expected.abs().max().item():.1f}")
    # the layers after the first decay at the release's rates, which differ from transformers' by
    # under 1e-5 relative (its 1e-5 in the depth factor's denominator)
    assert gap < 1e-6 * expected.abs().max()
    torch.testing.assert_close(torch.cat(steps, 1), expected, rtol=0, atol=1e-6 * expected.abs().max().item())
    # and saved by m1flow it is m1flow's own format from then on
    again = checkpoint.load_model(checkpoint.save_policy(tmp_path / "m1", ours, _tokenizer()), dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(again(ids), got, rtol=0, atol=1e-12)


def test_with_one_first_lightning_layer_only_transformers_fp32_casts_remain(tmp_path):
    """Layer 0 decays alike in both; what is left of the gap is transformers' RMSNorm and router,
    which compute in float32 even in a float64 model (ours keep float64)."""
    theirs = transformers_minimax(num_hidden_layers=2, layer_types=[L, S])
    theirs.save_pretrained(tmp_path)
    ids = torch.randint(0, V, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = theirs(ids).logits
        gap = (checkpoint.load_model(tmp_path, dtype=torch.float64)(ids) - expected).abs().max().item()
    print(f"\none lightning layer (layer 0): max |logit gap| {gap:.1e}, scale {expected.abs().max().item():.1f}")
    assert gap < 1e-6


@pytest.mark.parametrize("overrides,setting", [
    ({"num_attention_heads": 6, "num_key_value_heads": 3}, "num_attention_heads"),
    ({"layer_types": [S, L, S, L]}, r"layer_types\[-1\]"),
    ({"rope_parameters": {"rope_theta": 1e4, "rope_type": "default", "partial_rotary_factor": 0.5}},
     "partial_rotary_factor"),
    ({"rope_parameters": {"rope_theta": 1e4, "rope_type": "linear", "factor": 2.0}}, "rope_type"),
    ({"sliding_window": 8}, "sliding_window"),
])
def test_settings_whose_meaning_differs_are_refused_by_name(overrides, setting, tmp_path):
    transformers_minimax(**overrides).save_pretrained(tmp_path)
    with pytest.raises(UntranslatableConfig, match=setting) as refused:
        checkpoint.load_model(tmp_path)
    assert str(tmp_path / "config.json") in str(refused.value)


def test_edited_decay_slopes_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    transformers_minimax().save_pretrained(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    state["model.layers.2.self_attn.slope_rate"] = state["model.layers.2.self_attn.slope_rate"] * 2
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(UntranslatableConfig, match="layers.2.self_attn.slope_rate"):
        checkpoint.load_model(tmp_path)


def test_released_settings_m1flow_does_not_model_are_refused(tmp_path):
    model = MiniMaxM1ForCausalLM.from_pretrained  # the released format: m1flow's own loader
    from m1flow.model import MiniMaxM1Config

    MiniMaxM1ForCausalLM(MiniMaxM1Config.tiny(vocab_size=V, num_hidden_layers=2)).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    for key, value in (("shared_intermediate_size", 64), ("sliding_window", 16)):
        (tmp_path / "config.json").write_text(json.dumps({**config, key: value}))
        with pytest.raises(ValueError, match=key):
            model(tmp_path)


def _tokenizer():
    from m1flow.tokenizer import build_tokenizer

    return build_tokenizer()
