import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from m1flow.model import MiniMaxM1Config, MiniMaxM1ForCausalLM

V = 97


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = MiniMaxM1ForCausalLM(MiniMaxM1Config.tiny(vocab_size=V)).eval()
    with torch.no_grad():  # non-trivial norms so a mixed-up weight would show
        for name, p in m.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.uniform_(0.5, 1.5)
    return m


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, V, (3, 45), generator=torch.Generator().manual_seed(1))


@torch.no_grad()
def test_forward_shapes_and_dtypes(model, ids):
    logits = model(ids)
    hidden = model.hidden_states(ids)
    assert logits.shape == (3, 45, V) and logits.dtype == torch.float32
    assert hidden.shape == (3, 45, model.config.hidden_size)
    torch.testing.assert_close(hidden.float() @ model.lm_head.weight.float().T, logits)


@torch.no_grad()
def test_token_by_token_decode_equals_full_forward(model, ids):
    full = model(ids)
    cache = model.new_cache(ids.shape[0])
    steps = [model(ids[:, t : t + 1], cache) for t in range(ids.shape[1])]
    assert cache.seq_len == ids.shape[1]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("split", [1, 20, 44])
def test_prefill_then_decode_equals_full_forward(model, ids, split):
    full = model(ids)
    cache = model.new_cache(ids.shape[0])
    parts = [model(ids[:, :split], cache)]
    parts += [model(ids[:, t : t + 1], cache) for t in range(split, ids.shape[1])]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-4, atol=1e-5)


@torch.no_grad()
def test_multi_token_appends_to_cache(model, ids):
    """Chunks of several tokens after a prefill use the stored state and the stored keys."""
    full = model(ids)
    cache = model.new_cache(ids.shape[0])
    parts = [model(ids[:, a:b], cache) for a, b in ((0, 10), (10, 13), (13, 30), (30, 45))]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-4, atol=1e-5)


@torch.no_grad()
def test_cache_select_and_repeat(model, ids):
    """Rows copied from one prefill and then dropped decode like independent sequences."""
    full = model(ids[:1].expand(3, -1))
    cache = model.new_cache(1)
    model(ids[:1, :30], cache)
    cache.repeat_interleave(3)
    model(ids[:1, 30:31].expand(3, 1), cache)
    cache.select([0, 2])
    assert cache.batch_size == 2
    out = model(ids[:1, 31:33].expand(2, 2), cache)
    torch.testing.assert_close(out, full[:2, 31:33], rtol=1e-4, atol=1e-5)


@torch.no_grad()
def test_save_load_round_trip_is_bitwise(model, ids, tmp_path):
    model.save_pretrained(tmp_path)
    loaded = MiniMaxM1ForCausalLM.from_pretrained(tmp_path)
    assert loaded.config == model.config
    original, restored = model.state_dict(), loaded.state_dict()
    assert original.keys() == restored.keys()
    for name in original:
        assert torch.equal(original[name], restored[name]), name
    assert torch.equal(loaded(ids), model(ids))
    assert set(load_file(str(tmp_path / "model.safetensors"))) == set(original)


@torch.no_grad()
def test_tied_embeddings_round_trip(tmp_path):
    torch.manual_seed(0)
    model = MiniMaxM1ForCausalLM(MiniMaxM1Config.tiny(vocab_size=V, tie_word_embeddings=True, num_hidden_layers=2))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(tmp_path)
    loaded = MiniMaxM1ForCausalLM.from_pretrained(tmp_path)
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)


@torch.no_grad()
def test_bf16_model_keeps_fp32_slopes_state_and_logits(model, ids):
    half = MiniMaxM1ForCausalLM(model.config)
    half.load_state_dict(model.state_dict())
    half.to(torch.bfloat16).eval()
    lightning = half.model.layers[0].self_attn
    assert lightning._slope.dtype == torch.float32
    assert torch.equal(lightning._slope, model.model.layers[0].self_attn._slope)
    cache = half.new_cache(1)
    assert cache.layers[0].state.dtype == torch.float32
    logits = half(ids[:1, :8], cache)
    assert logits.dtype == torch.float32
    assert torch.isfinite(logits).all()
    full = model(ids[:1, :8])
    assert (logits - full).abs().max() < 0.1 * full.abs().max()  # bf16 weights, same model


def test_training_backward_reaches_every_parameter(ids):
    torch.manual_seed(0)
    model = MiniMaxM1ForCausalLM(MiniMaxM1Config.tiny(vocab_size=V))
    logits = model(ids[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    # An expert no token was routed to gets no gradient; everything else must.
    assert all(".experts." in n for n in missing), missing


@torch.no_grad()
def test_sharded_checkpoint_loads(model, ids, tmp_path):
    """The release ships its weights in shards listed by model.safetensors.index.json."""
    model.save_pretrained(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    (tmp_path / "model.safetensors").unlink()
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(tmp_path / shard))
    weight_map = {k: shard for shard, keys in shards.items() for k in keys}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert torch.equal(MiniMaxM1ForCausalLM.from_pretrained(tmp_path)(ids), model(ids))
