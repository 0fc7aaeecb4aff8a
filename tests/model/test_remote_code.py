"""m1flow -> plain transformers: a hybrid policy directory opens with `trust_remote_code=True` in a
process that cannot import m1flow (the modeling files and auto_map written by m1flow.checkpoint),
and gives the native model's logits."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from m1flow import checkpoint
from m1flow.model import MiniMaxM1Config, MiniMaxM1ForCausalLM
from m1flow.model.remote_code import AUTO_MAP, FILES
from m1flow.tokenizer import build_tokenizer

OUTSIDER = r"""
import importlib.util, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
assert importlib.util.find_spec("m1flow") is None, "m1flow is importable here"
results = {}
for name, (directory, dtype, data) in torch.load(sys.argv[1]).items():
    model = AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True, dtype=getattr(torch, dtype))
    tok = AutoTokenizer.from_pretrained(directory, trust_remote_code=True)
    with torch.no_grad():
        logits = model(data["ids"]).logits
        padded = model(data["padded"], attention_mask=data["mask"]).logits
    greedy = model.generate(data["ids"][:1, :6], max_new_tokens=5, do_sample=False, use_cache=False,
                            pad_token_id=tok.pad_token_id)
    results[name] = {"logits": logits, "padded": padded, "greedy": greedy, "class": type(model).__module__}
results["m1flow"] = [m for m in sys.modules if m.startswith("m1flow")]
torch.save(results, sys.argv[2])
"""
CASES = {  # dtype, model overrides, tolerance on the logits
    "fp32": ("float32", {}, 1e-5),
    "fp64-6-heads": ("float64", {"num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 3}, 1e-10),
    "tied-prenorm": ("float32", {"tie_word_embeddings": True, "postnorm": False}, 1e-5),
}


def outsider(jobs: dict, tmp_path: Path) -> dict:
    """Run OUTSIDER on every job in one fresh interpreter whose path holds no m1flow."""
    torch.save(jobs, tmp_path / "in.pt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", OUTSIDER, str(tmp_path / "in.pt"), str(tmp_path / "out.pt")],
                   check=True, cwd=tmp_path, env=env)
    return torch.load(tmp_path / "out.pt")


def random_model(dtype: torch.dtype = torch.float32, **overrides) -> MiniMaxM1ForCausalLM:
    torch.manual_seed(0)
    model = MiniMaxM1ForCausalLM(MiniMaxM1Config.tiny(vocab_size=len(build_tokenizer()), **overrides))
    with torch.no_grad():  # non-trivial norms so a mixed-up weight shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model.to(dtype).eval()


def inputs(vocab: int) -> dict:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (2, 150), generator=g)  # over two of the remote code's 64-token blocks
    mask = torch.ones(2, 20, dtype=torch.long)
    mask[1, :7] = 0
    padded = torch.randint(0, vocab, (2, 20), generator=g)
    return {"ids": ids, "padded": padded, "mask": mask}


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    """Each case: the native model, its inputs, and what plain transformers computed from its directory."""
    tmp, tok = tmp_path_factory.mktemp("remote"), build_tokenizer()
    models, jobs = {}, {}
    for name, (dtype, overrides, _) in CASES.items():
        model = random_model(getattr(torch, dtype), **overrides)
        directory = checkpoint.save_policy(tmp / name, model, tok)
        models[name] = (model, directory)
        jobs[name] = (str(directory), dtype, inputs(model.config.vocab_size))
    return models, jobs, outsider(jobs, tmp)


@pytest.mark.parametrize("name", CASES)
def test_policy_opens_in_plain_transformers_with_the_same_logits(name, opened):
    models, jobs, results = opened
    (model, directory), data, out, atol = models[name], jobs[name][2], opened[2][name], CASES[name][2]
    config = json.loads((directory / "config.json").read_text())
    assert config["auto_map"] == AUTO_MAP and all((directory / f).exists() for f in FILES)
    assert results["m1flow"] == [] and out["class"].startswith("transformers_modules.")
    with torch.no_grad():
        native = model(data["ids"])
        short = model(data["padded"][1:, 7:])  # left padding: the real tokens give the unpadded row's logits
    torch.testing.assert_close(out["logits"], native, rtol=0, atol=atol)
    torch.testing.assert_close(out["padded"][1, 7:], short[0], rtol=0, atol=atol)
    ids = data["ids"][:1, :6]
    for _ in range(5):  # greedy decoding, token by token with the native model
        with torch.no_grad():
            ids = torch.cat([ids, model(ids)[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(out["greedy"], ids)
    assert type(checkpoint.load_model(directory)) is MiniMaxM1ForCausalLM  # m1flow still opens it as its own
