"""SWE grading rate: factory instances graded per minute by the reward service's swe scorer on the local
jail, in the repository's environment cold (built in the timed span, as the first instance of a
repository on a fresh sandbox host pays it), warm (built before), and without one (the sandbox's own
interpreter: the price of mounting the environment).

The instances are made once by the SWE factory (`m1flow data swe-make`'s code) from the fixture sdist
(more-itertools 10.5.0, its recipes' tests) with `--envs`, then each round grades every instance's
gold patch three ways, in turn, so the machine's load falls on all alike. The scorer is svc_reward's
`SweKind` on the prompt's VerifierSpec as svc_source writes it (task-store snapshot, the environment
by key), with the sandbox in-process (no gRPC hop).
With --set DIR (the shipped set scripts/swe_factory.sh builds, printed as its last line) the instances
are the set's instead: the first --per-repo of each of its projects, graded from its task store, their
environments built from the set's specs into the bench's own folder (the set itself is only read), so
cold is every project's environment built in the span.
Run: PYTHONPATH=. python bench/swe_rate.py [--mutations 8] [--rounds 3] [--work DIR]
     PYTHONPATH=. python bench/swe_rate.py --set "$(scripts/swe_factory.sh --print-dir)" [--per-repo 2]
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


def from_set(set_dir: Path, work: Path, per_repo: int) -> tuple[Path, list[dict]]:
    """The first `per_repo` instances of each project of a built set (written to work/instances.jsonl)
    and the set's environments' root, which holds their specs."""
    if not (set_dir / "COMPLETE").exists():
        raise SystemExit(f"{set_dir}: not a complete set (scripts/swe_factory.sh builds it)")
    taken: dict[str, int] = {}
    made = []
    for line in (set_dir / "instances.jsonl").read_text().splitlines():
        row = json.loads(line)
        if taken.get(row["repo"], 0) < per_repo:
            taken[row["repo"]] = taken.get(row["repo"], 0) + 1
            made.append(row)
    (work / "instances.jsonl").write_text("".join(json.dumps(i) + "\n" for i in made))
    return set_dir / "envs", made


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


def env_specs(envs_root: Path, made: list[dict]) -> list[EnvSpec]:
    """The environments the instances name, from their specs (environment.json) under envs_root."""
    keys = sorted({i["environment"] for i in made})
    return [EnvSpec.model_validate_json((envs_root / key / "environment.json").read_text()) for key in keys]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutations", type=int, default=8, help="mutations the factory tries (instances: those kept)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=ROOT / "run" / "bench-swe")
    parser.add_argument("--set", type=Path, default=None, metavar="DIR",
                        help="grade a built set's instances (scripts/swe_factory.sh) instead of the fixture's")
    parser.add_argument("--per-repo", type=int, default=2, help="with --set: instances graded per project")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.set:
        source_envs, made = from_set(args.set, args.work, args.per_repo)
        envs_root, store = args.work / "envs", TaskStore(args.set / "tasks")
    else:
        source_envs, made = instances(args.work, args.mutations)
        envs_root, store = source_envs, TaskStore(args.work / "tasks")
    cases = specs(args.work / "instances.jsonl")
    wanted = env_specs(source_envs, made)
    envs = EnvCache(envs_root)
    for spec in wanted:
        envs.ensure(spec)
    kind = SweKind(Sandbox(JailBackend(), envs=envs).run_tests, store)
    plain = [(answer, without_env(s)) for answer, s in cases]
    grade_all(kind, cases[:1])  # warm the caches (interpreter files, the jail's mounts)
    spent: dict[str, list[float]] = {"cold": [], "warm": [], "none": []}
    build: list[float] = []
    load = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for spec in wanted:
            shutil.rmtree(envs_root / spec.key)
        start = time.perf_counter()
        for spec in wanted:
            envs.ensure(spec)  # what the first grading on a fresh host waits for
        build.append(time.perf_counter() - start)
        grade_all(kind, cases)
        spent["cold"].append(time.perf_counter() - start)
        for mode, batch in (("warm", cases), ("none", plain)):
            start = time.perf_counter()
            grade_all(kind, batch)
            spent[mode].append(time.perf_counter() - start)
        load.append(os.getloadavg()[0])
    n = len(cases)
    rate = {mode: [60 * n / s for s in times] for mode, times in spent.items()}
    f2p = sorted(len(i["FAIL_TO_PASS"]) for i in made)
    repos = sorted({f"{i['repo']} {i['version']}" for i in made})
    print(f"{n} instances of {', '.join(repos)} (gold patches, {f2p[0]}-{f2p[-1]} FAIL_TO_PASS tests each), "
          f"{args.rounds} rounds; {len(wanted)} environment(s) built in {statistics.median(build):.1f} s (median); "
          f"load (1-min, before and after each round): {' / '.join(f'{x:.1f}' for x in load)} on {os.cpu_count()} cores")
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
