"""Train/inference mismatch, corrected: held-out learning under an induced mismatch, per correction.

bench/learning.py's in-process loop (its warm-started small Qwen2, task stream, held-out pass@1 and CISPO
settings), with the engine sampling from other weights than the learner's: each floating tensor of the
learner's state plus Gaussian noise of `--noise` times its own standard deviation, drawn afresh for every
version the engine is handed (seeded by seed and version), as tests/integration/test_mismatch_loop.py
induces it. The learner recomputes its proximal log-probs with its true weights (train.old_logp_source:
recompute), so rho = p_learner / p_engine per token is what the correction acts on. Arms (`ARMS`):

  reference  the engine samples with the learner's weights (no mismatch, no correction)
  none       perturbed engine, no correction: the learner trains on another policy's samples as its own
  tis        perturbed, token TIS: each token weighted by min(rho, 2)
  icepop     perturbed, IcePop: tokens with rho outside [0.5, 2] dropped, the others weighted by rho
  steered    perturbed, TIS (C = 2) and IcePop ([0.5, 2]) with their bounds scaled by the monitor's real
             `MismatchRule` (svc_monitor/rules/mismatch.py), fed the learner's published train_infer_corr
             and train_infer_k3 after every step, as svc_monitor reads them from `metrics`; its
             set_correction applies from the next step, as the learner applies it from `control`

Every arm of a seed trains on the same records in the same order and is evaluated with the same draws
(bench/learning.py's `pass_at_1` at `eval_seed`), so arms pair by seed. Printed: the settings and the load;
held-out pass@1 against samples (mean over seeds); per arm the final pass@1 with a 95% interval over seeds
(Student's t) and its paired difference to `none` and to `reference`; and the regime, the learner's own
statistics averaged over steps and seeds: KL(rollout || train) per token (k1, k3), the correlation of the
token probabilities, the token shares TIS truncated and IcePop dropped, and the steered arm's scales.
`--with-routing-cost` also prints bench/routing_replay.py's speed table (tokens per second of the native
sampler with and without recording the experts, R3's rollout-side cost).

Run: PYTHONPATH=. python bench/mismatch.py [--seeds 0 1 2] [--steps 30] [--noise 0.1] [--arms ...]
     [--eval-every 5] [--with-routing-cost] [--quick] [--deadline-s S]
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import torch
import transformers

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]  # the repository and the sibling bench scripts

import learning  # noqa: E402
from learning import Curve, Deadline, Settings, Stopped, Variant  # noqa: E402
from pipeline import end_of_run, on_signals  # noqa: E402

from m1flow.contracts import events  # noqa: E402
from m1flow.data.record import TaskRecord  # noqa: E402
from m1flow.registry import Registry  # noqa: E402
from m1flow.rl.correction import Bounds, CorrectionConfig  # noqa: E402
from m1flow.rl.objectives import LossSpec  # noqa: E402
from ops.warmstart import warm_started_policy  # noqa: E402
from svc_learner.update import TrainConfig  # noqa: E402
from svc_monitor.config import MismatchConfig  # noqa: E402
from svc_monitor.rules.mismatch import MismatchRule  # noqa: E402
from svc_monitor.rules.trend import t_score  # noqa: E402
from svc_monitor.schema import MetricRow  # noqa: E402
from svc_reward.client import LocalScorer  # noqa: E402


@dataclass(frozen=True)
class Arm:
    """One way of training under the mismatch: whether the engine's weights are perturbed, the
    correction the loss applies, and whether the monitor's rule scales its bounds."""

    perturbed: bool
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    steered: bool = False


ARMS: Registry[Arm] = Registry("mismatch arm")
ARMS.add("reference", Arm(perturbed=False))
ARMS.add("none", Arm(perturbed=True))
ARMS.add("tis", Arm(perturbed=True, correction=CorrectionConfig(tis_cap=2.0)))
ARMS.add("icepop", Arm(perturbed=True, correction=CorrectionConfig(icepop=Bounds(lo=0.5, hi=2.0))))
ARMS.add("steered", Arm(perturbed=True, correction=CorrectionConfig(tis_cap=2.0, icepop=Bounds(lo=0.5, hi=2.0)),
                        steered=True))

ORDER = ("reference", "none", "tis", "icepop", "steered")  # as printed

# the learner's statistics that show the regime (svc_learner.precision.mismatch_values), as printed
REGIME = {"train_infer_k1": "k1", "train_infer_k3": "k3", "train_infer_corr": "corr",
          "correction_truncated_frac": "truncated", "correction_dropped_frac": "dropped"}


def perturbed(state: dict[str, torch.Tensor], noise: float, seed: int) -> dict[str, torch.Tensor]:
    """Each floating tensor plus N(0, (noise * its std)^2) noise (a tied tensor once); the learner's untouched."""
    gen, done, out = torch.Generator().manual_seed(seed), {}, {}
    for name, tensor in state.items():
        if not tensor.is_floating_point() or tensor.numel() < 2:
            out[name] = tensor
            continue
        key = tensor.data_ptr()
        if key not in done:
            done[key] = tensor + noise * tensor.std() * torch.randn(tensor.shape, generator=gen, dtype=tensor.dtype)
        out[name] = done[key]
    return out


class Mismatched(Variant):
    """bench/learning.py's in-process loop under one arm: the engine handed perturbed weights, the
    learner recomputing its proximal log-probs with the arm's correction, the rule (steered) deciding
    the scale of its bounds from each step's statistics; every step's statistics kept."""

    def __init__(self, arm: Arm, noise: float, seed: int, rule: MismatchConfig) -> None:
        self.arm, self.noise, self.seed = arm, noise, seed
        self.rule = MismatchRule(rule) if arm.steered else None
        self.rule_cfg = rule
        self.scale = 1.0
        self.steps: list[dict[str, float]] = []  # the learner's statistics per step, with the scale in force

    def train(self, s: Settings) -> TrainConfig:
        return s.train().model_copy(update={"old_logp_source": "recompute"})

    def loss(self, s: Settings, step: int) -> LossSpec:
        return s.algorithm().model_copy(update={"correction": self.arm.correction}).loss(self.scale)

    def weights(self, version: int, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if not self.arm.perturbed or self.noise == 0:
            return state
        return perturbed(state, self.noise, 1_000_003 * self.seed + version)

    def stepped(self, step: int, stats: dict[str, float]) -> None:
        self.steps.append({**stats, "correction_scale": self.scale})
        if self.rule is None:
            return
        version, cfg = step + 1, self.rule_cfg  # the learner publishes `learner/<stat>` at step = version
        rows = [MetricRow(service="learner", name=name, step=version, value=stats[stat])
                for name, stat in ((cfg.corr_metric, "train_infer_corr"), (cfg.kl_metric, "train_infer_k3"),
                                   (cfg.dropped_metric, "correction_dropped_frac"))
                if stat in stats]
        for command in self.rule.evaluate(rows).commands:
            if command.command == "set_correction":
                self.scale = command.scale


@dataclass
class ArmRun:
    """One arm on one seed: its held-out curve and its learner's statistics per step."""

    name: str
    seed: int
    curve: Curve
    steps: list[dict[str, float]]

    def mean(self, stat: str) -> float:
        values = [s[stat] for s in self.steps if stat in s and math.isfinite(s[stat])]
        return sum(values) / len(values) if values else math.nan


def run_arm(name: str, arm: Arm, noise: float, policy: Path, s: Settings, seed: int, batches: list[TaskRecord],
            heldout: list[events.Prompt], deadline: Deadline, scorer: LocalScorer, rule: MismatchConfig) -> ArmRun:
    """Train one arm (bench/learning.py's run_inproc under `Mismatched`), then evaluate its checkpoints."""
    run = Path(tempfile.mkdtemp(prefix=f"m1flow-bench-mismatch-{name}-"))
    variant = Mismatched(arm, noise, seed, rule)
    try:
        print(f"seed {seed}: {name} ...", flush=True)
        done = learning.run_inproc(policy, s, seed, batches, run, deadline, scorer, variant)
        curve = learning.evaluated(name, seed, done, s, batches, heldout, deadline, scorer)
    finally:
        shutil.rmtree(run, ignore_errors=True)
    return ArmRun(name, seed, curve, variant.steps)


def arm_names(arms: Sequence[str], noises: Sequence[float]) -> list[tuple[str, Arm, float]]:
    """(label, arm, noise) to run: the unperturbed arms once, then each perturbed arm once per strength
    (labelled name@strength when there are several), strength by strength."""
    chosen = [(name, ARMS.get(name)) for name in arms]
    out = [(name, arm, 0.0) for name, arm in chosen if not arm.perturbed]
    for noise in noises:
        out += [(name if len(noises) == 1 else f"{name}@{noise:g}", arm, noise) for name, arm in chosen if arm.perturbed]
    return out


def run(arms: Sequence[str], noises: Sequence[float], seeds: Sequence[int], s: Settings, policy: Path,
        deadline: Deadline, scorer: LocalScorer, rule: MismatchConfig,
        runs: dict[str, list[ArmRun]] | None = None) -> dict[str, list[ArmRun]]:
    """Every arm on every seed (seed by seed, so that a deadline leaves whole seeds); label -> runs,
    filled in place so that a stopped run still reports what it finished."""
    runs = {} if runs is None else runs
    batches, heldout = learning.first_records(s), learning.heldout_prompts(s)
    plan = arm_names(arms, noises)
    for label, _, _ in plan:
        runs.setdefault(label, [])
    for seed in seeds:
        for label, arm, noise in plan:
            runs[label].append(run_arm(label, arm, noise, policy, s, seed, batches, heldout, deadline, scorer, rule))
    return runs


# ---- the report ----------------------------------------------------------------------------
def interval(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% interval over seeds (Student's t); nan below 2 values."""
    if not values:
        return math.nan, math.nan
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    return mean, t_score(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def paired(a: Sequence[ArmRun], b: Sequence[ArmRun]) -> list[float]:
    """Final pass@1 of a minus b, seed by seed (the seeds both finished)."""
    theirs = {r.seed: r.curve.final for r in b}
    return [r.curve.final - theirs[r.seed] for r in a if r.seed in theirs]


def cell(mean: float, half: float, digits: int = 3) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:+.{digits}f} ± {half:.{digits}f}" if not math.isnan(half) else f"{mean:+.{digits}f}"


def report(runs: dict[str, list[ArmRun]], s: Settings) -> None:
    """The curve table (mean over seeds), then per arm the final pass@1 and the regime."""
    runs = {label: rs for label, rs in runs.items() if rs}
    if not runs:
        print("no arm finished")
        return
    means = {label: learning.mean_curve([r.curve for r in rs]) for label, rs in runs.items()}
    steps = sorted(set.intersection(*({p.step for p in m} for m in means.values())))
    print("\nheld-out pass@1 against samples (mean over seeds):\n")
    print("| samples | " + " | ".join(runs) + " |\n|---|" + "---|" * len(runs))
    for step in steps:
        row = [next(p.pass1 for p in means[label] if p.step == step) for label in runs]
        print(f"| {step * s.samples_per_step} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    reference = runs.get("reference", [])
    print("\nfinal pass@1 (95% over seeds, Student's t), its paired difference to `none` (at the same strength) "
          "and to `reference`, "
          "and the regime (the learner's statistics, mean over steps and seeds):\n")
    print("| arm | seeds | final pass@1 | - none | - reference | k1 | k3 | corr | truncated | dropped | scale "
          "(mean, min) |\n|---|---|---|---|---|---|---|---|---|---|---|")
    for label, rs in runs.items():
        final = interval([r.curve.final for r in rs])
        regime = {short: statistics.fmean([r.mean(stat) for r in rs]) for stat, short in REGIME.items()}
        scales = [st["correction_scale"] for r in rs for st in r.steps]
        strength = label.partition("@")[2]  # `none` at the same strength
        none = runs.get(f"none@{strength}" if strength else "none", [])
        to_none = cell(*interval(paired(rs, none))) if rs is not none and none else "-"
        to_ref = cell(*interval(paired(rs, reference))) if rs is not reference and reference else "-"
        shown = {k: "-" if math.isnan(v) else f"{v:.4f}" for k, v in regime.items()}
        scale = f"{statistics.fmean(scales):.3f}, {min(scales):.3f}" if ARMS.get(label.split("@")[0]).steered else "-"
        print(f"| {label} | {len(rs)} | {final[0]:.3f} ± {final[1]:.3f} | {to_none} | {to_ref} | {shown['k1']} | "
              f"{shown['k3']} | {shown['corr']} | {shown['truncated']} | {shown['dropped']} | {scale} |")
    orders = {note for rs in runs.values() for r in rs for note in r.curve.notes if note.startswith("records")}
    print(f"every arm and seed: {' / '.join(sorted(orders))}")
    for label, rs in runs.items():
        if ARMS.get(label.split("@")[0]).steered:
            for r in rs:
                print(f"{label} seed {r.seed}: scale per step " + " ".join(f"{st['correction_scale']:g}" for st in r.steps))


def routing_cost() -> None:
    """bench/routing_replay.py's speed table: 64 rows decoding together, as its README row."""
    import routing_replay

    routing_replay.speed_table(routing_replay.parse(["--prompts", "8", "--n", "8", "--new-tokens", "32",
                                                     "--rounds", "4"]))


def default_deadline(s: Settings, runs: int) -> float:
    """Warm start, then per arm and seed: start-up, twice the 0.025 s a sample measured on 2 cores at load
    14, and the evaluations."""
    return 300.0 + runs * (30.0 + 0.05 * s.steps * s.samples_per_step + 10.0 * len(s.eval_steps()))


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=30, help="batches per arm")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8, help="prompts per batch")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--minibatches", type=int, default=2)
    ap.add_argument("--window", type=int, default=8, help="output tokens")
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--eval-prompts", type=int, default=64)
    ap.add_argument("--eval-samples", type=int, default=8)
    ap.add_argument("--noise", type=float, nargs="+", default=[0.1],
                    help="the engine's weight noise, as a fraction of each tensor's std (one or more strengths)")
    ap.add_argument("--arms", nargs="+", default=list(ORDER), choices=ARMS.names())
    ap.add_argument("--rule", default="{}", help="MismatchConfig fields as JSON over the monitor's defaults")
    ap.add_argument("--with-routing-cost", action="store_true", help="also R3's rollout-side cost")
    ap.add_argument("--quick", action="store_true", help="a 2-minute smoke: 1 seed, 6 batches, small evaluation")
    ap.add_argument("--deadline-s", type=float, default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.eval_every, args.eval_prompts, args.eval_samples = [0], 6, 3, 16, 4
    return args


def main() -> None:
    args = parse()
    s = Settings(steps=args.steps, group=args.group, batch=args.batch, lr=args.lr, minibatches=args.minibatches,
                 window=args.window, eval_every=args.eval_every, eval_prompts=args.eval_prompts,
                 eval_samples=args.eval_samples)
    rule = MismatchConfig.model_validate({**MismatchConfig().model_dump(), "enabled": True,
                                          **json.loads(args.rule)})
    plan = arm_names(args.arms, args.noise)
    deadline = Deadline(args.deadline_s or default_deadline(s, len(plan) * len(args.seeds)))
    on_signals(deadline)
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()  # a bar per checkpoint load and write otherwise
    runs: dict[str, list[ArmRun]] = {}
    reason = ""
    home = Path(tempfile.mkdtemp(prefix="m1flow-bench-mismatch-policy-"))
    scorer = LocalScorer()
    try:
        cold = learning.parse([])  # bench/learning.py's cold start
        policy = warm_started_policy(home / "p0", learning.warm_start(cold.sft_steps, cold.form_noise, cold.label_noise))
        print(f"{len(args.seeds)} seeds x {len(plan)} arms ({', '.join(label for label, _, _ in plan)}) x {s.steps} "
              f"batches x {s.batch} prompts x {s.group} samples, eval every {s.eval_every} on {s.eval_prompts} x "
              f"{s.eval_samples}, engine weight noise {args.noise} of each tensor's std, deadline "
              f"{deadline.seconds:.0f}s, load average {', '.join(f'{x:.1f}' for x in psutil.getloadavg())}", flush=True)
        print(f"every arm: {learning.matched_settings(s)[0].removeprefix('matched: ')}; old log-probs recomputed "
              "by the learner (old_logp_source: recompute)", flush=True)
        print(f"steered: MismatchRule {rule.model_dump(exclude={'corr_metric', 'kl_metric'})}", flush=True)
        run(args.arms, args.noise, args.seeds, s, policy, deadline, scorer, rule, runs)
    except Stopped as exc:
        reason = str(exc)
    finally:
        scorer.close()
        shutil.rmtree(home, ignore_errors=True)
        report(runs, s)
    try:
        if args.with_routing_cost and not reason:
            deadline.check("routing cost")
            print("\nR3, the rollout-side cost of recording experts (bench/routing_replay.py's speed table):")
            routing_cost()
    except Stopped as exc:
        reason = str(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    end_of_run(reason)


if __name__ == "__main__":
    main()
