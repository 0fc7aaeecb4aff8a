"""Groups trained per minute: the services over Kafka against the same work in one process.

Both sides start from the same warm-started policy and do the same work: `--steps` learner steps of
`--batch` trainable groups of G samples of the arithmetic generator's records, CISPO with the same
settings, dynamic sampling on both sides (a group with nothing to learn is skipped and the batch
fills with trainable ones), a checkpoint written after every step and loaded by the engine that
samples the next groups.

  services:   broker + svc_learner + svc_reward + svc_rollout, then svc_source (the "arith"
              generator, endless; it keeps a bounded lead over the rollout group, so there is no
              prompt count to get wrong) as processes (ops.stack); timed from the source's
              start to the announcement of policy version `--steps`. Rollouts run ahead of the
              learner (the source's lead and the rollout's backpressure) while it trains.
  in process: the same generator records in the source's order (its cursor, same seed and block);
              for each step, generate, score, select, top up the skipped groups, train,
              checkpoint, reload: one after the other, nothing overlaps.

Where the time goes: CPU seconds and occupancy (CPU s / wall s) of each service process over the
run (psutil), the learner's steps and skips; in process, the wall time of each phase.

A deadline (`--deadline-s`, default sized for the work) bounds the whole run: past it, or on
SIGINT/SIGTERM, the bench prints what it has and exits 2 with the reason. Broker and services are
stopped on every exit.

With `--eval-every N` the services side also runs svc_eval (a held-out set of `--eval-prompts` x
`--eval-samples` of the same generator at another seed, every N-th version), so the two runs' groups
per minute measure what evaluation costs training; `--services-only` leaves out the in-process side.

Run: PYTHONPATH=. python bench/pipeline.py [--engine native|vllm] [--steps 20] [--batch 16] [--group 8]
     [--eval-every N --eval-prompts 32 --eval-samples 4] [--services-only]
"""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from m1flow import checkpoint  # noqa: E402
from m1flow.contracts import events  # noqa: E402
from m1flow.data.dataset import DatasetConfig, open_source  # noqa: E402
from m1flow.data.record import TaskRecord  # noqa: E402
from ops.demo import rl_lr, warmstart_for  # noqa: E402
from m1flow.rl.config import AlgorithmConfig  # noqa: E402
from m1flow.rl.selection import Selected  # noqa: E402
from m1flow.status import Status  # noqa: E402
from m1flow.tasks.arith import parse_answer  # noqa: E402
from ops.warmstart import warm_started_policy  # noqa: E402
from svc_learner.batching import to_batch  # noqa: E402
from svc_learner.optim import make_optimizer  # noqa: E402
from svc_learner.update import TrainConfig, train_on_batch  # noqa: E402
from svc_rollout.client import ENGINE_NAMES  # noqa: E402
from m1flow.engines.base import GroupRequest  # noqa: E402
from svc_source.cursor import Cursor  # noqa: E402

SERVICES = ("learner", "reward", "rollout")  # started first; the source last, when the clock starts
MEASURED = (*SERVICES, "source")
SEED, BLOCK = 1, 4096  # the source's shuffle: both sides draw the same records in the same order
DATASET = DatasetConfig(generator="arith", seed=SEED, config={"max_operand": 12})


class Stopped(BaseException):
    """The run ends early: the deadline passed or a signal came; the reason is the message. A
    BaseException, so no `except Exception` on the way (the topic reads after a run) swallows it."""


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds, self.at = seconds, time.monotonic() + seconds

    def check(self, doing: str) -> None:
        if time.monotonic() > self.at:
            raise Stopped(f"deadline of {self.seconds:.0f}s passed while {doing}")


def on_signals(deadline: Deadline) -> None:
    """SIGINT/SIGTERM, and SIGALRM at the deadline (a blocking start-up included), raise Stopped in
    the main thread, so every `finally` (the stack's stop) runs; a second signal during the clean-up
    is ignored rather than cutting it short."""
    caught = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)

    def stop(signum: int, _frame: Any) -> None:
        for sig in caught:
            signal.signal(sig, signal.SIG_IGN)
        if signum == signal.SIGALRM:
            raise Stopped(f"deadline of {deadline.seconds:.0f}s passed")
        raise Stopped(f"{signal.Signals(signum).name} received")

    for sig in caught:
        signal.signal(sig, stop)
    signal.setitimer(signal.ITIMER_REAL, deadline.seconds)


def default_deadline(steps: int, batch: int, group: int) -> float:
    """Start-up (broker, warm start, services) plus a generous time per sample on 2 loaded cores."""
    return 600.0 + 1.0 * steps * batch * group


def train_config(policy: Path) -> TrainConfig:
    return TrainConfig(lr=rl_lr(policy), minibatches=2)


def records() -> Iterator[TaskRecord]:
    """The generator's records in the order svc_source draws them (one source: its cursor's order)."""
    cursor = Cursor(open_source(DATASET), SEED, BLOCK)
    while True:
        _, _, _, item = cursor.draw()
        if isinstance(item, TaskRecord):
            yield item


def source_settings(path: Path, group: int, batch: int, heldout: dict | None = None) -> Path:
    settings = {"sources": [DATASET.model_dump(exclude_defaults=True)], "seed": SEED,
                "block_rows": BLOCK, "group_size": group, "batch_groups": batch}
    if heldout:  # the run's held-out set: svc_eval samples it, svc_source keeps its rows out of training
        settings["eval_sets"] = [heldout]
    path.write_text(json.dumps(settings))
    return path


def heldout_set(prompts: int, samples: int) -> dict:
    """The same generator at another seed: what the demo's held-out sets look like."""
    return {**DATASET.model_dump(exclude_defaults=True), "seed": SEED + 1000, "name": "heldout",
            "prompts": prompts, "samples": samples}


def in_process(policy: Path, engine_name: str, steps: int, batch: int, group: int, window: int,
               deadline: Deadline, out: dict) -> None:
    """Generate, score, select (topping up skipped groups), train, checkpoint and reload, `steps` times.
    Fills `out` as it goes, so an early stop still reports the steps done."""
    from svc_rollout.config import RolloutConfig
    from m1flow.engines import build

    engine = build(RolloutConfig(engine=engine_name, batch_groups=batch, group_size=group, device="cpu"))
    engine.load(events.PolicyVersion(version=0, checkpoint_uri=checkpoint.uri_for(policy)))
    model, tokenizer = checkpoint.load_model(policy, trainable=True), checkpoint.load_tokenizer(policy)
    cfg, algorithm = train_config(policy), AlgorithmConfig()
    optimizer = make_optimizer(model.parameters(), cfg.lr, cfg.weight_decay, cfg.adam_eps)
    root = Path(tempfile.mkdtemp(prefix="m1flow-bench-inproc-"))
    draw = records()
    phases = dict.fromkeys(("generate", "score", "train", "checkpoint + reload"), 0.0)
    decoded: list[int] = []  # sequences each engine step decoded together
    out.update(steps=0, seconds=0.0, phases=phases, accuracy=0.0, skipped=0, groups_scored=0, decoded=decoded)
    correct = samples = asked = 0
    me = psutil.Process()
    cpu_before = cpu_seconds(me)
    started = time.perf_counter()
    try:
        for step in range(steps):
            selected: list[Selected] = []
            while len(selected) < batch:  # dynamic sampling: the shortfall is generated again
                deadline.check(f"in process: step {step + 1} of {steps}")
                part = {f"{step}-{asked + i}": next(draw) for i in range(batch - len(selected))}
                t = time.perf_counter()
                for key, rec in part.items():
                    engine.submit(GroupRequest(key, engine.prompt_ids(rec.text), group, window, 1.0, 0.95,
                                               asked, 3000, 0.99))
                    asked += 1
                results = []
                while engine.in_flight():
                    decoded.append(min(engine.sequences_in_flight(), engine.capacity))
                    results += engine.step()
                t_gen = time.perf_counter()
                for result in results:
                    gold = int(part[result.request.key].verifier.gold)
                    rewards = [float(parse_answer(engine.decode(s.tokens)) == gold) for s in result.samples]
                    correct, samples = correct + sum(rewards), samples + len(rewards)
                    g = events.ScoredGroup(group_id=result.request.key, group_size=len(rewards))
                    for j, (s, r) in enumerate(zip(result.samples, rewards)):
                        g.samples.add(index=j, prompt_token_ids=result.request.prompt_ids, token_ids=s.tokens,
                                      logprobs=s.logprobs, reward=r, status=Status.OK, policy_version=step,
                                      max_new_tokens=window, temperature=1.0, top_p=0.95)
                    outcome = algorithm.select(g, current_version=step)  # the learner's selection, advantages
                    if isinstance(outcome, Selected):
                        selected.append(outcome)
                    else:
                        out["skipped"] += 1
                    out["groups_scored"] += 1
                phases["generate"] += t_gen - t
                phases["score"] += time.perf_counter() - t_gen
            t = time.perf_counter()
            built = to_batch(selected, pad_id=tokenizer.pad_token_id or 0)
            train_on_batch(model, optimizer, built, cfg, algorithm.loss())
            t_train = time.perf_counter()
            state = checkpoint.LearnerState(version=step + 1, step=step + 1)
            directory, sha = checkpoint.save_checkpoint(root, model, tokenizer, optimizer, state)
            engine.load(events.PolicyVersion(version=step + 1, checkpoint_uri=checkpoint.uri_for(directory),
                                             sha256=sha))
            phases["train"] += t_train - t
            phases["checkpoint + reload"] += time.perf_counter() - t_train
            out.update(steps=step + 1, seconds=time.perf_counter() - started, accuracy=correct / max(samples, 1),
                       cpu=cpu_seconds(me) - cpu_before)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def cpu_seconds(proc: psutil.Process) -> float:
    """User + system CPU of a process and its children (a service's engine workers count)."""
    try:
        total = sum(proc.cpu_times()[:2])
        for child in proc.children(recursive=True):
            total += sum(child.cpu_times()[:2])
        return total
    except psutil.NoSuchProcess:
        return float("nan")


def latest_version(bootstrap: str) -> list[dict]:
    from ops.topics_io import read_range

    return [r["value"] for r in read_range(bootstrap, "policy") if "value" in r]


def learner_skips(bootstrap: str) -> dict[str, int]:
    """The learner's skipped groups by reason (its `learner/groups_skipped` metric is a running count)."""
    from ops.topics_io import read_range

    skips: dict[str, int] = {}
    for r in read_range(bootstrap, "metrics"):
        v = r.get("value") or {}
        if v.get("name") == "learner/groups_skipped":
            reason = (v.get("labels") or {}).get("reason", "?")
            skips[reason] = max(skips.get(reason, 0), int(float(v.get("value", 0))))
    return skips


def step_sequences(metrics_port: int | None) -> tuple[float, int] | None:
    """(mean sequences per engine step, engine steps) from the rollout's /metrics histogram."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    if not metrics_port:
        return None
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as page:
        text = page.read().decode()
    found = {s.name: s.value for f in text_string_to_metric_families(text) if f.name == "m1flow_rollout_step_sequences"
             for s in f.samples}
    count = int(found.get("m1flow_rollout_step_sequences_count", 0))
    return (found.get("m1flow_rollout_step_sequences_sum", 0.0) / count if count else 0.0), count


def broker_clock(bootstrap: str, steps: int) -> tuple[float, list[float]] | None:
    """Seconds from the first prompt on the broker to the announcement of v`steps`, and the gaps
    between announcements (v0 -> v1 included): the source's process start-up is not the pipeline's."""
    from ops.topics_io import read_range

    first = min((r["timestamp_ms"] for r in read_range(bootstrap, "prompts")), default=None)
    announced = {int((r.get("value") or {}).get("version", 0)): r["timestamp_ms"]
                 for r in read_range(bootstrap, "policy")}
    if first is None or steps not in announced:
        return None
    marks = [first] + [announced[v] for v in range(1, steps + 1) if v in announced]
    return (announced[steps] - first) / 1000, [(b - a) / 1000 for a, b in zip(marks, marks[1:])]


def services(policy: Path, engine_name: str, steps: int, batch: int, group: int, window: int,
             deadline: Deadline, out: dict, keep: bool = False, evaluation: dict | None = None) -> None:
    """The services as processes, fed by svc_source, until the learner announces version `steps`.
    Fills `out` as it goes; the stack (broker included) is stopped however this returns, and its
    run directory removed unless `keep` (the services' logs: admission and step timelines)."""
    from ops.stack import Stack
    from ops.topics_io import read_range

    run = Path(tempfile.mkdtemp(prefix="m1flow-bench-services-"))
    settings = source_settings(run / "sources.json", group, batch, evaluation and evaluation["set"])
    service_args = {
        "learner": ["--batch-groups", str(batch), "--train", json.dumps(train_config(policy).model_dump())],
        "rollout": ["--engine", engine_name, "--group-size", str(group), "--max-new-tokens", str(window),
                    "--batch-groups", str(batch), "--device", "cpu"],
        "source": ["--config", str(settings)]}
    if evaluation:
        service_args["eval"] = ["--config", str(settings), "--every-versions", str(evaluation["every"]),
                                "--engine", engine_name, "--max-new-tokens", str(window), "--device", "cpu"]
    stack = Stack(run, model=policy, service_args=service_args)
    measured = (*MEASURED, "eval") if evaluation else MEASURED
    out.update(steps=0, seconds=0.0, cpu={}, wall=0.0)
    procs: dict[str, psutil.Process] = {}
    cpu_before: dict[str, float] = {}
    started = time.perf_counter()
    try:
        stack.start(services=(*SERVICES, "eval") if evaluation else SERVICES)
        deadline.check("starting the services")
        started = time.perf_counter()
        stack.start_service("source")
        print(f"services up (broker {stack.bootstrap}); the source publishes, the clock runs", flush=True)
        procs = {name: psutil.Process(stack.get(name).proc.pid) for name in measured}
        cpu_before = {name: cpu_seconds(p) for name, p in procs.items()}
        version, shown = 0, 0
        while version < steps:
            deadline.check(f"services: waiting for v{version + 1} of {steps}")
            for name in measured:
                if not stack.get(name).alive():
                    raise RuntimeError(f"svc_{name} exited:\n{stack.get(name).tail()}")
            time.sleep(0.5)
            version = max([int(v.get("version", 0)) for v in latest_version(stack.bootstrap)] or [0])
            out.update(steps=version, seconds=time.perf_counter() - started)
            if version > shown:
                print(f"  services: v{version} after {out['seconds']:.0f}s", flush=True)
                shown = version
    finally:
        try:
            if procs:
                out["cpu"] = {name: cpu_seconds(p) - cpu_before[name] for name, p in procs.items()}
                out["wall"] = time.perf_counter() - started
            if stack.bootstrap is not None and stack.get("learner") is not None:
                scored = [r["value"] for r in read_range(stack.bootstrap, "scored") if "value" in r]
                samples = [s for g in scored for s in g.get("samples", [])]
                out["groups_scored"] = len(scored)
                out["accuracy"] = sum(bool(s.get("correct")) for s in samples) / max(len(samples), 1)
                policy_log = latest_version(stack.bootstrap)
                clock = broker_clock(stack.bootstrap, steps)
                if clock is not None:  # the broker's timestamps: first prompt to the last version's announcement
                    out["seconds_with_start"], (out["seconds"], out["step_gaps"]) = out["seconds"], clock
                out["dropped_stale"] = sum(int(float(v.get("stats", {}).get("samples_left_out_stale", 0)))
                                           for v in policy_log)
                out["skips"] = learner_skips(stack.bootstrap)
                out["learner_s"] = [(float(v.get("stats", {}).get("wait_s", 0)), float(v.get("stats", {}).get("step_s", 0)),
                                     float(v.get("stats", {}).get("wait_first_s", 0)))
                                    for v in sorted(policy_log, key=lambda v: int(v.get("version", 0)))
                                    if int(v.get("version", 0)) >= 1]
                out["decoded"] = step_sequences(stack.get("rollout").info().get("metrics_port"))
                if evaluation:
                    evals = [r["value"] for r in read_range(stack.bootstrap, "evals") if "value" in r]
                    out["evals"] = [(int(v.get("policy_version", 0)), float(v.get("pass1", 0.0)),
                                     float(v.get("duration_s", 0.0))) for v in evals]
        except Exception as exc:  # noqa: BLE001 - the clean-up below matters more than these numbers
            print(f"(services: reading the topics after the run failed: {exc})", file=sys.stderr)
        finally:
            stack.stop()
            if keep:
                print(f"services' run directory (logs, checkpoints) kept: {run}", flush=True)
            else:
                shutil.rmtree(run, ignore_errors=True)


def table(args: argparse.Namespace, kafka: dict, local: dict) -> None:
    """The side-by-side table, with whatever each side has (an early stop leaves partial rows)."""
    print("\n| side | steps | groups trained | s | groups/min | ratio | groups scored | skipped | sample accuracy |")
    print("|---|---|---|---|---|---|---|---|---|")

    def rate(r: dict) -> float:
        return r.get("steps", 0) * args.batch / r["seconds"] * 60 if r.get("seconds") else 0.0

    local_rate = rate(local)
    kafka_skips = sum(kafka.get("skips", {}).values())
    for name, r, skipped in (("in process (generate, score, train, reload in turn)", local, local.get("skipped", 0)),
                             ("services over Kafka (fed by svc_source)", kafka, kafka_skips)):
        if not r:
            print(f"| {name} | not run | | | | | | | |")
            continue
        ratio = f"{rate(r) / local_rate:.2f}" if local_rate else "-"
        print(f"| {name} | {r.get('steps', 0)}/{args.steps} | {r.get('steps', 0) * args.batch} | "
              f"{r.get('seconds', 0):.1f} | {rate(r):.1f} | {ratio} | {r.get('groups_scored', 0)} | {skipped} | "
              f"{r.get('accuracy', 0):.3f} |")
    if kafka.get("evals") is not None:
        done = sorted(kafka["evals"])
        print(f"\nsvc_eval: {len(done)} results (versions {', '.join(str(v) for v, _, _ in done)}), "
              f"{sum(d for _, _, d in done):.1f} s sampling and scoring in all; pass@1 "
              f"{', '.join(f'v{v} {p:.3f}' for v, p, _ in done)}")
    if kafka:
        print(f"\nservices: {kafka.get('groups_scored', 0)} groups scored by the end (rollouts run ahead); "
              f"learner skips by reason {kafka.get('skips', {})}; {kafka.get('dropped_stale', 0)} samples "
              "dropped as stale")
    if kafka.get("step_gaps"):
        gaps = kafka["step_gaps"]
        print(f"services: clock from the first prompt on the broker to v{args.steps}'s announcement "
              f"({kafka['seconds_with_start']:.1f}s from the source's launch, its start-up included); "
              f"seconds per step {', '.join(f'{g:.1f}' for g in gaps)} (first: prompt to v1); in process "
              f"{local.get('seconds', 0) / max(local.get('steps', 0), 1):.1f} s per step")
    if kafka.get("learner_s"):
        waits, steps, firsts = zip(*kafka["learner_s"])
        print(f"services: the learner waited for its batch {', '.join(f'{w:.2f}' for w in waits)} s (of which for "
              f"its first group {', '.join(f'{f:.2f}' for f in firsts)} s) and stepped "
              f"(update + checkpoint) {', '.join(f'{s:.2f}' for s in steps)} s; in process a step's train + "
              f"checkpoint {(local.get('phases', {}).get('train', 0) + local.get('phases', {}).get('checkpoint + reload', 0)) / max(local.get('steps', 0), 1):.2f} s")
    local_decoded = local.get("decoded") or []
    if local_decoded or kafka.get("decoded"):
        mean, count = kafka.get("decoded") or (0.0, 0)
        print(f"engine steps (each decodes a batch to completion): in process {len(local_decoded)}, "
              f"{sum(local_decoded) / max(len(local_decoded), 1):.1f} sequences each; services {count}, "
              f"{mean:.1f} sequences each (capacity {args.batch * args.group})")
    print("\n| where the time goes | seconds | occupancy (CPU s / wall s) |")
    print("|---|---|---|")
    wall = kafka.get("wall", 0.0)
    for name, seconds in kafka.get("cpu", {}).items():
        print(f"| svc_{name} CPU | {seconds:.1f} | {seconds / wall if wall else 0:.2f} |")
    if wall:
        print(f"| services wall | {wall:.1f} | |")
    if local.get("seconds"):
        print(f"| in process CPU (all phases) | {local.get('cpu', 0):.1f} | {local.get('cpu', 0) / local['seconds']:.2f} |")
    for name, seconds in local.get("phases", {}).items():
        print(f"| in process: {name} | {seconds:.1f} | |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=ENGINE_NAMES, default="native")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="stop, print what was measured and exit 2 after this many seconds "
                         "(default: 600 + 1 s per sample of the work: start-up takes minutes on 2 loaded cores)")
    ap.add_argument("--keep", action="store_true", help="keep the services' run directory (their logs) and say where")
    ap.add_argument("--eval-every", type=int, default=0, help="also run svc_eval, every N-th version (0: not)")
    ap.add_argument("--eval-prompts", type=int, default=32)
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--services-only", action="store_true", help="leave out the in-process side")
    args = ap.parse_args()
    evaluation = {"every": args.eval_every, "set": heldout_set(args.eval_prompts, args.eval_samples)} \
        if args.eval_every else None
    deadline = Deadline(args.deadline_s or default_deadline(args.steps, args.batch, args.group))
    on_signals(deadline)
    torch.set_num_threads(1)
    kafka: dict = {}
    local: dict = {}
    reason = ""
    home = Path(tempfile.mkdtemp(prefix="m1flow-bench-policy-"))
    try:
        policy = warm_started_policy(home / "p0", warmstart_for(args.engine))
        print(f"{args.engine} engine, {args.steps} steps x {args.batch} groups x {args.group} samples, window "
              f"{args.window}, lr {rl_lr(policy)}, deadline {deadline.seconds:.0f}s, load average "
              f"{', '.join(f'{x:.1f}' for x in psutil.getloadavg())}", flush=True)
        services(policy, args.engine, args.steps, args.batch, args.group, args.window, deadline, kafka, args.keep,
                 evaluation)
        if not args.services_only:
            in_process(policy, args.engine, args.steps, args.batch, args.group, args.window, deadline, local)
    except Stopped as exc:
        reason = str(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        shutil.rmtree(home, ignore_errors=True)
        table(args, kafka, local)
    end_of_run(reason)


def end_of_run(reason: str) -> None:
    """The load average the run ended under; exit 2 with the reason when it was stopped early."""
    print(f"\nload average at the end {', '.join(f'{x:.1f}' for x in psutil.getloadavg())}", flush=True)
    if reason:
        print(f"\nincomplete: {reason}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
