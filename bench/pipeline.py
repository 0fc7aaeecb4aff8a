"""Groups trained per minute: the services over Kafka against the same work in one process.

Both sides start from the same warm-started policy and do the same work: `--steps` learner steps of
`--batch` groups of G samples of the demo's arithmetic prompts, CISPO with the same settings, a
checkpoint written after every step and loaded by the engine that samples the next groups.

  services:   broker + svc_rollout + svc_reward + svc_learner as processes (m1flow.ops.stack); timed from
              the first prompt published to the announcement of policy version `--steps`. Rollouts
              run ahead of the learner (bounded by the rollout's backpressure) while it trains.
  in process: for each step, generate the batch with the same engine, score it, train, checkpoint,
              reload: one after the other, nothing overlaps.

Where the time goes: CPU seconds of each service process over the run (psutil), and, in process,
the wall time of each phase.

Run: PYTHONPATH=. python bench/pipeline.py [--engine native|vllm] [--steps 20] [--batch 16] [--group 8]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from m1flow import checkpoint  # noqa: E402
from m1flow.contracts import events  # noqa: E402
from m1flow.ops.demo import rl_lr, warmstart_for  # noqa: E402
from m1flow.rl.config import AlgorithmConfig  # noqa: E402
from m1flow.rl.selection import Selected  # noqa: E402
from m1flow.status import Status  # noqa: E402
from m1flow.tasks.arith import parse_answer, problems  # noqa: E402
from m1flow.warmstart import warm_started_policy  # noqa: E402
from svc_learner.batching import to_batch  # noqa: E402
from svc_learner.optim import make_optimizer  # noqa: E402
from svc_learner.update import TrainConfig, train_on_batch  # noqa: E402
from svc_rollout.client import ENGINE_NAMES  # noqa: E402
from svc_rollout.engines.base import GroupRequest  # noqa: E402

SERVICES = ("learner", "reward", "rollout")


def train_config(policy: Path) -> TrainConfig:
    return TrainConfig(lr=rl_lr(policy), minibatches=2)


def in_process(policy: Path, engine_name: str, steps: int, batch: int, group: int, window: int) -> dict:
    """Generate, score, train, checkpoint and reload, one after the other, `steps` times."""
    from svc_rollout.config import RolloutConfig
    from svc_rollout.engines import build

    engine = build(RolloutConfig(engine=engine_name, batch_groups=batch, group_size=group, device="cpu"))
    engine.load(events.PolicyVersion(version=0, checkpoint_uri=checkpoint.uri_for(policy)))
    model, tokenizer = checkpoint.load_model(policy, trainable=True), checkpoint.load_tokenizer(policy)
    cfg, algorithm = train_config(policy), AlgorithmConfig()
    optimizer = make_optimizer(model.parameters(), cfg.lr, cfg.weight_decay, cfg.adam_eps)
    root = Path(tempfile.mkdtemp(prefix="m1flow-bench-inproc-"))
    asked = problems(seed=1, n=steps * batch, max_operand=12)
    phases = dict.fromkeys(("generate", "score", "train", "checkpoint + reload"), 0.0)
    correct = samples = 0
    started = time.perf_counter()
    for step in range(steps):
        part = asked[step * batch : (step + 1) * batch]
        t = time.perf_counter()
        for i, p in enumerate(part):
            engine.submit(GroupRequest(f"{step}-{i}", engine.prompt_ids(p.text), group, window, 1.0, 0.95,
                                       step * batch + i, 3000, 0.99))
        results = []
        while engine.in_flight():
            results += engine.step()
        t_gen = time.perf_counter()
        selected = []
        by_key = {r.request.key: r for r in results}
        for i, p in enumerate(part):
            result = by_key[f"{step}-{i}"]
            rewards = [float(parse_answer(engine.decode(s.tokens)) == int(p.answer)) for s in result.samples]
            correct, samples = correct + sum(rewards), samples + len(rewards)
            g = events.ScoredGroup(group_id=result.request.key, group_size=len(rewards))
            for j, (s, r) in enumerate(zip(result.samples, rewards)):
                g.samples.add(index=j, prompt_token_ids=result.request.prompt_ids, token_ids=s.tokens,
                              logprobs=s.logprobs, reward=r, status=Status.OK, policy_version=step,
                              max_new_tokens=window, temperature=1.0, top_p=0.95)
            outcome = algorithm.select(g, current_version=step)  # the learner's selection and advantages
            if isinstance(outcome, Selected):
                selected.append(outcome)
        t_score = time.perf_counter()
        if selected:
            built = to_batch(selected, pad_id=tokenizer.pad_token_id or 0)
            train_on_batch(model, optimizer, built, cfg, algorithm.loss())
        t_train = time.perf_counter()
        state = checkpoint.LearnerState(version=step + 1, step=step + 1)
        directory, sha = checkpoint.save_checkpoint(root, model, tokenizer, optimizer, state)
        engine.load(events.PolicyVersion(version=step + 1, checkpoint_uri=checkpoint.uri_for(directory), sha256=sha))
        t_done = time.perf_counter()
        phases["generate"] += t_gen - t
        phases["score"] += t_score - t_gen
        phases["train"] += t_train - t_score
        phases["checkpoint + reload"] += t_done - t_train
    return {"seconds": time.perf_counter() - started, "phases": phases, "accuracy": correct / max(samples, 1)}


def services(policy: Path, engine_name: str, steps: int, batch: int, group: int, window: int) -> dict:
    from m1flow.bus import Producer
    from m1flow.source import publish
    from m1flow.ops.stack import Stack
    from m1flow.ops.topics_io import read_range

    run = Path(tempfile.mkdtemp(prefix="m1flow-bench-services-"))
    stack = Stack(run, model=policy, service_args={
        "learner": ["--batch-groups", str(batch), "--train", json.dumps(train_config(policy).model_dump())],
        "rollout": ["--engine", engine_name, "--group-size", str(group), "--max-new-tokens", str(window),
                    "--batch-groups", str(batch), "--device", "cpu"]})
    try:
        stack.start(services=SERVICES)
        procs = {name: psutil.Process(stack.get(name).proc.pid) for name in SERVICES}
        cpu_before = {name: sum(p.cpu_times()[:2]) for name, p in procs.items()}
        started = time.perf_counter()
        publish(Producer(stack.bootstrap, "bench"), problems(seed=1, n=steps * batch, max_operand=12), group)
        version = 0
        while version < steps:
            time.sleep(0.2)
            version = max([int(r["value"].get("version", 0)) for r in read_range(stack.bootstrap, "policy")] or [0])
        seconds = time.perf_counter() - started
        cpu = {name: sum(p.cpu_times()[:2]) - cpu_before[name] for name, p in procs.items()}
        scored = [r["value"] for r in read_range(stack.bootstrap, "scored")]
        samples = [s for g in scored for s in g.get("samples", [])]
        accuracy = sum(bool(s.get("correct")) for s in samples) / max(len(samples), 1)
        stale = sum(int(float(r["value"].get("stats", {}).get("dropped_stale", 0)))
                    for r in read_range(stack.bootstrap, "policy"))
    finally:
        stack.stop()
    return {"seconds": seconds, "cpu": cpu, "accuracy": accuracy, "dropped_stale": stale, "groups_scored": len(scored)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=ENGINE_NAMES, default="native")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--window", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    policy = warm_started_policy(Path(tempfile.mkdtemp(prefix="m1flow-bench-policy-")) / "p0", warmstart_for(args.engine))
    groups = args.steps * args.batch
    print(f"{args.engine} engine, {args.steps} steps x {args.batch} groups x {args.group} samples, window "
          f"{args.window}, lr {rl_lr(policy)}", flush=True)
    kafka = services(policy, args.engine, args.steps, args.batch, args.group, args.window)
    local = in_process(policy, args.engine, args.steps, args.batch, args.group, args.window)
    print("\n| side | groups trained | s | groups/min | ratio | sample accuracy |")
    print("|---|---|---|---|---|---|")
    local_rate = groups / local["seconds"] * 60
    for name, r in (("in process (generate, score, train, reload in turn)", local),
                    ("services over Kafka", kafka)):
        rate = groups / r["seconds"] * 60
        print(f"| {name} | {groups} | {r['seconds']:.1f} | {rate:.0f} | {rate / local_rate:.2f} | {r['accuracy']:.3f} |")
    print(f"\nservices: {kafka['groups_scored']} groups scored by the time v{args.steps} was announced "
          f"(rollouts run ahead), {kafka['dropped_stale']} samples dropped as stale")
    print("\n| where the time goes | seconds |")
    print("|---|---|")
    for name, seconds in kafka["cpu"].items():
        print(f"| svc_{name} CPU | {seconds:.1f} |")
    for name, seconds in local["phases"].items():
        print(f"| in process: {name} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
