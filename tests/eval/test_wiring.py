"""How svc_eval is wired in: `m1flow up --sources FILE` starts it when the file lists `eval_sets:`
(the same file svc_source reads, relative paths made the file's), `m1flow control evaluate` is a
command on `control`, and `m1flow report` prints the held-out rows."""
from __future__ import annotations

import argparse

import pytest

from ops.cli import parser
from ops.control_cli import control_command
from ops.sources_file import has_eval_sets, resolved_sources
from ops.stack import Stack
from svc_eval.config import EvalConfig
from svc_source.config import SourceConfig


def test_the_stack_starts_the_stage_only_when_it_has_sets(tmp_path, monkeypatch):
    monkeypatch.delenv("M1FLOW_EVAL_SETS", raising=False)
    assert not Stack(tmp_path).configured("eval")
    assert Stack(tmp_path, service_args={"eval": ["--config", "run.yaml"]}).configured("eval")
    monkeypatch.setenv("M1FLOW_EVAL_SETS", '[{"generator": "arith"}]')
    assert Stack(tmp_path).configured("eval")


def test_one_run_file_gives_both_services_the_same_sets_with_paths_made_the_files(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "run.yaml").write_text("sources:\n  - generator: arith\neval_sets:\n  - path: held/test.jsonl\n"
                                   "    prompts: 20\n  - {generator: arith, seed: 9, name: sums}\nevery_versions: 3\n")
    out = resolved_sources(conf / "run.yaml", tmp_path / "run")
    assert has_eval_sets(out)
    source, stage = (cls.load(["--config", str(out)], env={}) for cls in (SourceConfig, EvalConfig))
    assert source.eval_sets == stage.eval_sets
    assert [s.path for s in stage.eval_sets] == [str(conf / "held" / "test.jsonl"), ""]
    assert [s.set_name for s in stage.eval_sets] == ["test", "sums"] and stage.every_versions == 3
    (conf / "plain.yaml").write_text("sources:\n  - generator: arith\n")
    assert not has_eval_sets(resolved_sources(conf / "plain.yaml", tmp_path / "run"))


def test_control_evaluate_names_a_version_and_optionally_sets():
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    args = sub.choices["control"].parse_args(["evaluate", "--version", "0", "--set", "a", "--set", "b"])
    msg = control_command(args.action, args.reason, version=args.version, sets=args.set)
    assert msg.WhichOneof("command") == "evaluate" and msg.evaluate.version == 0
    assert list(msg.evaluate.sets) == ["a", "b"] and msg.evidence.rule == "manual"
    with pytest.raises(SystemExit):
        sub.choices["control"].parse_args(["evaluate"])  # --version is required
