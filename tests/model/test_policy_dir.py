"""A policy is a Hugging Face model directory: the project's tokenizer, the layout module
(m1flow.checkpoint) for any causal LM and the hybrid model through transformers' Auto classes."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from m1flow import chat, checkpoint, lm
from m1flow.model import MiniMaxM1ForCausalLM
from m1flow.model.remote_code import AUTO_MAP
from m1flow.tokenizer import TokenizerConfig, build_tokenizer, tokenizer_dir
from ops.warmstart import WarmStartConfig, build_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_tokenizer_is_cached_spells_digits_and_has_a_reasoning_chat_template(tok, tmp_path, monkeypatch):
    started = time.perf_counter()
    assert tokenizer_dir() == tokenizer_dir()  # trained once, then read from the cache
    assert time.perf_counter() - started < 5
    assert tok.convert_ids_to_tokens(tok.encode("1234+567", add_special_tokens=False)) == list("1234+567")
    prompt = tok.decode(chat.prompt_ids(tok, "12+7="))
    assert prompt == "<|im_start|>user\n12+7=<|im_end|>\n<|im_start|>assistant\n<think>\n"
    response = tok.encode(chat.response_text("19", "12 and 7") + chat.IM_END, add_special_tokens=False)
    assert response[-1] == tok.eos_token_id and tok.convert_tokens_to_ids(chat.THINK_END) in response
    text = tok.decode(response, skip_special_tokens=True)  # end of turn dropped, </think> kept
    assert text == "12 and 7</think>\n19" and chat.after_reasoning(text) == "\n19"
    assert tok.decode(tok.encode("any text, even ünïcödé ✓", add_special_tokens=False)) == "any text, even ünïcödé ✓"
    monkeypatch.setenv("M1FLOW_CACHE", str(tmp_path))
    other = tokenizer_dir(TokenizerConfig(vocab_size=300))
    assert other.parent == tmp_path and len(AutoTokenizer.from_pretrained(other)) <= 300


@pytest.mark.parametrize("arch", ["qwen2", "llama", "minimax_m1"])
def test_any_causal_lm_round_trips_as_a_model_directory(arch, tok, tmp_path):
    model = build_model(tok, WarmStartConfig(arch=arch, model_overrides={"num_hidden_layers": 2}))
    directory = checkpoint.save_policy(tmp_path / arch, model, tok)
    files = {p.name for p in directory.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json"} <= files
    assert json.loads((directory / "tokenizer_config.json").read_text())["chat_template"] == chat.CHAT_TEMPLATE
    generation = json.loads((directory / "generation_config.json").read_text())
    assert generation["eos_token_id"] == tok.eos_token_id and generation["top_p"] == 0.95
    loaded, loaded_tok = checkpoint.load_policy(checkpoint.uri_for(directory), checkpoint.weights_sha256(directory))
    assert type(loaded) is type(model) and not any(p.requires_grad for p in loaded.parameters())
    assert loaded_tok.chat_template == chat.CHAT_TEMPLATE
    ids = torch.tensor([chat.prompt_ids(tok, "3+4=")])
    with torch.no_grad():
        assert torch.equal(lm.logits(loaded, ids), lm.logits(model.eval(), ids))
    with pytest.raises(checkpoint.PolicyLoadError):
        checkpoint.load_policy(checkpoint.uri_for(directory), "0" * 64)


def test_hybrid_model_opens_through_transformers_auto_classes(tok, tmp_path):
    model = build_model(tok, WarmStartConfig(model_overrides={"num_hidden_layers": 2}))
    checkpoint.save_policy(tmp_path, model, tok)
    config = AutoConfig.from_pretrained(tmp_path)
    assert config.model_type == "minimax_m1" and config.attn_type_list == model.config.attn_type_list
    auto = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    saved = {**model.config.to_dict(), "auto_map": AUTO_MAP}  # plus the pointer to the remote code
    assert isinstance(auto, MiniMaxM1ForCausalLM) and auto.config.to_dict() == saved
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["architectures"] == ["MiniMaxM1ForCausalLM"] and "layernorm_mlp_alpha" in written
    fresh = AutoModelForCausalLM.from_config(config)
    assert isinstance(fresh, MiniMaxM1ForCausalLM) and fresh.config.to_dict() == saved


@pytest.mark.parametrize("arch", ["qwen2", "minimax_m1"])
def test_large_policies_are_sharded_with_an_index(arch, tok, tmp_path):
    model = build_model(tok, WarmStartConfig(arch=arch, model_overrides={"num_hidden_layers": 2}))
    directory = checkpoint.save_policy(tmp_path, model, tok, max_shard_bytes=200_000)
    index = json.loads((directory / checkpoint.WEIGHTS_INDEX).read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and not (directory / checkpoint.WEIGHTS_FILE).exists()
    assert checkpoint.weight_files(directory) == [directory / checkpoint.WEIGHTS_INDEX, *(directory / s for s in shards)]
    assert checkpoint.weights_sha256(directory) == checkpoint.weights_sha256(directory)
    loaded = checkpoint.load_model(directory)
    ids = torch.tensor([chat.prompt_ids(tok, "3+4=")])
    with torch.no_grad():
        assert torch.equal(lm.logits(loaded, ids), lm.logits(model.eval(), ids))


def test_loading_a_policy_for_inference_imports_no_trainer(tok, tmp_path):
    checkpoint.save_policy(tmp_path, build_model(tok, WarmStartConfig(arch="qwen2")), tok)
    code = ("import sys; from m1flow.checkpoint import load_policy; load_policy(sys.argv[1]); "
            "bad = [m for m in sys.modules if m.startswith(('ops.warmstart', 'svc_learner', 'm1flow.tokenizer'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, cwd=ROOT,
                   env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_learner_checkpoint_holds_policy_optimizer_and_offsets(tok, tmp_path):
    model = build_model(tok, WarmStartConfig(arch="qwen2", model_overrides={"num_hidden_layers": 1}))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lm.logits(model, torch.tensor([[1, 2, 3]])).sum().backward()
    optimizer.step()
    state = checkpoint.LearnerState(version=3, step=3, offsets={"scored/0": 42}, applied_groups=[["a", "b"]])
    directory, sha = checkpoint.save_checkpoint(tmp_path, model, tok, optimizer, state)
    assert directory.name == "v000003" and checkpoint.latest(tmp_path) == directory
    assert sha == checkpoint.weights_sha256(directory)
    assert checkpoint.load_state(directory) == state
    fresh = torch.optim.AdamW(checkpoint.load_model(directory, trainable=True).parameters(), lr=1e-3)
    checkpoint.load_optimizer(directory, fresh)
    assert fresh.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]
    assert not list(tmp_path.glob(".tmp-*"))
