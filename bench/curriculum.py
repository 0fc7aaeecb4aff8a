"""Online difficulty filtering: the same policy and wall-clock budget trained with and without it.

The mixture has a source too easy for the warm-started policy (one-digit sums), one in its reach
(operands to 12, what it was warm-started on) and one too hard (four-digit operands), equal
weights, each a small generator (`--rows` items) so rows come back epoch after epoch, as a
finite dataset's do. Both sides run the whole pipeline (broker, svc_learner with dynamic sampling,
svc_reward, svc_rollout, svc_source) for `--minutes` from the source's start; the filtered side's
source follows `scored` and retires rows out of the (0, 0.9) band (svc_source/filter.py).

Reported per side: groups scored, the share the learner skipped (dynamic sampling: nothing to learn),
groups trained per minute, the rows the filter retired, and held-out accuracy per source of the
final policy (fresh items of each source, another seed, sampled as in training), so the regime is
visible: an easy source near 1, a hard one near 0, the middle one in between.

Run: PYTHONPATH=. python bench/curriculum.py [--minutes 4] [--rows 24] [--batch 8] [--group 4]
"""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pipeline import Deadline, Stopped, learner_skips, on_signals  # noqa: E402
from m1flow import checkpoint  # noqa: E402
from m1flow.contracts import events  # noqa: E402
from m1flow.data.dataset import DatasetConfig, open_source  # noqa: E402
from ops.demo import rl_lr, warmstart_for  # noqa: E402
from m1flow.tasks.arith import parse_answer  # noqa: E402
from ops.warmstart import warm_started_policy  # noqa: E402
from m1flow.engines.base import GroupRequest  # noqa: E402

SOURCES = {"easy": 3, "reach": 12, "hard": 9999}  # name -> max operand
HELD_OUT_SEED = 777


def mixture(rows: int) -> list[dict]:
    return [{"generator": "arith", "name": name, "size": rows, "seed": i + 1, "config": {"max_operand": top}}
            for i, (name, top) in enumerate(SOURCES.items())]


def run_side(policy: Path, filtered: bool, args: argparse.Namespace, deadline: Deadline) -> dict:
    """One side: the stack for `--minutes` from the source's start; its numbers, the final policy kept."""
    from ops.stack import Stack
    from ops.topics_io import read_range

    run = Path(tempfile.mkdtemp(prefix=f"m1flow-bench-curriculum-{'on' if filtered else 'off'}-"))
    settings = run / "sources.json"
    settings.write_text(json.dumps({"sources": mixture(args.rows), "group_size": args.group,
                                    "batch_groups": args.batch, "filter": {"enabled": filtered}}))
    stack = Stack(run, model=policy, service_args={
        "learner": ["--batch-groups", str(args.batch), "--train", json.dumps({"lr": rl_lr(policy), "minibatches": 2})],
        "rollout": ["--group-size", str(args.group), "--max-new-tokens", str(args.window),
                    "--batch-groups", str(args.batch), "--device", "cpu"],
        "source": ["--config", str(settings)]})
    out: dict = {"side": "filter on" if filtered else "filter off"}
    try:
        stack.start(services=("learner", "reward", "rollout"))
        deadline.check("starting the services")
        stack.start_service("source")
        started = time.monotonic()
        print(f"{out['side']}: services up, {args.minutes} min from now", flush=True)
        while time.monotonic() - started < args.minutes * 60:
            deadline.check(f"{out['side']}: training")
            for name in ("learner", "reward", "rollout", "source"):
                if not stack.get(name).alive():
                    raise RuntimeError(f"svc_{name} exited:\n{stack.get(name).tail()}")
            time.sleep(1.0)
        out["minutes"] = (time.monotonic() - started) / 60
        policies = [r["value"] for r in read_range(stack.bootstrap, "policy") if "value" in r]
        newest = max(policies, key=lambda v: int(v.get("version", 0)), default=None)
        out["versions"] = int(newest.get("version", 0)) if newest else 0
        scored = [r["value"] for r in read_range(stack.bootstrap, "scored") if "value" in r]
        out["scored"] = len(scored)
        out["scored_by_source"] = {n: sum(g.get("source") == n for g in scored) for n in SOURCES}
        out["skipped"] = sum(learner_skips(stack.bootstrap).values())
        out["retired"] = retired_rows(stack.get("source").info()["metrics_port"]) if filtered else {}
        if newest:  # the final policy leaves with the side's run directory: keep a copy to evaluate
            kept = Path(tempfile.mkdtemp(prefix="m1flow-bench-final-"))
            shutil.copytree(checkpoint.path_of(newest["checkpoint_uri"]), kept / "policy")
            out["final"] = kept / "policy"
    finally:
        stack.stop()
        shutil.rmtree(run, ignore_errors=True)
    return out


def retired_rows(port: int) -> dict[str, int]:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("m1flow_source_retired_rows{"):
            source = line.split('source="')[1].split('"')[0]
            out[source] = out.get(source, 0) + int(float(line.split()[-1]))
    return out


def held_out(policy: Path, args: argparse.Namespace) -> dict[str, float]:
    """Accuracy per source on `--held-out` fresh items (another seed), G samples each, as in training."""
    from svc_rollout.config import RolloutConfig
    from m1flow.engines import build

    engine = build(RolloutConfig(batch_groups=args.batch, group_size=args.group, device="cpu"))
    engine.load(events.PolicyVersion(version=1, checkpoint_uri=checkpoint.uri_for(policy)))
    accuracy = {}
    for name, top in SOURCES.items():
        source = open_source(DatasetConfig(generator="arith", size=args.held_out, seed=HELD_OUT_SEED,
                                           config={"max_operand": top}))
        golds = {}
        for row, record in source.records():
            golds[str(row)] = int(record.verifier.gold)
            engine.submit(GroupRequest(str(row), engine.prompt_ids(record.text), args.group, args.window, 1.0, 0.95,
                                       row, 3000, 0.99))
        results = []
        while engine.in_flight():
            results += engine.step()
        right = [parse_answer(engine.decode(s.tokens)) == golds[r.request.key] for r in results for s in r.samples]
        accuracy[name] = sum(right) / max(len(right), 1)
    return accuracy


def table(sides: list[dict], batch: int) -> None:
    names = list(SOURCES)
    print("\n| side | minutes | versions | groups scored | skipped by the learner | skipped share | "
          "groups trained/min | rows retired | " + " | ".join(f"held-out {n}" for n in names) + " |")
    print("|---|---|---|---|---|---|---|---|" + "---|" * len(names))
    for s in sides:
        trained = s.get("versions", 0) * batch
        share = s.get("skipped", 0) / max(s.get("scored", 0), 1)
        acc = s.get("held_out", {})
        print(f"| {s['side']} | {s.get('minutes', 0):.1f} | {s.get('versions', 0)} | {s.get('scored', 0)} | "
              f"{s.get('skipped', 0)} | {share:.2f} | {trained / max(s.get('minutes', 0), 1e-9):.1f} | "
              f"{s.get('retired') or '-'} | " + " | ".join(f"{acc[n]:.2f}" if n in acc else "-" for n in names) + " |")
    for s in sides:
        print(f"{s['side']}: groups scored by source {s.get('scored_by_source', {})}")



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=4.0, help="training time per side, from the source's start")
    ap.add_argument("--rows", type=int, default=24, help="items per source (epochs repeat them)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--held-out", type=int, default=32, help="fresh items per source for the final accuracy")
    ap.add_argument("--deadline-s", type=float, default=None)
    args = ap.parse_args()
    deadline = Deadline(args.deadline_s or 1200 + 2 * 60 * args.minutes)
    on_signals(deadline)
    torch.set_num_threads(1)
    sides: list[dict] = []
    reason = ""
    home = Path(tempfile.mkdtemp(prefix="m1flow-bench-policy-"))
    try:
        policy = warm_started_policy(home / "p0", warmstart_for("native"))
        print(f"{args.minutes} min per side, {args.rows} rows per source, batch {args.batch} x G {args.group}, "
              f"load average {', '.join(f'{x:.1f}' for x in psutil.getloadavg())}", flush=True)
        start = held_out(policy, args)
        print(f"warm start, held-out accuracy per source: {start}", flush=True)
        for filtered in (False, True):
            side = run_side(policy, filtered, args, deadline)
            sides.append(side)
            if side.get("final"):
                side["held_out"] = held_out(side["final"], args)
                shutil.rmtree(side["final"].parent, ignore_errors=True)
    except Stopped as exc:
        reason = str(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        shutil.rmtree(home, ignore_errors=True)
        table(sides, args.batch)
        print(f"\nload average at the end {', '.join(f'{x:.1f}' for x in psutil.getloadavg())}", flush=True)
    if reason:
        print(f"\nincomplete: {reason}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
