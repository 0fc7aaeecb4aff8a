"""`make demo`: a real RL run of the whole pipeline on this machine, over a real Kafka broker.

Cold start (a short SFT, cached) of a small model unless `--model DIR` names one, then rollouts ->
rewards -> CISPO steps -> new policies for a few minutes, with a progress line; ends with reward,
accuracy and length per policy version (from the monitor) and the held-out accuracy of the first and
the last policy, both sampled by the rollout service's own engine.
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
from m1flow.bus import Producer
from m1flow.security import grpc_tls as tls
from m1flow.contracts import rpc, rpc_grpc
from m1flow.ops.browser import save_page
from m1flow.ops.stack import Stack
from m1flow.source import publish
from m1flow.tasks.arith import ArithProblem, parse_answer, problems
from m1flow.warmstart import WarmStartConfig
from svc_monitor.client import report as monitor_report
from svc_rollout.client import generate, known_engine


class DemoConfig(BaseModel):
    run_dir: Path = Path("run")
    minutes: float = 4.0
    engine: str = "native"  # one of svc_rollout.client.ENGINE_NAMES
    model: Path | None = None  # any local model directory; None: the warm-started small model of the engine
    group_size: int = 8
    batch_groups: int = 32
    lr: float | None = None  # None: rl_lr(the starting policy)
    prompts: int = 20000
    eval_prompts: int = 100
    eval_samples: int = 4
    window: int = 8

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        return known_engine(value)


def rl_lr(policy: Path) -> float:
    """A learning rate that improves the demo's small models steadily: the hybrid model's post-norm
    blocks take 3e-4; a pre-norm transformer (Qwen2, Llama) of the same size collapses at that rate
    within ten steps and learns at 1e-4 (measured with the demo's task)."""
    return 3e-4 if checkpoint.is_hybrid(policy) else 1e-4


def warmstart_for(engine: str) -> WarmStartConfig:
    """The hybrid model decodes natively; vLLM and transformers get a small Qwen2."""
    return WarmStartConfig(arch="minimax_m1" if engine == "native" else "qwen2")


def evaluate(rollout: str, cfg: DemoConfig, held_out: list[ArithProblem] | None = None) -> tuple[float, set[int]]:
    """Sampled accuracy (temperature 1, as in training) on held-out prompts (or the ones given), by
    the rollout service's engine; and the policy versions that sampled."""
    if held_out is None:
        held_out = problems(seed=999, n=cfg.eval_prompts, max_operand=WarmStartConfig().max_operand, prefix="eval")

    def one(i: int) -> list[tuple[bool, int]]:
        samples = generate(rollout, held_out[i].text, n=cfg.eval_samples, max_new_tokens=cfg.window, seed=i + 1)
        return [(parse_answer(s.text) == int(held_out[i].answer), s.policy_version) for s in samples]

    with ThreadPoolExecutor(16) as pool:  # concurrent requests: the engine batches them
        results = [r for part in pool.map(one, range(len(held_out))) for r in part]
    return sum(ok for ok, _ in results) / len(results), {v for _, v in results}


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


def print_table(rows: list[rpc.VersionRow], max_rows: int = 16) -> None:
    print("\npolicy version | groups | samples | mean reward | accuracy | mean length")
    for label, groups, samples, reward, accuracy, length in bucket(rows, max_rows):
        print(f"{label:>14} | {groups:>6} | {samples:>7} | {reward:>11.3f} | {accuracy:>8.3f} | {length:>11.2f}")


def run_demo(cfg: DemoConfig) -> int:
    torch.set_num_threads(1)
    run = cfg.run_dir.resolve() / "demo"
    shutil.rmtree(run, ignore_errors=True)
    stack = Stack(run, model=cfg.model, warmstart=warmstart_for(cfg.engine), service_args={
        "rollout": ["--engine", cfg.engine, "--group-size", str(cfg.group_size), "--max-new-tokens", str(cfg.window)]})
    lr = cfg.lr or rl_lr(stack.initial_policy())
    stack.service_args["learner"] = ["--batch-groups", str(cfg.batch_groups),
                                     "--train", json.dumps({"lr": lr, "minibatches": 2})]
    print(f"m1flow demo: run dir {run}; engine {cfg.engine}; policy {stack.initial_policy()}; learning rate {lr}; "
          "services starting ...")
    t0 = time.monotonic()
    try:
        stack.start()
        print(stack.status_table())
        rollout = stack.get("rollout").grpc_address
        before, first = evaluate(rollout, cfg)
        publish(Producer(stack.bootstrap, "demo-source"), problems(seed=1, n=cfg.prompts, max_operand=WarmStartConfig().max_operand),
                cfg.group_size)
        monitor = stack.get("monitor").grpc_address
        dashboard = monitor_report(monitor).dashboard_url
        print(f"dashboard: {dashboard} (open it while the run goes on)")
        deadline = time.monotonic() + cfg.minutes * 60
        while time.monotonic() < deadline:
            time.sleep(10)
            rows = report(monitor)
            if rows:
                last = rows[-1]
                groups = sum(r.groups for r in rows)
                print(f"[{time.monotonic() - t0:6.0f}s] policy v{last.policy_version:<3} groups scored {groups:<5}"
                      f" accuracy(v{last.policy_version}) {last.accuracy:.3f} reward {last.mean_reward:.3f}", flush=True)
        rows = report(monitor)
        print(save_page(dashboard, run / "dashboard.png"))
        stack.get("learner").stop()  # the last version stays put while it is evaluated
        final = checkpoint.load_state(checkpoint.latest(run / "learner" / "checkpoints")).version
        wait_for_version(rollout, final)
        after, last = evaluate(rollout, cfg)
    finally:
        stack.stop()
    print_table(rows)
    print(f"held-out sampled accuracy ({cfg.eval_prompts} prompts x {cfg.eval_samples}, engine {cfg.engine}): "
          f"v{min(first)} {before:.3f} -> v{max(last)} {after:.3f}")
    return 0
