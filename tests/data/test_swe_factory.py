"""The SWE factory: mutations of real source, and a tiny slice of a real project (more-itertools 10.5.0,
MIT, tests/fixtures/swe/) made into SWE-bench instances that `m1flow data validate` checks through the
sandbox path a rollout takes: every kept instance's gold scores 1 and its empty patch 0."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from m1flow.data import DatasetConfig, open_source
from m1flow.data.record import TaskRecord
from m1flow.data.swe_env import EnvCache, EnvSpec
from m1flow.data.swe_factory import FactoryConfig
from m1flow.data.swe_factory.factory import candidates, load_project, source_files
from m1flow.data.swe_factory.mutations import mutations
from m1flow.task_store import TaskStore
from ops.data_cli import cmd_swe_make, cmd_validate

SDIST = Path(__file__).resolve().parent.parent / "fixtures" / "swe" / "more-itertools-10.5.0.tar.gz"
SOURCE = '''def clamp(x, low, high):
    """Keep x in [low, high]."""
    if x < low:
        return low
    total = x + 0
    return min(total, high)


class Box:
    def size(self):
        return len(self.items) - 1
'''


def test_each_operator_plants_a_one_line_bug():
    found = {(m.operator, m.old, m.new) for m in mutations("m.py", SOURCE)}
    assert ("flip_compare", "x < low", "x >= low") in found
    assert ("negate_condition", "x < low", "not (x < low)") in found
    assert ("flip_operator", "x + 0", "x - 0") in found and ("flip_operator", "len(self.items) - 1",
                                                              "len(self.items) + 1") in found
    assert ("off_by_one", "1", "2") in found and ("wrong_return", "return low", "return None") in found
    assert ("remove_statement", "total = x + 0", "pass") in found
    assert not any("Keep x" in m.old for m in mutations("m.py", SOURCE))  # never a docstring
    for mutation in mutations("m.py", SOURCE):
        changed = [(a, b) for a, b in zip(SOURCE.splitlines(), mutation.apply(SOURCE).splitlines()) if a != b]
        assert len(changed) == 1 and mutation.new in changed[0][1], mutation


def test_only_functions_the_tests_call_are_mutated():
    only_size = mutations("m.py", SOURCE, covered=lambda line: line == 10)
    assert only_size and {m.function for m in only_size} == {"Box.size"}


def test_the_seed_fixes_the_order_tried(tmp_path):
    project = load_project(SDIST, tmp_path)
    called = {(str(project.root / rel), n) for rel in source_files(project)
              for n in range(1, len((project.root / rel).read_text().splitlines()) + 1)}
    first = [m.key for m in candidates(project, called, FactoryConfig(seed=1, max_mutations=20))]
    assert first == [m.key for m in candidates(project, called, FactoryConfig(seed=1, max_mutations=20))]
    assert first != [m.key for m in candidates(project, called, FactoryConfig(seed=2, max_mutations=20))]
    assert project.license == "MIT License" and project.version == "10.5.0"


def changed_lines(patch: str) -> tuple[list[str], list[str]]:
    """(the lines a patch adds, those it removes), file headers left out."""
    lines = [line for line in patch.splitlines() if line[:3] not in ("+++", "---")]
    return [ln[1:] for ln in lines if ln[:1] == "+"], [ln[1:] for ln in lines if ln[:1] == "-"]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, Path, list[dict]]:
    """swe-make on a slice of the real project: its recipes' tests, four mutations tried."""
    root = tmp_path_factory.mktemp("made")
    out, store = root / "instances.jsonl", root / "tasks"
    args = argparse.Namespace(sources=[SDIST], out=out, task_store=store, seed=0, max_mutations=4,
                              tests=["tests/test_recipes.py"], envs=root / "envs")
    assert cmd_swe_make(args) == 0
    return out, store, [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture(scope="module")
def sandbox(made, tmp_path_factory) -> str:
    """One local sandbox holding the project's environment, where the instances' tests run."""
    from ops.launcher import launch
    from svc_sandbox.backends.jail import JailBackend

    backend = [] if JailBackend.missing() else ["--backend", "jail"]
    envs = made[0].parent / "envs"
    proc = launch("sandbox", tmp_path_factory.mktemp("sandbox"), bootstrap="unused:0",
                  args=[*backend, "--swe-envs", str(envs)])
    yield proc.grpc_address
    proc.stop()


def test_kept_mutations_become_swe_bench_instances(made):
    out, store, instances = made
    assert instances, "no mutation of four was caught by the tests"
    for instance in instances:
        assert instance["FAIL_TO_PASS"] and not set(instance["FAIL_TO_PASS"]) & set(instance["PASS_TO_PASS"])
        fix, bug = changed_lines(instance["patch"])
        shown = [line.strip() for line in fix + bug if len(line.strip()) > 6]
        assert fix and not any(line in instance["problem_statement"] for line in shown)
        assert instance["license"] == "MIT License" and instance["test_patch"] == ""
    assert len({instance["environment"] for instance in instances}) == 1  # one environment per repository


def test_the_projects_environment_is_built_once_and_reused(made):
    out, store, instances = made
    envs = out.parent / "envs"
    assert [p.name for p in envs.iterdir() if p.is_dir()] == [instances[0]["environment"]]
    again = EnvCache(envs).ensure(EnvSpec(repo="more-itertools", version="10.5.0"))
    assert (again.key, again.built) == (instances[0]["environment"], False)


def test_the_instances_read_as_swe_records(made):
    out, store, instances = made
    records = [r for _, r in open_source(DatasetConfig(path=str(out))).records()]
    assert all(isinstance(r, TaskRecord) and r.verifier.kind == "swe" for r in records), records


def test_every_instance_validates_through_the_sandbox(made, sandbox, capsys):
    out, store, instances = made
    args = argparse.Namespace(files=[out], format=None, importer="auto", kinds="{}", sandbox=sandbox, limit=None,
                              jobs=2, split=None, progress_every=60.0, task_store=store)
    code = cmd_validate(args)
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"{len(instances)} good, 0 bad" in printed


def test_validate_refuses_an_instance_whose_gold_does_not_fix_it(made, sandbox, capsys, tmp_path):
    out, store, instances = made
    gold = instances[0]["patch"]
    fix, bug = changed_lines(gold)
    broken = {**instances[0], "patch": gold.replace(f"\n+{fix[0]}\n", f"\n+{bug[0]}\n", 1)}  # changes nothing
    assert broken["patch"] != gold
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(broken) + "\n")
    args = argparse.Namespace(files=[path], format=None, importer="auto", kinds="{}", sandbox=sandbox, limit=None,
                              jobs=1, split=None, progress_every=60.0, task_store=store)
    assert cmd_validate(args) == 1
    printed = capsys.readouterr().out
    assert "broken.jsonl:0: verifier.gold: the gold scores 0, not 1" in printed, printed



def test_a_project_whose_tests_call_none_of_its_functions_is_refused(tmp_path):
    """A src/ layout's suite imports an installed copy (here: none at all), so no function of the tree is
    covered: the factory says so instead of making zero instances in silence."""
    from m1flow.data.swe_factory import FactoryError, make_instances

    project = tmp_path / "proj"
    (project / "src" / "proj").mkdir(parents=True)
    (project / "src" / "proj" / "__init__.py").write_text("def double(x):\n    return x * 2\n")
    (project / "tests").mkdir()
    (project / "tests" / "test_it.py").write_text("def test_nothing_of_the_tree():\n    assert 2 * 2 == 4\n")
    (tmp_path / "work").mkdir()
    with pytest.raises(FactoryError, match="call none of its own functions"):
        make_instances(project, TaskStore(tmp_path / "tasks"), FactoryConfig(), tmp_path / "work")
