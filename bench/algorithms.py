"""GRPO vs DAPO vs CISPO on a generated task, from the same SFT warm start.

    python bench/algorithms.py                     # chained sums, 3 algorithms x 5 seeds, ~25 min on 1 core
    python bench/algorithms.py --task arith        # 2-3 token arithmetic answers
    python bench/algorithms.py --seeds 0 --steps 4     # a quick look

Tasks: "chain" (m1flow.tasks.chain: "4+7+2+9=" -> "4+7=11,11+2=13,13+9=22;22", 13-40 tokens of
which a few partial-sum digits decide the reward) is the default, because the objectives differ
only where importance ratios leave the trust region, and that needs long responses with rare,
low-probability tokens (the report's setting). "arith" ("47+38=" -> "85") has 2-3 token answers
on which the clip almost never fires.

Everything but the objective's mask is shared: the warm-started tiny hybrid model, the prompts of
each step (per seed), group size, learning rate, AdamW (0.9, 0.95, 1e-15), and the number of
off-policy minibatch updates per generation batch (the report: 16; here --minibatches). Each step
samples G completions per prompt with the native engine (temperature 1, top-p 1, so the recorded
log-probs are the behaviour policy's), rewards a correct final answer with 1 (no format reward, no
overlong penalty), and selects each group as the learner does (m1flow.rl: GRPO's group
normalisation, groups whose rewards are all equal dropped by dynamic sampling), builds the batch
with the learner's batching, shuffles the samples (the learner cuts contiguous minibatches;
unshuffled, each would hold 2-3 samples of one group, often all wrong, and the runs were much
noisier), then runs the learner's train_on_batch with the algorithm's registered policy loss. --eps-low / --eps-high override every algorithm's clip range (a probe: DAPO with
both at 1e9 is the unclipped importance-sampled policy gradient).

The RL data is a fixed pool of --pool problems (as the report trains on a fixed, filtered set);
each step draws --prompts of them (the same draws for every algorithm of a seed). Accuracy is
greedy decoding, measured on the pool ("pool acc", what RL optimises: the steps-to-target metric)
and on held-out problems ("held-out acc": a tiny model barely generalises from a few minutes of
RL, so expect little movement there). Printed per algorithm, mean over seeds: pool accuracy after
the last step, the first evaluated step at which pool accuracy reached --target, held-out
accuracy, and the objective's statistics.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from m1flow import chat, checkpoint  # noqa: E402
from m1flow.contracts import events  # noqa: E402
from m1flow.model import MiniMaxM1ForCausalLM, sample  # noqa: E402
from m1flow.rl.config import AlgorithmConfig  # noqa: E402
from m1flow.rl.selection import Selected  # noqa: E402
from m1flow.rl.shaping import ShapingConfig  # noqa: E402
from m1flow.status import Status  # noqa: E402
from m1flow.tasks import arith, chain  # noqa: E402
from m1flow.warmstart import WarmStartConfig, warm_started_policy  # noqa: E402
from svc_learner.batching import Batch, to_batch  # noqa: E402
from svc_learner.optim import make_optimizer  # noqa: E402
from svc_learner.update import LearnerConfig, train_on_batch  # noqa: E402

Problem = arith.ArithProblem | chain.ChainProblem


@dataclass(frozen=True)
class Task:
    """What the benchmark needs of a task; every other setting is shared by the two."""

    module: ModuleType  # problems(seed, n, max_operand=..., prefix=...) and parse_answer(response)
    warmstart: WarmStartConfig
    max_new_tokens: int  # room for the longest reference response and its end-of-sequence
    defaults: dict  # argparse defaults that make the comparison meaningful on this task


TASKS = {
    # The warm start saw operands up to 12; RL asks up to 30, so the model starts weak.
    "arith": Task(arith, WarmStartConfig(), max_new_tokens=6,
                  defaults=dict(max_operand=30, steps=40, prompts=16, minibatches=8, lr=1e-4, target=0.55,
                                eval_every=5)),
    # The warm start saw the pool's distribution (3-5 terms up to 12) with noisy labels and is
    # under-trained: greedy right on about a third, with real but minor mass on right digits.
    "chain": Task(chain, WarmStartConfig(task="chain"), max_new_tokens=48,
                  defaults=dict(max_operand=12, steps=20, prompts=32, minibatches=16, lr=5e-5, target=0.5,
                                eval_every=4)),
}


def prompt_ids(tok, problem: Problem) -> list[int]:
    return chat.prompt_ids(tok, problem.text)


def is_correct(task: Task, tok, tokens: list[int], problem: Problem) -> bool:
    return task.module.parse_answer(tok.decode(tokens, skip_special_tokens=True)) == int(problem.answer)


def accuracy(task: Task, model: MiniMaxM1ForCausalLM, tok, val: list[Problem]) -> float:
    hits = 0
    for p in val:
        [c] = sample(model, prompt_ids(tok, p), n=1, max_new_tokens=task.max_new_tokens, temperature=0.0,
                     eos_id=tok.eos_token_id)
        hits += is_correct(task, tok, c.tokens, p)
    return hits / len(val)


def scored_group(task: Task, tok, problem: Problem, completions, version: int) -> events.ScoredGroup:
    """A group as the reward service writes it: the verifier's reward (1 for a right answer) per sample."""
    ids = prompt_ids(tok, problem)
    group = events.ScoredGroup(group_id=problem.prompt_id, group_size=len(completions))
    for i, c in enumerate(completions):
        group.samples.add(index=i, prompt_token_ids=ids, token_ids=c.tokens, logprobs=c.logprobs,
                          reward=float(is_correct(task, tok, c.tokens, problem)), status=Status.OK,
                          policy_version=version, max_new_tokens=task.max_new_tokens)
    return group


def rollout_batch(task: Task, model, tok, prompts: list[Problem], group: int, version: int,
                  gen: torch.Generator, algorithm: AlgorithmConfig) -> Batch | None:
    """Sample, score, select (m1flow.rl) and pack one generation batch; None when every group was dropped."""
    selected = []
    for p in prompts:
        done = sample(model, prompt_ids(tok, p), n=group, max_new_tokens=task.max_new_tokens, temperature=1.0,
                      top_p=1.0, eos_id=tok.eos_token_id, generator=gen)
        outcome = algorithm.select(scored_group(task, tok, p, done, version), current_version=version)
        if isinstance(outcome, Selected):
            selected.append(outcome)
    if not selected:
        return None
    batch = to_batch(selected, tok.pad_token_id)
    # the learner splits the batch into contiguous minibatches: shuffle so that each one mixes
    # groups (and positive with negative samples), as a large generation batch would
    return batch.select(torch.randperm(len(batch), generator=gen))


def run(task: Task, algo: str, seed: int, policy_dir: Path, tok, pool: list[Problem],
        val: list[Problem], args: argparse.Namespace, start: tuple[float, float]) -> dict:
    torch.manual_seed(seed)
    model = MiniMaxM1ForCausalLM.from_pretrained(policy_dir)
    cfg = LearnerConfig(lr=args.lr, minibatches=args.minibatches, grad_clip=args.grad_clip)
    algorithm = AlgorithmConfig(policy_loss=algo, eps_low=args.eps_low, eps_high=args.eps_high,
                                shaping=ShapingConfig(format_reward=0.0, overlong_penalty=False))
    optimizer = make_optimizer(model.parameters(), cfg.lr)
    draws = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    curve, sums = [(0, *start)], {"clip_high_frac": 0.0, "masked_frac": 0.0, "ratio_mean": 0.0, "n": 0}
    for step in range(args.steps):
        batch = rollout_batch(task, model, tok, draws.sample(pool, args.prompts), args.group, step, gen, algorithm)
        stats = train_on_batch(model, optimizer, batch, cfg, algorithm.loss()) if batch is not None else {}
        if stats.get("updates"):
            sums["n"] += 1
            for k in ("clip_high_frac", "masked_frac", "ratio_mean"):
                sums[k] += stats[k]
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            curve.append((step + 1, accuracy(task, model, tok, pool), accuracy(task, model, tok, val)))
    reached = next((s for s, acc, _ in curve if acc >= args.target), None)
    n = max(sums.pop("n"), 1)
    return {"final": curve[-1][1], "held_out": curve[-1][2], "reached": reached, "curve": curve,
            **{k: v / n for k, v in sums.items()}}


def _mean_sd(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.3f} +- {statistics.stdev(xs):.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=sorted(TASKS), default="chain")
    p.add_argument("--algos", nargs="+", default=["grpo", "dapo", "cispo"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, help="generation batches (learner steps) per run (default: per task)")
    p.add_argument("--prompts", type=int, help="prompts per generation batch (default: per task)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--minibatches", type=int, help="off-policy updates per generation batch (default: per task)")
    p.add_argument("--lr", type=float, help="default: per task")
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eps-low", type=float, help="override every algorithm's eps_low (default: its own)")
    p.add_argument("--eps-high", type=float, help="override every algorithm's eps_high (default: its own)")
    p.add_argument("--pool", type=int, default=32, help="RL training problems")
    p.add_argument("--val", type=int, default=64, help="held-out problems")
    p.add_argument("--eval-every", type=int, help="default: per task")
    p.add_argument("--target", type=float, help="pool accuracy to count steps to (default: per task)")
    p.add_argument("--max-operand", type=int,
                   help="operands up to this; above the warm start's range, so the model starts weak")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads; 1 avoids OpenMP oversubscription stalls on a shared machine")
    args = p.parse_args()
    task = TASKS[args.task]
    for name, value in task.defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)

    torch.set_num_threads(args.threads)
    t0 = time.time()
    policy_dir = warm_started_policy(Path(tempfile.mkdtemp(prefix="m1flow-bench-")) / "policy", task.warmstart)
    tok = checkpoint.load_tokenizer(policy_dir)
    pool = task.module.problems(seed=1_000, n=args.pool, max_operand=args.max_operand, prefix="rl")
    seen = {p.text for p in pool}
    val = [p for p in task.module.problems(seed=777, n=4 * args.val, max_operand=args.max_operand, prefix="val")
           if p.text not in seen][: args.val]
    warm = MiniMaxM1ForCausalLM.from_pretrained(policy_dir)
    start = (accuracy(task, warm, tok, pool), accuracy(task, warm, tok, val))
    print(f"task {args.task} (operands up to {args.max_operand}); warm start ready in {time.time() - t0:.0f}s; greedy accuracy pool {start[0]:.3f} ({len(pool)}), "
          f"held-out {start[1]:.3f} ({len(val)}); {args.steps} steps x {args.prompts} prompts x G={args.group}, "
          f"{args.minibatches} minibatch updates per batch, lr {args.lr}", flush=True)
    results: dict[str, list[dict]] = {a: [] for a in args.algos}
    for seed in args.seeds:
        for algo in args.algos:
            t = time.time()
            r = run(task, algo, seed, policy_dir, tok, pool, val, args, start)
            results[algo].append(r)
            curve = " ".join(f"{s}:{a:.2f}/{h:.2f}" for s, a, h in r["curve"])
            print(f"  seed {seed} {algo:5s} step:pool/held-out {curve} ({time.time() - t:.0f}s)", flush=True)

    print(f"\n{'algo':5s} | {'pool acc after ' + str(args.steps) + ' steps':>25} | "
          f"{'steps to pool acc >= ' + str(args.target):>25} | {'held-out acc':>15} | {'r > 1+eps_hi':>12} | "
          f"{'tokens masked':>13} | {'mean ratio':>10}")
    for algo, rs in results.items():
        reached = [r["reached"] for r in rs if r["reached"] is not None]
        steps_to = (f"{statistics.mean(reached):.1f} ({len(reached)}/{len(rs)} seeds)" if reached
                    else f"not reached (0/{len(rs)})")
        print(f"{algo:5s} | {_mean_sd([r['final'] for r in rs]):>25} | {steps_to:>25} | "
              f"{_mean_sd([r['held_out'] for r in rs]):>15} | {statistics.mean(r['clip_high_frac'] for r in rs):>12.3f} | "
              f"{statistics.mean(r['masked_frac'] for r in rs):>13.3f} | "
              f"{statistics.mean(r['ratio_mean'] for r in rs):>10.3f}")
    print(f"total {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
