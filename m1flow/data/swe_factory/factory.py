"""SWE tasks from a real Python project: plant one bug, keep it when some passing tests fail, write the
SWE-bench instance whose gold patch reverts it.

Why from source distributions: nothing here reaches GitHub, but PyPI serves the sdists of real
projects with their tests inside. The project's suite runs once (the baseline: which tests pass, and
which of the project's functions they call); then each mutation (m1flow.data.swe_factory.mutations)
of a called function, in an order fixed by the seed, is committed to a git repository of the
project and the suite runs again. A mutation is kept when it turns between 1 and `max_fail_to_pass`
passing tests into failures that a second run of them confirms (FAIL_TO_PASS: a randomised test
that passes then is left out); PASS_TO_PASS are the other passing tests of the files
those live in. The instance's problem statement is what a user would report (the failing tests'
names and their errors, never the diff), its snapshot the mutated tree in the task store, its gold
the reverting diff. `m1flow data validate` then checks every instance through the sandbox path a
rollout takes (the gold scores 1, the empty patch 0).
"""
from __future__ import annotations

import email.parser
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from m1flow.data.swe_env import EnvCache, EnvError, EnvSpec
from m1flow.data.swe_factory.mutations import Mutation, mutations
from m1flow.data.swebench import DEFAULT_TEST_COMMAND, instance_snapshot
from m1flow.task_store import TaskStore

PLUGIN = Path(__file__).with_name("pytest_outcomes.py")
PASSING = frozenset({"passed", "xfailed"})
GIT_ENV = {"GIT_AUTHOR_NAME": "m1flow", "GIT_AUTHOR_EMAIL": "m1flow@localhost", "GIT_COMMITTER_NAME": "m1flow",
           "GIT_COMMITTER_EMAIL": "m1flow@localhost", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}  # fixed: the same seed makes the same commits
SKIP_DIRS = frozenset({"tests", "test", "testing", "docs", "doc", "examples", "benchmarks", "build", ".git"})


class FactoryConfig(BaseModel):
    """How many bugs to try and which to keep; every default works on a 2-core laptop."""
    seed: int = Field(0, description="the order mutations are tried in (the same seed, the same instances)")
    max_mutations: int = Field(50, ge=1, description="mutations tried (each one run of the suite)")
    per_function: int = Field(2, ge=1, description="mutations tried per function, for variety")
    max_fail_to_pass: int = Field(10, ge=1, description="more failing tests than this: too broad a bug, dropped")
    timeout_factor: float = Field(5.0, gt=1, description="a mutant's run may take this many baselines (+10 s)")
    operators: tuple[str, ...] | None = Field(None, description="mutation operators (default: all)")
    tests: list[str] | None = Field(None, description="test paths to run (default: the project's tests folder)")


class FactoryError(RuntimeError):
    """A project the factory cannot use (no tests, a suite that does not run, an unreadable sdist)."""


@dataclass
class Project:
    root: Path
    name: str
    version: str
    license: str
    tests: list[str]  # test paths, relative to root
    requirements: list[str] = field(default_factory=list)  # PKG-INFO's Requires-Dist, extras left out
    python: str = sys.executable  # the interpreter that runs the suite (its environment's)

    @property
    def slug(self) -> str:
        return f"{self.name}-{self.version}".replace("/", "_")


@dataclass
class Stats:
    tried: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    cpu_s: float = 0.0
    wall_s: float = 0.0

    def line(self) -> str:
        per_min = self.kept / (self.cpu_s / 60) if self.cpu_s else 0.0
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.dropped.items()))
        return (f"swe-make: {self.kept} instances kept of {self.tried} mutations tried "
                f"({self.kept / max(self.tried, 1):.2f} per mutation); {self.cpu_s:.1f} CPU-s, {self.wall_s:.1f} s wall, "
                f"{per_min:.2f} instances per CPU-minute; dropped: {why or 'none'}")


def _license(meta: email.message.Message) -> str:
    text = (meta.get("License-Expression") or meta.get("License") or "").strip()
    if text and "\n" not in text and len(text) < 60:
        return text
    classifiers = [c.rsplit("::", 1)[1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    return classifiers[0] if classifiers else "unknown"


def load_project(source: str | Path, work: Path) -> Project:
    """An sdist (.tar.gz) unpacked under `work`, or a project directory copied there; its name, version
    and licence from PKG-INFO, its tests: the tests/ or test/ folder, else a package's, else test_*.py
    at its root."""
    source = Path(source)
    if source.is_dir():
        root = work / source.name
        shutil.copytree(source, root, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))
    elif source.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(source) as tar:
            tar.extractall(work, filter="data")
        tops = [p for p in work.iterdir() if p.is_dir()]
        if len(tops) != 1:
            raise FactoryError(f"{source}: an sdist holds one top folder, this one {len(tops)}")
        root = tops[0]
    else:
        raise FactoryError(f"{source}: give an sdist (.tar.gz) or a project directory")
    info = root / "PKG-INFO"
    meta = email.parser.Parser().parsestr(info.read_text(errors="replace")) if info.exists() else None
    name = (meta.get("Name") if meta else None) or root.name
    version = (meta.get("Version") if meta else None) or "0"
    tests = [d for d in ("tests", "test") if (root / d).is_dir()] or \
        sorted(str(p.relative_to(root)) for p in (*root.glob("*/tests"), *root.glob("*/test")) if p.is_dir()) or \
        sorted(p.name for p in root.glob("test_*.py"))
    if not tests:
        raise FactoryError(f"{source}: no tests (a tests/ or test/ folder, at the top or in a package, or "
                           "test_*.py at the top)")
    requires = [r for r in (meta.get_all("Requires-Dist") or [] if meta else []) if "extra ==" not in r]
    return Project(root, name, version, _license(meta) if meta else "unknown", tests, requires)


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, env={**os.environ, **GIT_ENV})
    if done.returncode:
        raise FactoryError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def run_suite(project: Project, plugin_dir: Path, timeout: float, cover: bool = False,
              tests: list[str] | None = None) -> dict[str, Any] | None:
    """The suite's (or `tests`') per-test outcomes (and, with cover, the functions it called); None on a
    timeout."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {**os.environ, "PYTHONPATH": str(plugin_dir), "PYTHONDONTWRITEBYTECODE": "1",
               "M1FLOW_OUTCOMES": out.name}
        if cover:
            env["M1FLOW_COVER"] = str(project.root)
        try:
            subprocess.run([project.python, "-m", "pytest", "-p", "pytest_outcomes", "-p", "no:cacheprovider", "-q",
                            *(tests or project.tests)], cwd=project.root, env=env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        text = Path(out.name).read_text()
    return json.loads(text) if text else {"tests": {}, "called": []}


def source_files(project: Project) -> list[Path]:
    """The project's own modules (not its tests, docs or setup), relative to its root, sorted."""
    found = []
    for path in sorted(project.root.rglob("*.py")):
        rel = path.relative_to(project.root)
        if SKIP_DIRS.intersection(rel.parts[:-1]) or rel.name in ("setup.py", "conftest.py", "noxfile.py") or \
                rel.name.startswith("test_") or rel.name.endswith("_test.py"):
            continue
        found.append(rel)
    return found


def candidates(project: Project, called: set[tuple[str, int]], cfg: FactoryConfig) -> list[Mutation]:
    """The mutations to try, in the seed's order, at most `per_function` per function."""
    every: list[Mutation] = []
    for rel in source_files(project):
        path = str(project.root / rel)
        try:
            every += mutations(str(rel), (project.root / rel).read_text(), lambda line: (path, line) in called,
                               cfg.operators)
        except (SyntaxError, UnicodeDecodeError):
            continue
    random.Random(cfg.seed).shuffle(every)
    per: dict[tuple[str, str], int] = defaultdict(int)
    chosen = []
    for mutation in every:
        key = (mutation.path, mutation.function)
        if per[key] < cfg.per_function:
            per[key] += 1
            chosen.append(mutation)
    return chosen[:cfg.max_mutations]


def problem_statement(project: Project, failing: list[str], outcomes: dict[str, dict], mutation: Mutation) -> str:
    """What a user would report: the failing tests and their errors; no line of the mutated source."""
    parts = [f"After installing {project.name} {project.version}, {len(failing)} of its tests fail "
             f"(they passed before). Running `python -m pytest {' '.join(failing[:3])}` reports:"]
    for test in failing[:3]:
        error = "\n".join(line for line in outcomes[test]["error"].splitlines()
                          if not (len(mutation.new) > 3 and mutation.new in line))
        parts.append(f"{test}\n" + "\n".join(f"    {line}" for line in (error or "(no message)").splitlines()))
    if len(failing) > 3:
        parts.append("Also failing: " + ", ".join(failing[3:10]) + (" ..." if len(failing) > 10 else ""))
    parts.append("Please find the cause in the library and fix it.")
    return "\n\n".join(parts)


def _rusage_cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def make_instances(source: str | Path, store: TaskStore, cfg: FactoryConfig, work: Path,
                   envs: EnvCache | None = None) -> tuple[list[dict], Stats]:
    """SWE-bench instances from one project; the stats say how many mutations were tried and kept, why
    the others were dropped, and the CPU and wall time spent. envs: build (or reuse) the project's
    environment there, run its suite with it, and name it in every instance."""
    cpu0, wall0 = _rusage_cpu(), time.monotonic()
    project = load_project(source, work)
    environment = None
    if envs is not None:
        try:
            env = envs.ensure(EnvSpec(repo=project.name, version=project.version, requirements=project.requirements))
        except EnvError as exc:
            raise FactoryError(str(exc)) from None
        project.python, environment = str(env.python), env.key
    if cfg.tests:
        missing = [t for t in cfg.tests if not (project.root / t.split("::", 1)[0]).exists()]
        if missing:
            raise FactoryError(f"{project.slug}: no such test path: {', '.join(missing)}")
        project.tests = list(cfg.tests)
    plugin_dir = work / "plugin"
    plugin_dir.mkdir()
    shutil.copy(PLUGIN, plugin_dir / PLUGIN.name)
    _git(project.root, "init", "-q")
    _git(project.root, "add", "-A")
    _git(project.root, "commit", "-q", "--no-verify", "-m", f"{project.slug} as released")
    original = _git(project.root, "rev-parse", "HEAD").strip()
    started = time.monotonic()
    baseline = run_suite(project, plugin_dir, timeout=600, cover=True)
    if baseline is None:
        raise FactoryError(f"{project.slug}: the suite did not finish in 600 s")
    timeout = (time.monotonic() - started) * cfg.timeout_factor + 10
    passing = {t for t, o in baseline["tests"].items() if o["outcome"] in PASSING}
    if not passing:
        raise FactoryError(f"{project.slug}: no test passes as released (does the suite run here?)")
    tried = candidates(project, {(f, n) for f, n in baseline["called"]}, cfg)
    if not tried:
        raise FactoryError(f"{project.slug}: its passing tests call none of its own functions: nothing to mutate "
                           "(a src/ layout's tests import an installed copy, not this tree)")
    stats, instances = Stats(), []
    for mutation in tried:
        stats.tried += 1
        path = project.root / mutation.path
        clean = path.read_text()
        path.write_text(mutation.apply(clean))
        try:
            failing, outcomes, why = self_check(project, plugin_dir, timeout, passing, cfg.max_fail_to_pass)
        finally:
            path.write_text(clean)
        if why:
            stats.dropped[why] += 1
            continue
        instances.append(_instance(project, store, mutation, original, failing, passing, outcomes, stats.tried))
        if environment:
            instances[-1]["environment"] = environment
        stats.kept += 1
    stats.cpu_s, stats.wall_s = _rusage_cpu() - cpu0, time.monotonic() - wall0
    return instances, stats


def self_check(project: Project, plugin_dir: Path, timeout: float, passing: set[str],
               most: int) -> tuple[list[str], dict[str, dict], str]:
    """(the passing tests the mutant fails, every test's outcome, "") or ([], {}, why it is dropped);
    the failures are run a second time and those that pass then (randomised tests) are left out."""
    run = run_suite(project, plugin_dir, timeout)
    if run is None:
        return [], {}, "timed out"
    failing = sorted(t for t in passing if run["tests"].get(t, {}).get("outcome") not in PASSING)
    if not failing:
        return [], {}, "no test failed"
    if len(failing) > most:
        return [], {}, "too many tests failed"
    again = run_suite(project, plugin_dir, timeout, tests=failing) or {"tests": {}}
    failing = [t for t in failing if again["tests"].get(t, {}).get("outcome") not in PASSING]
    return failing, run["tests"], "" if failing else "flaky tests"


def _instance(project: Project, store: TaskStore, mutation: Mutation, original: str, failing: list[str],
              passing: set[str], outcomes: dict[str, dict], number: int) -> dict[str, Any]:
    """The mutant committed beside the original, its snapshot stored, the reverting diff as the gold."""
    path = project.root / mutation.path
    clean = path.read_text()
    path.write_text(mutation.apply(clean))
    _git(project.root, "commit", "-q", "--no-verify", "-am", f"mutant {mutation.key}")
    mutant = _git(project.root, "rev-parse", "HEAD").strip()
    _git(project.root, "reset", "-q", "--hard", original)
    files = {t.split("::", 1)[0] for t in failing}
    p2p = sorted(t for t in passing - set(failing) if t.split("::", 1)[0] in files)
    return {
        "instance_id": f"{project.slug}__m{number:04d}", "repo": project.name, "base_commit": mutant,
        "patch": _git(project.root, "diff", mutant, original), "test_patch": "",
        "problem_statement": problem_statement(project, failing, outcomes, mutation), "hints_text": "",
        "FAIL_TO_PASS": failing, "PASS_TO_PASS": p2p, "version": project.version,
        "environment_setup_commit": original, "created_at": GIT_ENV["GIT_COMMITTER_DATE"],
        "payload_uri": store.put(instance_snapshot(project.root, mutant)), "test_cmd": DEFAULT_TEST_COMMAND,
        "license": project.license,
        "mutation": {"operator": mutation.operator, "path": mutation.path, "line": mutation.line,
                     "function": mutation.function}}


def license_lines(instances: str | Path) -> list[str]:
    """The set's LICENSES listing: one `project<TAB>version<TAB>licence` line per project of an instances
    file, from the instances themselves (the licence each one carries from its PKG-INFO), so the listing
    cannot name a project the set lacks or miss one it has."""
    seen: dict[tuple[str, str], str] = {}
    for line in Path(instances).read_text().splitlines():
        row = json.loads(line)
        seen.setdefault((row["repo"], row["version"]), row.get("license") or "unknown")
    return [f"{repo}\t{version}\t{licence}" for (repo, version), licence in sorted(seen.items())]
