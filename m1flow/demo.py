"""`make demo`: a real RL run of the whole pipeline on this machine, over a real Kafka broker.

Cold start (a short SFT, cached), then rollouts -> rewards -> CISPO steps -> new policies for a few
minutes, with a progress line; ends with reward, accuracy and length per policy version (from the
monitor) and a held-out evaluation of the first and the last policy.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import grpc
import torch
from pydantic import BaseModel

from m1flow.browser import save_page
from m1flow.bus import Producer
from m1flow.contracts import rpc, rpc_grpc
from m1flow.model import sample
from m1flow.policy import generator, load_policy, uri_for
from m1flow.source import publish
from m1flow.stack import Stack
from m1flow.tasks.arith import parse_answer, problems
from m1flow.warmstart import WarmStartConfig
from svc_monitor.client import report as monitor_report


class DemoConfig(BaseModel):
    run_dir: Path = Path("run")
    minutes: float = 4.0
    group_size: int = 8
    batch_groups: int = 32
    lr: float = 3e-4
    prompts: int = 20000
    eval_prompts: int = 100
    eval_samples: int = 4


def evaluate(policy_dir: Path, cfg: DemoConfig) -> float:
    """Sampled accuracy (temperature 1, as in training) on held-out prompts."""
    model, tok = load_policy(uri_for(policy_dir))
    correct = total = 0
    for i, p in enumerate(problems(seed=999, n=cfg.eval_prompts, max_operand=WarmStartConfig().max_operand, prefix="eval")):
        comps = sample(model, [tok.bos_id, *tok.encode(p.text)], n=cfg.eval_samples, max_new_tokens=8,
                       eos_id=tok.eos_id, generator=generator(i))
        correct += sum(parse_answer(tok.decode(c.tokens)) == int(p.answer) for c in comps)
        total += len(comps)
    return correct / total


def report(address: str) -> list[rpc.VersionRow]:
    with grpc.insecure_channel(address) as channel:
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
    stack = Stack(run, service_args={
        "learner": ["--batch-groups", str(cfg.batch_groups), "--train", json.dumps({"lr": cfg.lr, "minibatches": 2})],
        "rollout": ["--group-size", str(cfg.group_size), "--max-ahead-groups", str(2 * cfg.batch_groups)]})
    print(f"m1flow demo: run dir {run}; cold start (cached after the first run) and services starting ...")
    t0 = time.monotonic()
    try:
        stack.start()
        print(stack.status_table())
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
    finally:
        stack.stop()
    final = sorted((run / "learner" / "checkpoints").glob("v*"))[-1]  # after stop: no longer rotating
    print_table(rows)
    before, after = evaluate(run / "policy0", cfg), evaluate(final, cfg)
    print(f"held-out sampled accuracy ({cfg.eval_prompts} prompts x {cfg.eval_samples}): "
          f"v0 {before:.3f} -> {final.name} {after:.3f}")
    return 0
