"""Verifier kinds through the registry: lazy modules, one scorer per replica, failures marked, the
GenRM block and its old flat keys, and the in-process scorer other tools use."""
from __future__ import annotations

import builtins
import json
import logging
import subprocess
import sys
import textwrap

import pytest
import yaml

from m1flow.contracts import events
from m1flow.registry import Registry
from m1flow.status import Status
from svc_reward.client import LocalScorer, known_kinds
from svc_reward.config import RewardConfig
from m1flow.kinds import kind_of
from svc_reward.kinds import SCORERS
from svc_reward.scorers import ScorerRegistry


def test_a_lazy_name_imports_its_module_on_first_lookup_only(tmp_path, monkeypatch):
    (tmp_path / "lazy_plugin_mod.py").write_text(textwrap.dedent("""
        import builtins
        PLUGINS = builtins.M1FLOW_TEST_PLUGINS
        IMPORTS = []
        IMPORTS.append(1)
        PLUGINS.add("plug", "the plugin")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(builtins, "M1FLOW_TEST_PLUGINS", PLUGINS, raising=False)
    PLUGINS.lazy("plug", "lazy_plugin_mod")
    assert "plug" in PLUGINS and PLUGINS.names() == ("plug",) and "lazy_plugin_mod" not in sys.modules
    assert PLUGINS.get("plug") == "the plugin" and PLUGINS.get("plug") == "the plugin"
    assert sys.modules["lazy_plugin_mod"].IMPORTS == [1]
    PLUGINS.lazy("ghost", "json")  # a module that registers nothing of that name
    with pytest.raises(ValueError, match="importing json did not register it"):
        PLUGINS.get("ghost")
    with pytest.raises(ValueError, match=r"unknown plugin 'nope'; known: ghost, plug"):
        PLUGINS.get("nope")


PLUGINS: Registry[str] = Registry("plugin")


def test_every_kind_is_declared_and_a_replica_imports_none_before_its_first_task():
    assert known_kinds() == ("arith", "choice", "code", "genrm", "logic", "math", "rg", "swe", "text")
    assert kind_of(events.VerifierSpec(kind="logic:sudoku").kind) == "logic"
    assert kind_of(events.VerifierSpec(kind="rg:leg_counting").kind) == "rg"
    probe = ("import sys; from svc_reward.scorers import ScorerRegistry; r = ScorerRegistry(); "
             "print(sorted(m for m in ('svc_reward.verifiers.logic', 'svc_reward.verifiers.rg', 'svc_reward.verifiers.genrm', "
             "'svc_reward.verifiers.arith') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_new_kind_is_one_module_and_its_factory_runs_once_per_replica(tmp_path, monkeypatch):
    (tmp_path / "echo_kind_mod.py").write_text(textwrap.dedent("""
        from svc_reward.kinds import SCORERS, ResponseScorer
        from svc_reward.result import ScoreResult
        MADE = []

        @SCORERS.register("echo")
        def echo_kind(ctx):
            MADE.append(ctx.config.scoring_threads)
            return ResponseScorer(lambda response, spec: ScoreResult.scored(response == spec.gold))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(SCORERS._modules, "echo", "echo_kind_mod")
    try:
        registry = ScorerRegistry(RewardConfig(scoring_threads=3))
        spec = events.VerifierSpec(kind="echo:variant", gold="yes")
        assert [r.correct for r in registry.score_group("", ["yes", "no", "yes"], spec)] == [True, False, True]
        assert sys.modules["echo_kind_mod"].MADE == [3]  # one factory call for the replica
    finally:
        SCORERS._items.pop("echo", None)


def test_an_unknown_kind_is_a_judge_error_naming_the_known_ones_not_a_zero():
    [result] = ScorerRegistry().score_group("", ["5"], events.VerifierSpec(kind="nosuch:x", gold="5"))
    assert result.status is Status.JUDGE_ERROR and not result.usable and result.correct is None
    assert "unknown verifier kind 'nosuch'" in result.detail and "arith, choice, code, genrm, logic, math, rg, swe, text" in result.detail


def test_a_kind_this_replica_cannot_make_is_marked_and_its_factory_not_retried(caplog):
    registry = ScorerRegistry()  # no sandbox_address: code and swe cannot run here
    spec = events.VerifierSpec(kind="code", spec_json=json.dumps({"tests": [{"expected_stdout": "1"}]}))
    with caplog.at_level(logging.WARNING, logger="svc_reward.scorers"):
        results = [registry.score("```python\nprint(1)\n```", spec) for _ in range(3)]
    assert all(r.status is Status.JUDGE_ERROR and "sandbox_address is not set" in r.detail for r in results)
    assert sum("not available here" in m for m in caplog.messages) == 1
    genrm = registry.score_group("", ["a", "b"], events.VerifierSpec(kind="genrm"))
    assert [r.status for r in genrm] == [Status.JUDGE_ERROR] * 2 and "genrm.judge is empty" in genrm[0].detail


def test_a_group_kind_scores_through_the_registry_and_refuses_single_responses():
    registry = ScorerRegistry(RewardConfig(genrm={"judge": "length", "margin": 2}))
    spec = events.VerifierSpec(kind="genrm")
    results = registry.score_group("Tell me.", ["short", "a much longer answer</think>tiny", "the longest answer here"],
                                   spec)
    assert [r.status for r in results] == [Status.OK] * 3
    parts = [r.parts.genrm for r in results]
    assert parts[2] == max(parts) and parts[1] == -1.0  # the judge saw "tiny", the part after the reasoning
    single = registry.score("x", spec)
    assert single.status is Status.JUDGE_ERROR and "whole groups only" in single.detail
    assert registry.loaded("genrm") is registry.scorer("genrm")  # one scorer: its calibration history


def test_the_genrm_block_nests_and_the_old_flat_keys_still_load_with_a_deprecation_line(tmp_path, caplog):
    new = RewardConfig(genrm={"judge": "quality", "margin": 0.05, "length_bonus": 0.01, "bonus_after": 7,
                              "history": 160, "openai": {"model": "j"}, "calibration": {"min_records": 5}})
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump({"genrm_judge": "quality", "genrm_margin": 0.05, "genrm": {"history": 160},
                                    "genrm_openai": {"model": "j"}, "genrm_calibration": {"min_records": 5}}))
    with caplog.at_level(logging.WARNING, logger="svc_reward.config"):
        old = RewardConfig.load(["--config", str(path), "--genrm-length-bonus", "0.01"],
                                env={"M1FLOW_GENRM_BONUS_AFTER": "7"})
    assert old.genrm == new.genrm
    deprecations = [m for m in caplog.messages if "is deprecated" in m]
    assert len(deprecations) == 6 and any("'genrm_bonus_after' is deprecated, set genrm.bonus_after" in m
                                          for m in deprecations)
    assert not hasattr(old, "genrm_judge")
    both = RewardConfig(genrm={"judge": "length"}, genrm_judge="quality", genrm_checkpoint="/ckpt")
    assert (both.genrm.judge, both.genrm.checkpoint) == ("length", "/ckpt")  # the block wins a clash


def test_local_scorer_scores_through_the_path_a_rollout_takes():
    spec = events.VerifierSpec(kind="arith", gold="12")
    with LocalScorer() as scorer:
        results = scorer.score_group("What is 3*4?", ["12", "13", "twelve"], spec)
        assert [(r.reward, r.correct, r.status) for r in results] == [
            (1.0, True, Status.OK), (0.0, False, Status.OK), (0.0, False, Status.FORMAT_ERROR)]
        assert scorer.score("12", spec).correct is True


def test_a_partial_credit_reward_reaches_the_scored_group_as_it_was_given():
    from m1flow.bus import Record
    from svc_reward.groups import GroupBuffer, score_group
    from svc_reward.result import RewardParts, ScoreResult
    from tests.reward.test_groups import rollout

    registry = ScorerRegistry()
    registry.register("partial", lambda response, spec: ScoreResult(
        reward=len(response) / 8, correct=len(response) == 8, status=Status.OK,
        parts=RewardParts(correctness=len(response) / 8)))
    buffer = GroupBuffer()
    for i, text in enumerate(["abc", "abcdefgh"]):
        r = rollout("p", i, 2, text)
        r.verifier.kind = "partial"
        group, _ = buffer.add(r, Record("rollouts", 0, i, b"p", b"", 0))
    samples = score_group(group, registry).samples
    assert [(s.reward, s.parts.correctness, s.correct) for s in samples] == [(0.375, 0.375, False), (1.0, 1.0, True)]
