"""The hf engine's shared prefill against transformers' own `generate(num_return_sequences=n)`.

A group's n samples share one prompt. transformers' `generate` with num_return_sequences copies the
prompt n times and prefills every copy; m1flow's hf engine (m1flow.engines.hf) prefills each prompt once
and repeats its KV cache n times. Both sides get the same left-padded batch of chat-formatted arithmetic
prompts, the same seed, temperature 1, top-p 1 and token window, on one torch thread; the bench checks
they draw the same tokens and prints, per groups-per-call, the median seconds of a call and the ratio.

The regime is bench/learning.py's (its warm-started Qwen2, G = 8, an 8-token window, a batch of 8 groups
per call when the rollout service has a learner batch waiting): printed are the prompt lengths, the rows
decoded and the prompt tokens each side prefills. The longer the prompt against the window, the
more a shared prefill saves.

Run: PYTHONPATH=. python bench/hf_prefill.py [--groups 1 2 8] [--n 8] [--window 8] [--rounds 9]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

from learning import Settings, first_records, warm_start  # noqa: E402

from m1flow import checkpoint  # noqa: E402
from m1flow.contracts import events  # noqa: E402
from m1flow.engines.base import GroupRequest  # noqa: E402
from m1flow.engines.hf import HFEngine  # noqa: E402
from ops.warmstart import warm_started_policy  # noqa: E402

NO_TRUNCATION = 1_000_000


def padded(engine: HFEngine, batch: list[GroupRequest]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r.prompt_ids) for r in batch)
    ids = torch.full((len(batch), width), engine.tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, r in enumerate(batch):
        ids[row, width - len(r.prompt_ids):], mask[row, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids), 1
    return ids, mask


@torch.inference_mode()
def peer(engine: HFEngine, batch: list[GroupRequest], window: int) -> list[list[int]]:
    """transformers' generate as the field calls it for G samples a prompt (TRL's GRPOTrainer repeats the
    prompt G times, which is the same work)."""
    ids, mask = padded(engine, batch)
    torch.manual_seed(batch[0].seed)
    out = engine.model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                num_return_sequences=batch[0].n, max_new_tokens=window, eos_token_id=engine.eos_id,
                                pad_token_id=engine.tokenizer.pad_token_id, output_scores=True,
                                return_dict_in_generate=True)
    return out.sequences[:, ids.shape[1]:].tolist()


def timed(call, rounds: int) -> tuple[float, object]:
    seconds, result = [], None
    for _ in range(rounds):
        started = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 2, 8])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--sft-steps", type=int, default=600)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="m1flow-bench-prefill-") as home:
        directory = warm_started_policy(Path(home) / "p0", warm_start(args.sft_steps, 0.75, 0.1))
        engine = HFEngine(batch_groups=max(args.groups), group_size=args.n, device="cpu")
        engine.load(events.PolicyVersion(version=0, checkpoint_uri=checkpoint.uri_for(directory)))
        records = first_records(Settings(steps=1, batch=max(args.groups)))
        print(f"policy {sum(p.numel() for p in engine.model.parameters())} parameters, G = {args.n}, window "
              f"{args.window} tokens, one torch thread, median of {args.rounds} calls")
        print("| groups a call | prompt tokens | rows decoded | prompt tokens prefilled: generate / m1flow "
              "| same tokens | generate s | m1flow s | m1flow / generate |")
        print("|---|---|---|---|---|---|---|---|")
        for groups in args.groups:
            batch = [GroupRequest(f"g{i}", engine.prompt_ids(r.text), args.n, args.window, 1.0, 1.0, 11, NO_TRUNCATION,
                                  0.99) for i, r in enumerate(records[:groups])]
            peer(engine, batch, args.window), engine.generate(batch)  # first-call costs out of the timing
            theirs_s, theirs = timed(lambda: peer(engine, batch, args.window), args.rounds)
            ours_s, ours = timed(lambda: engine.generate(batch), args.rounds)
            same = all(s.tokens == row[:len(s.tokens)] for s, row in zip((s for g in ours for s in g), theirs))
            width = max(len(r.prompt_ids) for r in batch)
            lengths = sorted({len(r.prompt_ids) for r in batch})
            print(f"| {groups} | {lengths[0]}-{lengths[-1]} | {groups * args.n} | "
                  f"{groups * args.n * width} / {groups * (width - 1)} | "
                  f"{'yes' if same else 'NO'} | {theirs_s:.4f} | {ours_s:.4f} | {ours_s / theirs_s:.2f} |", flush=True)


if __name__ == "__main__":
    main()
