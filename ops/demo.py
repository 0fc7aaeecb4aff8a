"""`make demo`: a real RL run of the whole pipeline on this machine, over a real Kafka broker.

The prompt source (svc_source) draws a weighted mixture of three generated families: arithmetic, a
reasoning-gym task and a logic puzzle family. Cold start (a short SFT on noisy answers of all three,
cached) of a small model unless `--model DIR` names one, then rollouts -> rewards -> CISPO steps ->
new policies for a few minutes, with a progress line; ends with reward, accuracy and length per policy
version, reward and accuracy per source over the first and the last part of the run (both from the
monitor), and the held-out accuracy per source of the first and the last policy, sampled by the
rollout service's own engine and scored by each source's verifier.
"""
from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import torch
from pydantic import BaseModel, field_validator

from m1flow import checkpoint
from m1flow.security import grpc_tls as tls
from m1flow.contracts import rpc, rpc_grpc
from m1flow.data.dataset import DatasetConfig
from m1flow.data.generators import generate as generate_record
from m1flow.data.record import TaskRecord
from ops.browser import save_page
from ops.services import NAMES
from ops.stack import Stack
from ops.warmstart import WarmStartConfig
from svc_monitor.client import report as monitor_report
from svc_reward.client import LocalScorer
from svc_rollout.client import generate, known_engine

# The demo's mixture: arithmetic (the operands the cold start has always used), a reasoning-gym task
# and a logic family, all with answers of a few tokens ("<answer>2</answer>", "<answer>True</answer>").
DEMO_SOURCES = [
    DatasetConfig(generator="arith", weight=0.6, level=1, config={"max_operand": 12}, size=20_000, seed=1),
    DatasetConfig(generator="rg:basic_arithmetic", weight=0.2, level=1, size=20_000, seed=1),
    DatasetConfig(generator="logic:boolean_expressions", weight=0.2, level=1, size=20_000, seed=1),
]
# The monitor's curriculum for the demo: the two arithmetic families first; when arithmetic's
# accuracy is shown to have stopped improving (the upper 95% confidence bound of its gain per window,
# the slope over its last 3 windows of 48 groups, under 0.05; a run not learning yet is on a plateau
# too) the logic family comes in at 0.1 and ramps to 0.3. Each step is a set_mixture on `control`
# with its evidence, which svc_source applies at its next draw (the summary lists them).
DEMO_CURRICULUM = {
    "window_groups": 48, "min_judged": 24,
    "stages": [
        {"name": "arithmetic", "weights": {"arith": 0.6, "rg:basic_arithmetic": 0.4, "logic:boolean_expressions": 0.0},
         "until": [{"signal": "accuracy_gain", "sources": ["arith"], "below": 0.05, "windows": 2}]},
        {"name": "blend", "weights": {"logic:boolean_expressions": 0.1},
         "ramp": {"weights": {"logic:boolean_expressions": 0.3}, "windows": 4}},
    ]}
EVAL_SEED = 999  # held-out items: a stream the source (seed 1) and the cold start (seed 10_000+) never draw


class DemoConfig(BaseModel):
    run_dir: Path = Path("run")
    minutes: float = 4.0
    engine: str = "native"  # one of svc_rollout.client.ENGINE_NAMES
    model: Path | None = None  # any local model directory; None: the warm-started small model of the engine
    group_size: int = 8
    batch_groups: int = 32
    lr: float | None = None  # None: rl_lr(the starting policy)
    sources: list[DatasetConfig] = DEMO_SOURCES
    eval_prompts: int = 40  # per source
    eval_samples: int = 4
    window: int = 24  # "</think>\n<answer>False</answer>" is 21 tokens with the project's tokenizer
    curriculum: dict = DEMO_CURRICULUM  # svc_monitor's `curriculum:` block ({}: the config's mixture throughout)

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
    the cold start answers (noisily) every family of it, not arithmetic only."""
    arch = "minimax_m1" if engine == "native" else "qwen2"
    if mixture:
        return WarmStartConfig(arch=arch, task="mixture", mixture=mixture)
    return WarmStartConfig(arch=arch)


def source_file(run: Path, cfg: DemoConfig) -> Path:
    """svc_source's settings (`--config`): the mixture, the demo's group size and learner batch."""
    path = run / "sources.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"sources": [d.model_dump() for d in cfg.sources], "group_size": cfg.group_size,
                                "batch_groups": cfg.batch_groups}, indent=1))
    return path


def held_out(cfg: DemoConfig) -> dict[str, list[TaskRecord]]:
    """Per source, `eval_prompts` items of a stream neither the source nor the cold start draws."""
    return {d.source_name: [generate_record(d.generator, EVAL_SEED, i, d.level, d.config)
                            for i in range(cfg.eval_prompts)] for d in cfg.sources}


def evaluate(rollout: str, cfg: DemoConfig, records: dict[str, list[TaskRecord]],
             scorer: LocalScorer) -> tuple[dict[str, float], set[int]]:
    """Sampled accuracy (temperature 1, as in training) per source on held-out records, by the
    rollout service's engine, each scored by its source's verifier; and the policy versions that sampled."""
    items = [(name, i, r) for name, part in records.items() for i, r in enumerate(part)]

    def one(item: tuple[str, int, TaskRecord]) -> list[tuple[str, bool, int]]:
        name, i, record = item
        spec = record.to_prompt(cfg.eval_samples).verifier
        samples = generate(rollout, record.prompt, n=cfg.eval_samples, max_new_tokens=cfg.window, seed=i + 1)
        return [(name, scorer.score(s.text, spec).correct is True, s.policy_version) for s in samples]

    with ThreadPoolExecutor(16) as pool:  # concurrent requests: the engine batches them
        results = [r for part in pool.map(one, items) for r in part]
    accuracy = {name: sum(ok for n, ok, _ in results if n == name) / max(1, sum(n == name for n, _, _ in results))
                for name in records}
    return accuracy, {v for _, _, v in results}


def wait_for_version(rollout: str, version: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while generate(rollout, "1+1=", max_new_tokens=1)[0].policy_version < version:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the rollout service did not load policy v{version}")
        time.sleep(1)


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


def print_sources(rows: list[rpc.SourceRow], before: dict[str, float], after: dict[str, float],
                  first: str, last: str) -> None:
    """Reward and accuracy per source, first vs last part of the run, beside held-out sampled accuracy."""
    fmt = lambda a: "-" if a is None else f"{a:.3f}"  # noqa: E731
    print(f"\nsource                    | versions (first) | samples | reward | accuracy | versions (last) | samples "
          f"| reward | accuracy | held-out {first} -> {last}")
    parts = source_parts(rows)
    for name in dict.fromkeys([*parts, *before]):
        (l1, n1, r1, a1), (l2, n2, r2, a2) = parts.get(name, (("-", 0, 0.0, None), ("-", 0, 0.0, None)))
        held = f"{fmt(before.get(name))} -> {fmt(after.get(name))}"
        print(f"{name[:25]:<25} | {l1:>16} | {n1:>7} | {r1:>6.3f} | {fmt(a1):>8} | {l2:>15} | {n2:>7} | {r2:>6.3f} "
              f"| {fmt(a2):>8} | {held}")


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
    stack = Stack(run, model=cfg.model, warmstart=warmstart_for(cfg.engine, cfg.sources), service_args={
        "rollout": ["--engine", cfg.engine, "--group-size", str(cfg.group_size), "--max-new-tokens", str(cfg.window)],
        "source": ["--config", str(source_file(run, cfg))],
        "monitor": ["--curriculum", json.dumps(cfg.curriculum)] if cfg.curriculum else []})
    lr = cfg.lr or rl_lr(stack.initial_policy())
    stack.service_args["learner"] = ["--batch-groups", str(cfg.batch_groups),
                                     "--train", json.dumps({"lr": lr, "minibatches": 2})]
    print(f"m1flow demo: run dir {run}; engine {cfg.engine}; policy {stack.initial_policy()}; learning rate {lr}; "
          f"sources {', '.join(f'{d.source_name} ({d.weight:g})' for d in cfg.sources)}; services starting ...")
    t0 = time.monotonic()
    records = held_out(cfg)
    scorer = LocalScorer()
    try:
        stack.start(services=tuple(n for n in NAMES if n != "source"))
        rollout = stack.get("rollout").grpc_address
        before, first = evaluate(rollout, cfg, records, scorer)  # v0 alone: no prompt drawn yet
        stack.start_service("source")
        print(stack.status_table())
        monitor = stack.get("monitor").grpc_address
        dashboard = monitor_report(monitor).dashboard_url
        print(f"dashboard: {dashboard} (open it while the run goes on)")
        follow(monitor, cfg.minutes * 60, t0)
        full = monitor_report(monitor, max_events=50)
        rows, source_rows = list(full.rows), list(full.source_rows)
        print(save_page(dashboard, run / "dashboard.png"))
        stack.get("source").stop()
        stack.get("learner").stop()  # the last version stays put while it is evaluated
        final = checkpoint.load_state(checkpoint.latest(run / "learner" / "checkpoints")).version
        wait_for_version(rollout, final)
        after, last = evaluate(rollout, cfg, records, scorer)
    finally:
        stack.stop()
        scorer.close()
    print_table(rows)
    print_sources(source_rows, before, after, f"v{min(first)}", f"v{max(last)}")
    print_curriculum(full)
    print(f"held-out: {cfg.eval_prompts} prompts per source x {cfg.eval_samples} samples, engine {cfg.engine}, "
          "each scored by its source's verifier")
    return 0
