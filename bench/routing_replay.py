"""What rollout routing replay (R3) costs: the bytes it adds to `rollouts` and `scored` at MiniMax-M1's
shape (32 experts, top-2, 80 MoE layers), and the native engine's tokens per second with and without
recording the experts, in the same run.

Bytes: a Rollout built as bench/topic_bytes.py builds it (window-long responses, token ids spread
over the vocabulary), framed by m1flow.bus.codec, with and without `routed_experts` (one byte per
position, layer and slot; uniformly random experts: a record's size does not depend on them). Speed: the
native sampler (m1flow.model.sample_batch) on a small hybrid model, the sides alternated over
rounds, each round the same prompts and seeds.

Run: PYTHONPATH=. python bench/routing_replay.py [--layers 80 --top-k 2 --experts 32] [--rounds 3]
"""
from __future__ import annotations

import argparse
import random
import time

import torch

from bench.topic_bytes import RECORD_LIMIT, rollout, scored
from m1flow.bus import codec
from m1flow.model import MiniMaxM1Config, MiniMaxM1ForCausalLM, sample_batch
from m1flow.routed_experts import encode


def bytes_table(args: argparse.Namespace) -> None:
    rng, gen = random.Random(0), torch.Generator().manual_seed(0)
    print(f"bytes: {args.layers} MoE layers, top-{args.top_k} of {args.experts} experts, prompt "
          f"{args.prompt_tokens} tokens, group {args.group}, vocabulary {args.vocab}")
    print(f"{'tokens':>8}{'rollout B':>12}{'with R3':>12}{'ratio':>7}{'R3 B/token':>11}{'tokens B/token':>15}"
          f"{'of 16MiB':>9}{'scored B':>12}{'with R3':>12}{'of 16MiB':>9}")
    for window in args.windows:
        plain = rollout(window, args.prompt_tokens, args.vocab, rng)
        positions = args.prompt_tokens + window - 1
        experts = torch.randint(args.experts, (positions, args.layers, args.top_k), generator=gen)
        with_r3 = type(plain)()
        with_r3.CopyFrom(plain)
        with_r3.routed_experts.CopyFrom(encode(experts, args.experts))
        r_plain, r_r3 = len(codec.encode(plain)), len(codec.encode(with_r3))
        group = scored(with_r3, args.group)
        group_plain = len(codec.encode(group))
        for sample in group.samples:
            sample.routed_experts.CopyFrom(with_r3.routed_experts)
        group_r3 = len(codec.encode(group))
        empty = rollout(0, args.prompt_tokens, args.vocab, rng)
        token_bytes = len(plain.SerializeToString()) - len(empty.SerializeToString())
        print(f"{window:>8}{r_plain:>12}{r_r3:>12}{r_r3 / r_plain:>7.2f}{(r_r3 - r_plain) / window:>11.1f}"
              f"{token_bytes / window:>15.1f}{r_r3 / RECORD_LIMIT:>9.2f}{group_plain:>12}{group_r3:>12}"
              f"{group_r3 / RECORD_LIMIT:>9.2f}")
    print("R3 B/token: the record's bytes over the response's tokens (the prompt's positions included); tokens "
          "B/token: a response token's own bytes (id varint, log-prob, 4 characters of text)")


def speed_table(args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    config = MiniMaxM1Config.tiny(vocab_size=512, num_hidden_layers=args.model_layers,
                                  num_local_experts=args.model_experts, num_experts_per_tok=args.top_k)
    model = MiniMaxM1ForCausalLM(config).eval()
    prompts = [[random.Random(i).randrange(512) for _ in range(32)] for i in range(args.prompts)]
    seconds = {False: 0.0, True: 0.0}
    tokens = {False: 0, True: 0}
    for round_ in range(args.rounds + 1):  # round 0 warms up, not counted
        for record in ((False, True) if round_ % 2 else (True, False)):
            gens = [torch.Generator().manual_seed(i) for i in range(args.prompts)]
            started = time.perf_counter()
            out = sample_batch(model, prompts, n=args.n, max_new_tokens=args.new_tokens, generators=gens,
                               record_routing=record)
            if round_:
                seconds[record] += time.perf_counter() - started
                tokens[record] += sum(len(c.tokens) for g in out for c in g)
    rate = {k: tokens[k] / seconds[k] for k in seconds}
    print(f"speed: native sampler, hybrid {args.model_layers} layers x {args.model_experts} experts top-{args.top_k}, "
          f"hidden {config.hidden_size}, {args.prompts} prompts x {args.n} samples x {args.new_tokens} tokens, "
          f"{args.rounds} rounds, {args.threads} threads, cpu")
    print(f"{'side':>22}{'tokens':>9}{'seconds':>9}{'tokens/s':>10}{'ratio':>7}")
    for record, name in ((False, "without recording"), (True, "recording experts")):
        print(f"{name:>22}{tokens[record]:>9}{seconds[record]:>9.2f}{rate[record]:>10.1f}{rate[record] / rate[False]:>7.3f}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The settings (bench/mismatch.py --with-routing-cost takes the defaults of the speed table)."""
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=80, help="MoE layers of the record (MiniMax-M1: 80)")
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--experts", type=int, default=32)
    p.add_argument("--vocab", type=int, default=200_064)
    p.add_argument("--group", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--windows", type=int, nargs="*", default=[1024, 8192, 40_960, 81_920])
    p.add_argument("--model-layers", type=int, default=4, help="speed: the small model's layers")
    p.add_argument("--model-experts", type=int, default=8)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args(argv)


def main() -> None:
    args = parse()
    bytes_table(args)
    print()
    speed_table(args)


if __name__ == "__main__":
    main()
