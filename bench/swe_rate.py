"""SWE grading rate: factory instances graded per minute by the reward service's swe scorer on the local
jail, in the repository's environment cold (built in the timed span, as the first instance of a
repository on a fresh sandbox host pays it), warm (built before), and without one (the sandbox's own
interpreter: the price of mounting the environment).

The instances are made once by the SWE factory (`m1flow data swe-make`'s code) from the fixture sdist
(more-itertools 10.5.0, its recipes' tests) with `--envs`, then each round grades every instance's
gold patch three ways, in turn, so the machine's load falls on all alike. The scorer is svc_reward's
`SweKind` on the prompt's VerifierSpec as svc_source writes it (task-store snapshot, the environment
by key), with the sandbox in-process (no gRPC hop).
Run: PYTHONPATH=. python bench/swe_rate.py [--mutations 8] [--rounds 3] [--work DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from m1flow.contracts import events
from m1flow.data import DatasetConfig, open_source
from m1flow.data.swe_env import EnvCache, EnvSpec
from m1flow.data.swe_factory import FactoryConfig, make_instances
from m1flow.kinds import gold_response
from m1flow.task_store import TaskStore
from svc_reward.verifiers.swe import SweKind
from svc_sandbox.backends.jail import JailBackend
from svc_sandbox.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]
SDIST = ROOT / "tests" / "fixtures" / "swe" / "more-itertools-10.5.0.tar.gz"


def instances(work: Path, mutations: int) -> tuple[Path, list[dict]]:
    """The factory's instances (made once, kept in work/instances.jsonl) and their environments' root."""
    out, envs = work / "instances.jsonl", work / "envs"
    if not out.exists():
        with tempfile.TemporaryDirectory() as tmp:
            made, stats = make_instances(SDIST, TaskStore(work / "tasks"), FactoryConfig(
                max_mutations=mutations, tests=["tests/test_recipes.py"]), Path(tmp), EnvCache(envs))
        print(stats.line())
        out.write_text("".join(json.dumps(i) + "\n" for i in made))
    return envs, [json.loads(line) for line in out.read_text().splitlines()]


def specs(path: Path) -> list[tuple[str, events.VerifierSpec]]:
    """(the gold answer, the VerifierSpec svc_source would publish) per instance."""
    out = []
    for _, record in open_source(DatasetConfig(path=str(path))).records():
        out.append((gold_response(record), record.to_prompt(group_size=1).verifier))
    return out


def without_env(spec: events.VerifierSpec) -> events.VerifierSpec:
    data = json.loads(spec.spec_json)
    data.pop("environment", None)
    plain = events.VerifierSpec()
    plain.CopyFrom(spec)
    plain.spec_json = json.dumps(data)
    return plain


def grade_all(kind: SweKind, cases: list[tuple[str, events.VerifierSpec]]) -> None:
    for answer, spec in cases:
        result = kind.score(answer, spec)
        assert result.reward == 1.0, result.detail  # every gold resolves, in every mode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutations", type=int, default=8, help="mutations the factory tries (instances: those kept)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=ROOT / "run" / "bench-swe")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    envs_root, made = instances(args.work, args.mutations)
    cases = specs(args.work / "instances.jsonl")
    key = made[0]["environment"]
    spec = EnvSpec.model_validate_json((envs_root / key / "environment.json").read_text())
    envs = EnvCache(envs_root)
    kind = SweKind(Sandbox(JailBackend(), envs=envs).run_tests, TaskStore(args.work / "tasks"))
    plain = [(answer, without_env(s)) for answer, s in cases]
    grade_all(kind, cases[:1])  # warm the caches (interpreter files, the jail's mounts)
    spent: dict[str, list[float]] = {"cold": [], "warm": [], "none": []}
    build: list[float] = []
    for _ in range(args.rounds):
        shutil.rmtree(envs_root / key)
        start = time.perf_counter()
        envs.ensure(spec)  # what the first grading on a fresh host waits for
        build.append(time.perf_counter() - start)
        grade_all(kind, cases)
        spent["cold"].append(time.perf_counter() - start)
        for mode, batch in (("warm", cases), ("none", plain)):
            start = time.perf_counter()
            grade_all(kind, batch)
            spent[mode].append(time.perf_counter() - start)
    n = len(cases)
    rate = {mode: [60 * n / s for s in times] for mode, times in spent.items()}
    f2p = sorted(len(i["FAIL_TO_PASS"]) for i in made)
    print(f"{n} instances of {made[0]['repo']} {made[0]['version']} (gold patches, {f2p[0]}-{f2p[-1]} FAIL_TO_PASS "
          f"tests each), {args.rounds} rounds; environment build {statistics.median(build):.1f} s (median); "
          f"load: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| environment | instances/min per round | median | s per instance | ratio to warm |")
    print("|---|---|---|---|---|")
    warm = statistics.median(rate["warm"])
    for mode, label in (("cold", "cold (built in the span)"), ("warm", "warm (built before)"),
                        ("none", "none (sandbox interpreter)")):
        med = statistics.median(rate[mode])
        print(f"| {label} | {' / '.join(f'{r:.1f}' for r in rate[mode])} | {med:.1f} | {60 / med:.2f} | "
              f"{med / warm:.2f} |")


if __name__ == "__main__":
    main()
