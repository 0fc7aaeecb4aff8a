"""`make demo`: a real RL run of the whole pipeline on this machine, over a real Kafka broker.

The prompt source (svc_source) draws a weighted mixture of three generated families: arithmetic and
two reasoning-gym tasks (products, chain sums). Cold start (a short SFT on noisy answers of all three,
cached) of a small model unless `--model DIR` names one, then rollouts -> rewards -> CISPO steps ->
new policies for a few minutes, with a progress line every 10 s; ends with reward, accuracy and length
per policy version, reward and accuracy per source over the first and the last part of the run (both
from the monitor), and the held-out pass@1 per source of the first and the last policy, measured by the
evaluation stage (svc_eval: a held-out set per source, sampled with exactly that version by the rollout
engines and scored by the source's verifier), with its interval, the gain, and two tests of it: the
two-proportion z-test over samples and a paired test over the prompts (samples of one prompt are not
independent draws).
"""
from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch
from pydantic import BaseModel, field_validator, model_validator

from m1flow import checkpoint
from m1flow.bus import Producer
from m1flow.bus.topics import CONTROL
from m1flow.contracts import rpc, rpc_grpc
from m1flow.data.dataset import DatasetConfig
from m1flow.heldout import EvalSetConfig
from m1flow.security import grpc_tls as tls
from m1flow.stats import paired_flip_test, two_proportion_test
from m1flow.tokenizer import TokenizerConfig
from ops import demo_genrm
from ops.browser import save_page
from ops.control_cli import control_command
from ops.services import NAMES
from ops.stack import Stack
from ops.topics_io import read_range
from ops.warmstart import WarmStartConfig
from svc_monitor.client import report as monitor_report
from svc_rollout.client import known_engine

# The demo's mixture: three families of one-digit facts and small sums a small model can learn in
# minutes, under two verifiers (arith's and reasoning-gym's): arithmetic (the operands the cold start
# has always used), reasoning-gym's products and chain sums at level 1 ("Solve the following
# multiplication: 4 * 1. ..." -> <answer>4</answer>). The logic families' True/False answers stay near
# chance for a model this size whatever RL does (measured: 0.41 -> 0.40 over a run), so they are left out.
DEMO_SOURCES = [
    DatasetConfig(generator="arith", weight=0.34, level=1, config={"max_operand": 12}, size=20_000, seed=1),
    DatasetConfig(generator="rg:products", weight=0.33, level=1, size=20_000, seed=1),
    DatasetConfig(generator="rg:chain_sum", weight=0.33, level=1, size=20_000, seed=1),
]
# The monitor's curriculum for the demo: the three families alike until products, the fastest learner,
# is shown to have stopped improving (the upper 95% confidence bound of its accuracy gain per window,
# the slope over its last 3 windows of 48 groups, under 0.05; a run not learning yet is on a plateau
# too); then half of its share goes to the two families of sums. Each step is a set_mixture on
# `control` with its evidence, which svc_source applies at its next draw (the summary lists them).
DEMO_CURRICULUM = {
    "window_groups": 48, "min_judged": 24,
    "stages": [
        {"name": "alike", "weights": {"arith": 0.34, "rg:products": 0.33, "rg:chain_sum": 0.33},
         "until": [{"signal": "accuracy_gain", "sources": ["rg:products"], "below": 0.05, "windows": 2}]},
        {"name": "sums", "weights": {"arith": 0.42, "rg:products": 0.16, "rg:chain_sum": 0.42}},
    ]}
# The cold start the demo's learning was measured from. svc_source never trains on a held-out prompt, and
# at level 1 the families hold 100-260 distinct problems, of which the held-out sets take 32-61%: what RL
# can improve on them is what carries over from other problems, the answer's form above all. So the cold
# start knows its facts (1500 SFT steps, a tenth of the values near misses: on the held-out problems the
# value is right in 0.43 / 0.83 / 0.52 of its answers, whatever their form) and writes three quarters of
# its answers in a form the verifier refuses (ops.warmstart.malformed), as a cold start distilled from a
# weaker model does: pass@1 starts at 0.06 / 0.20 / 0.11. Measured in one process, with the held-out
# prompts kept out of training: 0.06 -> 0.19, 0.20 -> 0.56, 0.11 -> 0.38 after 249 steps (5 min).
DEMO_COLD_START = {"steps": 1500, "label_noise": 0.1, "form_noise": 0.75}  # about 6 min on 2 cores, once (cached)
# the prompts its tokenizer learns words from (the cold start above was measured with these)
DEMO_TOKENIZER_PROMPTS = ["rg:products", "rg:chain_sum", "rg:basic_arithmetic", "logic:boolean_expressions"]
EVAL_SEED = 999  # held-out items: a stream the source (seed 1) and the cold start (seed 10_000+) never draw


class DemoConfig(BaseModel):
    run_dir: Path = Path("run")
    minutes: float = 8.0
    engine: str = "native"  # one of svc_rollout.client.ENGINE_NAMES
    model: Path | None = None  # any local model directory; None: the warm-started small model of the engine
    group_size: int = 8
    batch_groups: int = 16
    lr: float | None = None  # None: rl_lr(the starting policy)
    sources: list[DatasetConfig] = DEMO_SOURCES
    eval_prompts: int = 100  # per source: with eval_samples, the samples behind each (source, version) result
    eval_samples: int = 4
    eval_every: int = 10  # svc_eval evaluates v0, every eval_every-th version (the dashboard's curve) and the last
    window: int = 24  # every source's gold response fits, end of turn included (tests/test_demo_mixture.py)
    # svc_monitor's `curriculum:` block; {} (the default): the mixture above throughout, since a plateau
    # rule cannot tell 'not learning yet' from 'stopped' and moved products' share away at v3
    # (`m1flow demo --curriculum`: DEMO_CURRICULUM)
    curriculum: dict = {}
    # the GenRM loop (ops/demo_genrm.py): a general family judged by a GenRM that turns length-biased
    # mid-run, ramped in by the curriculum after the verifiable families; the monitor's length-bias rule
    # recalibrates it. Adds the family to `sources` and sets `curriculum` when they are left at their defaults.
    # On by default (the report's signature loop is part of the main job); False: the verifiable mixture alone.
    genrm: bool = True

    @model_validator(mode="after")
    def _genrm_sources(self) -> "DemoConfig":
        if self.genrm and not any(d not in demo_genrm.verifiable([d]) for d in self.sources):
            self.sources = [*self.sources, demo_genrm.GENERAL]
        if self.genrm and not self.curriculum:
            self.curriculum = demo_genrm.curriculum(self.sources)
        return self

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        return known_engine(value)


def rl_lr(policy: Path) -> float:
    """A learning rate that improves the demo's small models steadily: the hybrid model's post-norm
    blocks take 3e-4; a pre-norm transformer (Qwen2, Llama) of the same size collapses at that rate
    within ten steps and learns at 1e-4 (measured with the demo's task)."""
    return 3e-4 if checkpoint.is_hybrid(policy) else 1e-4


def warmstart_for(engine: str, mixture: list[DatasetConfig] | None = None) -> WarmStartConfig:
    """The hybrid model decodes natively; vLLM and transformers get a small Qwen2. With a mixture:
    the cold start answers (noisily) every family of it, not arithmetic only; a judged family among them
    (--genrm) with a few words, its prompts' words in the tokenizer, on top of the verifiable examples."""
    arch = "minimax_m1" if engine == "native" else "qwen2"
    judged = [d for d in mixture or [] if d not in demo_genrm.verifiable([d])]
    if judged:
        return WarmStartConfig(arch=arch, task="mixture", mixture=demo_genrm.cold_start_mixture(mixture),
                               **{**DEMO_COLD_START, "steps": demo_genrm.GENRM_COLD_START_STEPS},
                               tokenizer=TokenizerConfig(prompts_of=DEMO_TOKENIZER_PROMPTS
                                                         + [d.generator for d in judged]))
    if mixture:  # the tokenizer learns the families' words too: prompts of 45 tokens, not 150 letters
        return WarmStartConfig(arch=arch, task="mixture", mixture=mixture, **DEMO_COLD_START,
                               tokenizer=TokenizerConfig(prompts_of=DEMO_TOKENIZER_PROMPTS))
    return WarmStartConfig(arch=arch)


def eval_sets(cfg: DemoConfig) -> list[EvalSetConfig]:
    """svc_eval's held-out sets: per source, rows 0..eval_prompts-1 of a stream (seed EVAL_SEED) that
    neither the source nor the cold start draws, in the source's window."""
    return [EvalSetConfig(**{**d.model_dump(), "name": d.source_name, "seed": EVAL_SEED, "prompts": cfg.eval_prompts,
                             "samples": cfg.eval_samples, "k": [1, cfg.eval_samples], "max_new_tokens": cfg.window})
            for d in demo_genrm.verifiable(cfg.sources)]


def source_file(run: Path, cfg: DemoConfig) -> Path:
    """The run's settings, which svc_source (`sources:`, the group size and learner batch) and svc_eval
    (`eval_sets:`) both read: svc_source keeps the held-out rows out of training."""
    path = run / "sources.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"sources": [d.model_dump() for d in cfg.sources], "group_size": cfg.group_size,
                                "batch_groups": cfg.batch_groups,
                                "eval_sets": [s.model_dump(mode="json") for s in eval_sets(cfg)]}, indent=1))
    return path


Results = dict[str, dict]  # set -> its EvalResult (as JSON) for one version


def held_out_results(bootstrap: str, run_id: str, version: int) -> Results:
    """svc_eval's results for `version` on `evals`, by set."""
    out = {}
    for record in read_range(bootstrap, "evals"):
        value = record["value"]
        if value.get("run_id") == run_id and int(value.get("policy_version", 0)) == version:
            out[value["set"]] = value
    return out


def wait_for_results(bootstrap: str, run_id: str, version: int, sets: list[str], t0: float,
                     timeout: float = 900.0) -> Results:
    """Every set's result for `version`, with a progress line every 10 s while they come."""
    deadline = time.monotonic() + timeout
    while True:
        got = held_out_results(bootstrap, run_id, version)
        if set(sets) <= set(got):
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"svc_eval did not evaluate v{version} on {sorted(set(sets) - set(got))} "
                               f"within {timeout:.0f}s (its log: logs/eval-0.log in the run dir)")
        print(f"[{time.monotonic() - t0:6.0f}s] held-out v{version}: {len(got)}/{len(sets)} set(s) evaluated "
              "by svc_eval ...", flush=True)
        time.sleep(10)


def report(address: str) -> list[rpc.VersionRow]:
    with tls.channel(address) as channel:
        return list(rpc_grpc.MonitorServiceStub(channel).Report(rpc.ReportRequest(), timeout=10).rows)


def bucket(rows: list[rpc.VersionRow], max_rows: int) -> list[tuple[str, int, int, float, float, float]]:
    """Rows per policy version, or per range of consecutive versions when there are many."""
    size = max(1, -(-len(rows) // max_rows))
    out = []
    for i in range(0, len(rows), size):
        part = rows[i : i + size]
        n = sum(r.samples for r in part) or 1
        label = f"{part[0].policy_version}" + (f"-{part[-1].policy_version}" if len(part) > 1 else "")
        out.append((label, sum(r.groups for r in part), n, sum(r.mean_reward * r.samples for r in part) / n,
                    sum(r.accuracy * r.samples for r in part) / n, sum(r.mean_length * r.samples for r in part) / n))
    return out


def source_parts(rows: list[rpc.SourceRow], frac: float = 1 / 3) -> dict[str, tuple[tuple, tuple]]:
    """Per source: (versions, samples, mean reward, accuracy) over the first and over the last `frac`
    of the policy versions that scored it (accuracy None when no sample had a verdict)."""
    out = {}
    for source in dict.fromkeys(r.source for r in rows):
        mine = [r for r in rows if r.source == source]
        versions = sorted({r.policy_version for r in mine})
        k = max(1, round(len(versions) * frac))

        def part(chosen: list[int]) -> tuple:
            sel = [r for r in mine if r.policy_version in chosen]
            n, judged = sum(r.samples for r in sel), sum(r.judged for r in sel if r.HasField("accuracy"))
            reward = sum(r.mean_reward * r.samples for r in sel) / (n or 1)
            acc = sum(r.accuracy * r.judged for r in sel if r.HasField("accuracy")) / judged if judged else None
            label = f"v{chosen[0]}" + (f"-{chosen[-1]}" if len(chosen) > 1 else "")
            return label, n, reward, acc

        out[source] = (part(versions[:k]), part(versions[-k:]))
    return out


def print_sources(rows: list[rpc.SourceRow]) -> None:
    """Reward and accuracy per source in training, the first vs the last part of the run."""
    fmt = lambda a: "-" if a is None else f"{a:.3f}"  # noqa: E731
    print("\ntraining, per source       | versions (first) | samples | reward | accuracy | versions (last) | samples "
          "| reward | accuracy")
    for name, ((l1, n1, r1, a1), (l2, n2, r2, a2)) in source_parts(rows).items():
        print(f"{name[:25]:<25} | {l1:>16} | {n1:>7} | {r1:>6.3f} | {fmt(a1):>8} | {l2:>15} | {n2:>7} | {r2:>6.3f} "
              f"| {fmt(a2):>8}")


def compare(first: dict, last: dict) -> tuple[float, float, float]:
    """(gain in pass@1, p of the two-proportion z-test over samples, p of the paired test over prompts)
    between two results of one set (JSON EvalResults: proto3 leaves zeros out)."""
    z_p = two_proportion_test(first.get("correct", 0), first.get("judged", 0), last.get("correct", 0),
                              last.get("judged", 0))[1]
    rates = lambda r: [c / n if n else 0.0 for n, c in zip(r.get("prompt_judged", []), r.get("prompt_correct", []))]  # noqa: E731
    paired = paired_flip_test([b - a for a, b in zip(rates(first), rates(last))])
    return last.get("pass1", 0.0) - first.get("pass1", 0.0), z_p, paired


def print_heldout(first: Results, last: Results, v_first: int, v_last: int, alpha: float = 0.01,
                  target_gain: float = 0.15, say: Callable[[str], None] = print) -> bool:
    """Held-out pass@1 per source, first vs last policy, with its tests; True when every source rose
    with p < alpha on both tests and the gain averaged over sources is at least `target_gain`."""
    iv = lambda r: f"{r.get('pass1', 0.0):.3f} [{r.get('pass1_low', 0.0):.3f}, {r.get('pass1_high', 0.0):.3f}]"  # noqa: E731
    say(f"\nheld-out pass@1 (svc_eval; 95% bootstrap interval over prompts) | v{v_first} | v{v_last} | gain | "
        "samples | p (two-proportion) | p (paired, over prompts)")
    gains, ok = [], True
    for name, a in first.items():
        b = last[name]
        gain, z_p, paired = compare(a, b)
        gains.append(gain)
        ok = ok and gain > 0 and z_p < alpha and paired < alpha
        say(f"{name[:25]:<25} | {iv(a)} | {iv(b)} | {gain:+.3f} | {a.get('judged', 0)}/{b.get('judged', 0)} "
            f"| {z_p:.2g} | {paired:.2g}")
    mean = sum(gains) / max(1, len(gains))
    ok = ok and mean >= target_gain
    say(f"mean gain {mean:+.3f}; target (every source up with p < {alpha:g} on both tests, mean gain >= "
        f"{target_gain:g}): {'met' if ok else 'NOT met'}")
    return ok


def print_curriculum(rep: rpc.MonitorReport) -> None:
    """The curriculum's set_mixture decisions, oldest first, with the evidence each was made on."""
    mixes = [d for d in rep.decisions if d.command == "set_mixture"][::-1]
    print(f"\ncurriculum: stage {rep.curriculum.stage or '-'}; {len(mixes)} set_mixture decision(s) on control")
    for d in mixes:
        weights = ", ".join(f"{k} {v:g}" for k, v in sorted(d.mixture.weights.items()))
        signals = ", ".join(f"{k} {v:.3f}" for k, v in sorted(d.evidence.signals.items()))
        print(f"  v{d.evidence.version_from}-{d.evidence.version_to} {d.evidence.rule or '?'} -> "
              f"{d.mixture.stage or '-'}: {weights}" + (f" (evidence: {signals})" if signals else ""))


def print_table(rows: list[rpc.VersionRow], max_rows: int = 16) -> None:
    print("\npolicy version | groups | samples | mean reward | accuracy | mean length")
    for label, groups, samples, reward, accuracy, length in bucket(rows, max_rows):
        print(f"{label:>14} | {groups:>6} | {samples:>7} | {reward:>11.3f} | {accuracy:>8.3f} | {length:>11.2f}")


def follow(monitor: str, seconds: float, t0: float) -> None:
    """The run's progress every 10 s for `seconds`: the newest version, groups scored, its accuracy."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(10)
        rows = report(monitor)
        if rows:
            last = rows[-1]
            groups = sum(r.groups for r in rows)
            print(f"[{time.monotonic() - t0:6.0f}s] policy v{last.policy_version:<3} groups scored {groups:<5}"
                  f" accuracy(v{last.policy_version}) {last.accuracy:.3f} reward {last.mean_reward:.3f}", flush=True)


def run_demo(cfg: DemoConfig) -> int:
    torch.set_num_threads(1)
    run = cfg.run_dir.resolve() / "demo"
    shutil.rmtree(run, ignore_errors=True)
    settings = str(source_file(run, cfg))
    stack = Stack(run, model=cfg.model, warmstart=warmstart_for(cfg.engine, cfg.sources), service_args={
        "rollout": ["--engine", cfg.engine, "--group-size", str(cfg.group_size), "--max-new-tokens", str(cfg.window)],
        "source": ["--config", settings],
        "eval": ["--config", settings, "--engine", cfg.engine, "--every-versions", str(cfg.eval_every)],
        "monitor": ["--curriculum", json.dumps(cfg.curriculum)] if cfg.curriculum else [],
        "reward": ["--genrm", json.dumps(demo_genrm.GENRM_JUDGE)] if cfg.genrm else []})
    print(f"m1flow demo: run dir {run}; engine {cfg.engine}; sources "
          f"{', '.join(f'{d.source_name} ({d.weight:g})' for d in cfg.sources)}", flush=True)
    lr = cfg.lr or rl_lr(stack.initial_policy())  # the cold start, when not cached, prints its progress
    stack.service_args["learner"] = ["--batch-groups", str(cfg.batch_groups),
                                     "--train", json.dumps({"lr": lr, "minibatches": 2})]
    print(f"policy {stack.initial_policy()}; learning rate {lr}; services starting ...", flush=True)
    t0, sets = time.monotonic(), [s.set_name for s in eval_sets(cfg)]
    try:
        stack.start(services=tuple(n for n in NAMES if n != "source"))
        first = wait_for_results(stack.bootstrap, stack.run_id, 0, sets, t0)  # v0 before any prompt is drawn
        stack.start_service("source")
        print(stack.status_table())
        monitor = stack.get("monitor").grpc_address
        dashboard = monitor_report(monitor).dashboard_url
        print(f"dashboard: {dashboard} (open it while the run goes on)")
        follow(monitor, cfg.minutes * 60, t0)
        stack.get("source").stop()
        stack.get("learner").stop()  # the last version stays put while it is evaluated
        final = checkpoint.load_state(checkpoint.latest(run / "learner" / "checkpoints")).version
        ask_evaluation(stack.bootstrap, final)
        last = wait_for_results(stack.bootstrap, stack.run_id, final, sets, t0)
        full = monitor_report(monitor, max_events=50)
        print(save_page(dashboard, run / "dashboard.png"))
        episode = demo_genrm.read_episode(stack.bootstrap, stack.run_id, stack.initial_policy()) if cfg.genrm else None
    finally:
        stack.stop()
    print_table(list(full.rows))
    print_sources(list(full.source_rows))
    print_curriculum(full)
    if episode is not None:
        demo_genrm.print_episode(episode)
    print_heldout(first, last, 0, final)
    print(f"held-out sets: {cfg.eval_prompts} prompts per source x {cfg.eval_samples} samples, engine {cfg.engine}, "
          "each scored by its source's verifier")
    return 0


def ask_evaluation(bootstrap: str, version: int) -> None:
    """An `evaluate` command on `control` for `version` (svc_eval's schedule may not land on the last)."""
    producer = Producer(bootstrap, "m1flow-demo")
    try:
        producer.send(CONTROL, "evaluate", control_command("evaluate", "demo: the last policy", version=version))
    finally:
        producer.close(timeout=30)
