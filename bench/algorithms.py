"""CISPO against DAPO (GRPO optional) from the same warm start: can this project reproduce the report's
"CISPO reaches DAPO's accuracy in half the steps"?

    python bench/algorithms.py                      # the claim: task recheck, calibrated regime, seeds 0-4
    python bench/algorithms.py --task chain         # the chained sums without a re-check
    python bench/algorithms.py --regime stress      # the over-off-policy stress case
    python bench/algorithms.py --calibrate --steps 12 --eval-every 6   # how the lr and CISPO's eps_high were chosen
    python bench/algorithms.py --seeds 0 --steps 4  # a quick look

Batches as the learner makes them (bench/algo_run.py): a fixed number of trainable groups per step,
refilled by dynamic sampling (m1flow.rl.filling), cut into a fixed number of minibatches of whole
groups, each one AdamW update (0.9, 0.95, eps 1e-15) of svc_learner's train_on_batch with the
algorithm's registered policy loss. Everything else is shared: warm start, pool, the prompt order
of a seed, group size, lr. Accuracy is sampled (8 samples per problem at temperature 1), on the
training pool and on held-out problems.

Regimes (`REGIMES`):
* calibrated: 16 groups of 8 per step, 4 updates of 4 groups each, the lr chosen by --calibrate on
  the calibration seed with DAPO (the largest of --lrs whose per-step mean PPO-masked fraction stays at
  most 0.5% and last-minibatch mean |log ratio| at most 0.03, over 12 steps); CISPO's eps_high chosen
  there too from --eps-highs (best final pool accuracy; no lower bound).
* stress: 16 updates per batch of one group each at the same lr: the policy moves far further from the
  behaviour policy within a batch (the regime bench/algorithms.py measured before issue 15, 16 updates on
  minibatches of 4-12 responses, where CISPO collapsed).

Printed for every run, per step averaged: the PPO-masked fraction, the last minibatch's mean
|log ratio| (drift from the behaviour policy after all but one update), the share of
positive-advantage tokens whose ratio exceeds 1 + eps_high, and (task recheck) the ratios of the
re-check tokens of positive responses after the batch's updates.
"""
from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from algo_report import calibration_table, headline, run_line, warm_start_line  # noqa: E402
from algo_run import RunConfig, RunResult, run  # noqa: E402
from policy_io import Policy  # noqa: E402

from m1flow.tasks import chain  # noqa: E402

# Frozen by `--calibrate --steps 12 --eval-every 6` (bench/README.md, "Calibration"): the largest lr of
# 3e-5, 1e-4, 3e-4, 1e-3 whose DAPO run kept within DRIFT_LIMITS (3e-4: masked 0.32%, last-minibatch mean
# |log ratio| 0.010; at 1e-3 DAPO collapsed with 5.5% and 0.58), and CISPO's eps_high at that lr (of 0.28,
# 0.5, 1, 4: final pool accuracy 0.867, 0.721, 0.541, 0.834 after 12 steps).
CALIBRATED_LR = 3e-4
CISPO_EPS_HIGH = 0.28

REGIMES = {
    "calibrated": dict(batch_groups=16, updates=4, lr=CALIBRATED_LR),
    "stress": dict(batch_groups=16, updates=16, lr=CALIBRATED_LR),
}
CALIBRATION_SEED = 100  # not one of the result seeds: the choice is not tuned on what is reported
DRIFT_LIMITS = {"masked_frac": 0.005, "drift_abs_log_ratio_last": 0.03}


def problems(max_operand: int, n_pool: int, n_held_out: int) -> tuple[list[chain.ChainProblem], list[chain.ChainProblem]]:
    """The RL pool (3-5 terms, the warm start's distribution) and held-out problems not in it."""
    pool = chain.problems(seed=1_000, n=n_pool, max_operand=max_operand, prefix="rl")
    seen = {p.text for p in pool}
    held = [p for p in chain.problems(seed=777, n=4 * n_held_out, max_operand=max_operand, prefix="val")
            if p.text not in seen]
    return pool, held[:n_held_out]


def _job(args: tuple) -> RunResult:
    policy_path, tokenizer, cfg, algo, seed, n_pool, n_held, threads = args
    torch.set_num_threads(threads)
    t = time.time()
    pool, held = problems(cfg.max_operand, n_pool, n_held)
    result = run(Policy(policy_path, tokenizer), cfg, algo, seed, pool, held)
    result.seconds = time.time() - t
    return result


def run_all(policy: Policy, jobs: list[tuple[RunConfig, str, int]], args: argparse.Namespace) -> list[RunResult]:
    """Run (config, algo, seed) jobs, --jobs at a time in separate processes; print each as it ends."""
    payload = [(policy.path, policy.tok, cfg, algo, seed, args.pool, args.held_out, args.threads)
               for cfg, algo, seed in jobs]
    if args.jobs <= 1:
        results = []
        for p in payload:
            results.append(_job(p))
            print(run_line(results[-1]), flush=True)
        return results
    with multiprocessing.get_context("spawn").Pool(args.jobs) as workers:
        results = []
        for r in workers.imap(_job, payload):
            results.append(r)
            print(run_line(r), flush=True)
        return results


def config(args: argparse.Namespace, **overrides) -> RunConfig:
    fields = dict(REGIMES[args.regime], task=args.task)
    for name in ("steps", "batch_groups", "updates", "lr", "eval_every", "group"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    return RunConfig(**{**fields, **overrides})


def calibrate(policy: Policy, args: argparse.Namespace) -> None:
    """DAPO's lr (largest whose drift stays within DRIFT_LIMITS), then CISPO's eps_high (best final pool
    accuracy at that lr), both on the calibration seed."""
    seed = args.calibration_seed
    dapo = run_all(policy, [(config(args, lr=lr), "dapo", seed) for lr in args.lrs], args)
    print("\n" + warm_start_line(dapo))
    print(calibration_table(dapo, "lr", DRIFT_LIMITS))
    within = [r for r in dapo if all(r.mean(k) <= v for k, v in DRIFT_LIMITS.items())]
    if not within:
        print("no lr kept DAPO's drift within the limits: try smaller --lrs")
        return
    lr = max(r.config.lr for r in within)
    cispo = run_all(policy, [(config(args, lr=lr, eps_high=e), "cispo", seed) for e in args.eps_highs], args)
    print(calibration_table(cispo, "eps_high", DRIFT_LIMITS))
    best = max(zip(args.eps_highs, cispo), key=lambda pair: (pair[1].evals[-1].pool, -pair[0]))
    print(f"\nfrozen: lr {lr:g} (largest within {DRIFT_LIMITS} for DAPO, seed {seed}); "
          f"CISPO eps_high {best[0]:g} (best final pool accuracy {best[1].evals[-1].pool:.3f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=("recheck", "chain"), default="recheck")
    p.add_argument("--regime", choices=sorted(REGIMES), default="calibrated")
    p.add_argument("--algos", nargs="+", default=["dapo", "cispo"], help="dapo first: the reference")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, help="learner steps per run (default: RunConfig's)")
    p.add_argument("--batch-groups", type=int, help="trainable groups per step (default: the regime's)")
    p.add_argument("--updates", type=int, help="minibatch updates per batch (default: the regime's)")
    p.add_argument("--group", type=int, help="completions per prompt, G")
    p.add_argument("--lr", type=float, help="default: the regime's")
    p.add_argument("--cispo-eps-high", type=float, default=CISPO_EPS_HIGH)
    p.add_argument("--eval-every", type=int)
    p.add_argument("--pool", type=int, default=64, help="RL training problems")
    p.add_argument("--held-out", type=int, default=64, help="held-out problems")
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel, one process each")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--calibrate", action="store_true")
    p.add_argument("--calibration-seed", type=int, default=CALIBRATION_SEED)
    p.add_argument("--lrs", type=float, nargs="+", default=[3e-5, 1e-4, 3e-4, 1e-3])
    p.add_argument("--eps-highs", type=float, nargs="+", default=[0.28, 0.5, 1.0, 4.0])
    args = p.parse_args()
    t0 = time.time()
    policy = Policy.warm_start(RunConfig(task=args.task).warmstart())
    base = config(args)
    print(f"task {args.task}, regime {args.regime}: {base.steps} steps x {base.batch_groups} trainable groups of "
          f"G={base.group} (refilled by dynamic sampling), {base.updates} updates of "
          f"{base.batch_groups // base.updates} whole groups per batch, lr {base.lr:g}, AdamW eps {base.adam_eps:g}; "
          f"pool {args.pool}, held-out {args.held_out}, accuracy over {base.eval_samples} samples at T=1; "
          f"warm start ready in {time.time() - t0:.0f}s", flush=True)
    if args.calibrate:
        calibrate(policy, args)
    else:
        overrides = {"cispo": dict(eps_high=args.cispo_eps_high)}
        jobs = [(config(args, **overrides.get(a, {})), a, s) for s in args.seeds for a in args.algos]
        results = run_all(policy, jobs, args)
        print(headline(results, args.algos[0]))
    print(f"total {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
