"""A learner step and native decoding on CUDA, next to their peers in the same run.

Learner: one train_on_batch (CISPO, 2 minibatches) on a batch of ragged random samples, bf16
weights with the fp32 LM head (the learner's CUDA default), for the hybrid model (per-sample rows
trimmed to the longest of each micro-batch) and a Qwen2 of the same width (packed rows, position_ids
restarting per sample: `packing="packed"`, which `auto` chooses only under flash attention), each with
micro-batches by token budget against one padded minibatch.
Decoding: the native engine's batched cached decoding of the hybrid model (m1flow.model.sample_batch)
on CUDA against the same on the CPU (fewer tokens there). Models are randomly initialised: speed
only. Part of bench/gpu_check.sh; also runs on the CPU (`--device cpu --quick`) as a smoke test.

    PYTHONPATH=. python bench/cuda_learner_decode.py [--device cuda] [--quick]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from m1flow.model import MiniMaxM1Config, MiniMaxM1ForCausalLM, sample_batch  # noqa: E402
from m1flow.rl.objectives import LossSpec  # noqa: E402
from svc_learner.batching import Batch, pack_sequences  # noqa: E402
from svc_learner.optim import make_optimizer  # noqa: E402
from svc_learner.placement import keep_head_fp32  # noqa: E402
from svc_learner.update import TrainConfig, train_on_batch  # noqa: E402


def hybrid(width: int, layers: int, vocab: int) -> torch.nn.Module:
    return MiniMaxM1ForCausalLM(MiniMaxM1Config.tiny(vocab_size=vocab, num_hidden_layers=layers, hidden_size=width,
                                                     intermediate_size=2 * width, head_dim=width // 8))


def qwen2(width: int, layers: int, vocab: int) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("qwen2", hidden_size=width, intermediate_size=3 * width, num_hidden_layers=layers,
                                  num_attention_heads=8, num_key_value_heads=2, vocab_size=vocab,
                                  layer_types=["full_attention"] * layers, tie_word_embeddings=False)
    attention = "flash_attention_2" if _has_flash_attn() else "sdpa"
    return AutoModelForCausalLM.from_config(config, attn_implementation=attention)


def _has_flash_attn() -> bool:
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


def ragged_batch(n: int, longest: int, vocab: int, device: torch.device) -> Batch:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(longest // 8, longest + 1, (n,), generator=g).tolist()
    prompts = [torch.randint(0, vocab, (64,), generator=g).tolist() for _ in lengths]
    responses = [torch.randint(0, vocab, (k,), generator=g).tolist() for k in lengths]
    ids, mask, logp = pack_sequences(prompts, responses, [[-1.0] * k for k in lengths])
    return Batch(ids, mask, logp, torch.randn(n, generator=g), torch.zeros(n, dtype=torch.long),
                 torch.arange(n) // 8).to(device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def learner_step(build, device: torch.device, batch: Batch, budget: int | None, repeat: int) -> tuple[float, float]:
    """Seconds per step and peak GiB (CUDA) of train_on_batch."""
    model = build().to(device, torch.bfloat16 if device.type == "cuda" else torch.float32)
    keep_head_fp32(model)
    cfg = TrainConfig(lr=1e-5, minibatches=2, max_tokens_per_micro_batch=budget, packing="packed")
    optimizer = make_optimizer(model.parameters(), cfg.lr)
    train_on_batch(model, optimizer, batch, cfg, LossSpec("cispo"))  # warm-up (kernels, allocator)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    started = time.perf_counter()
    for _ in range(repeat):
        train_on_batch(model, optimizer, batch, cfg, LossSpec("cispo"))
    sync(device)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    return (time.perf_counter() - started) / repeat, peak


def decode_rate(device: torch.device, width: int, layers: int, vocab: int, prompts: int, n: int,
                tokens: int) -> float:
    model = hybrid(width, layers, vocab).to(device).eval()
    ids = [torch.randint(0, vocab, (32,)).tolist() for _ in range(prompts)]
    gens = [torch.Generator(device=device).manual_seed(i) for i in range(prompts)]
    with torch.no_grad():
        sample_batch(model, ids[:1], 1, 4, generators=gens[:1])  # warm-up
        sync(device)
        started = time.perf_counter()
        done = sample_batch(model, ids, n, tokens, generators=gens, early_stop_run=10**9)
        sync(device)
    return sum(len(c.tokens) for group in done for c in group) / (time.perf_counter() - started)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="small sizes (a CPU smoke run)")
    args = ap.parse_args()
    device = torch.device(args.device)
    width, layers, vocab = (128, 2, 512) if args.quick else (1024, 8, 32768)
    n, longest, budget = (8, 64, 256) if args.quick else (64, 2048, 32768)
    batch = ragged_batch(n, longest, vocab, device)
    real = int(batch.response_mask.sum() + 64 * n)
    print(f"learner step on {device}: {n} samples, {real} real tokens, padded to {batch.input_ids.numel()}; "
          f"width {width}, {layers} layers, vocab {vocab}; token budget {budget} vs one padded minibatch")
    print("\n| model | micro-batches | s / step | peak GiB | vs padded |")
    print("|---|---|---|---|---|")
    builders = {"hybrid": lambda: hybrid(width, layers, vocab), "qwen2": lambda: qwen2(width, layers, vocab)}
    for name, build in builders.items():
        padded = learner_step(build, device, batch, None, 1 if args.quick else 3)
        packed = learner_step(build, device, batch, budget, 1 if args.quick else 3)
        for label, (seconds, peak) in (("one padded minibatch", padded), (f"{budget}-token budget", packed)):
            print(f"| {name} | {label} | {seconds:.3f} | {peak:.2f} | {padded[0] / seconds:.2f}x |")

    prompts, samples, tokens = (2, 2, 8) if args.quick else (64, 8, 256)
    print(f"\nnative decoding (hybrid, width {width}, {layers} layers): {prompts} prompts x n={samples}")
    print("\n| device | new tokens each | tokens/s | vs CPU |")
    print("|---|---|---|---|")
    cpu_tokens = min(tokens, 32)
    cpu = decode_rate(torch.device("cpu"), width, layers, vocab, min(prompts, 8), samples, cpu_tokens)
    rows = [("cpu", cpu_tokens, cpu)]
    if device.type != "cpu":
        rows.append((str(device), tokens, decode_rate(device, width, layers, vocab, prompts, samples, tokens)))
    for name, each, rate in rows:
        print(f"| {name} | {each} | {rate:.0f} | {rate / cpu:.1f}x |")


if __name__ == "__main__":
    main()
