"""How long a rollout or eval replica takes to take a new policy version: built whole from the
directory (transformers' from_pretrained and the tokenizer, what every version cost before) against
copied into the live model (m1flow.engines.reload), through the engines' own `load`.

    PYTHONPATH=. python bench/policy_reload.py [--rounds 10]

Each round loads two versions that differ only in their weights, alternately, so every load is a real
change of policy; the whole side is forced by forgetting the engine's layout before each load. Printed per
model: parameters, weight bytes, milliseconds per load on each side, their ratio, and how many of the
in-place side's loads were copies (the regime: every one of them, or the measurement is of the wrong path).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from m1flow import checkpoint
from m1flow.contracts import events
from bench.rollout import announce
from m1flow.engines.base import BatchEngine
from m1flow.engines.hf import HFEngine
from m1flow.engines.native import NativeEngine
from m1flow.tokenizer import build_tokenizer
from ops.warmstart import WarmStartConfig, build_model

MODELS = {  # name: (engine, warm-start config)
    "qwen2 small (bench/learning.py's)": ("hf", WarmStartConfig(arch="qwen2")),
    "qwen2 wider (512 x 8 layers)": ("hf", WarmStartConfig(arch="qwen2", model_overrides={
        "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8, "num_attention_heads": 8})),
    "hybrid (the demo's)": ("native", WarmStartConfig(arch="minimax_m1")),
}


def two_versions(cfg: WarmStartConfig, root: Path) -> list[events.PolicyVersion]:
    """v0 and v1 of one architecture: the same files but for the weights."""
    tok = build_tokenizer()
    model = build_model(tok, cfg)
    versions = []
    for v in (0, 1):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 1e-3)
        versions.append(announce(checkpoint.save_policy(root / f"v{v}", model, tok), v))
    return versions


def timed_loads(engine: BatchEngine, versions: list[events.PolicyVersion], rounds: int, whole: bool) -> list[float]:
    engine.load(versions[-1])  # the first load is whole on both sides: not timed
    seconds = []
    for i in range(rounds):
        if whole:
            engine.layout = ""
        started = time.perf_counter()
        engine.load(versions[i % 2])
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]}, {args.rounds} loads per side, median ms\n")
    print("| model | parameters | weights MB | built whole ms | copied in place ms | whole / in place | copies |")
    print("|---|---|---|---|---|---|---|")
    for name, (kind, cfg) in MODELS.items():
        with tempfile.TemporaryDirectory() as tmp:
            versions = two_versions(cfg, Path(tmp))
            make = (lambda: HFEngine(device="cpu")) if kind == "hf" else (lambda: NativeEngine(device="cpu"))
            whole_engine, copy_engine = make(), make()
            whole = timed_loads(whole_engine, versions, args.rounds, whole=True)
            copied = timed_loads(copy_engine, versions, args.rounds, whole=False)
            params = sum(p.numel() for p in copy_engine.model.parameters())
            size = sum(f.stat().st_size for f in checkpoint.weight_files(checkpoint.path_of(versions[0].checkpoint_uri)))
            w, c = statistics.median(whole) * 1e3, statistics.median(copied) * 1e3
            print(f"| {name} | {params / 1e6:.2f} M | {size / 1e6:.1f} | {w:.1f} | {c:.1f} | {w / c:.1f}x "
                  f"| {copy_engine.reloads_in_place} of {args.rounds} |")


if __name__ == "__main__":
    main()
