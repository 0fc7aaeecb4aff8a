"""Held-out sets (m1flow.heldout) and svc_eval's start-up: a set is read once and whole; one that
cannot be used (empty, a file that cannot be opened, a bad row named by file and row, a verifier kind
svc_reward cannot score) stops the stage before it serves, with one line; and what "the same prompt"
means for keeping held-out rows out of training."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from m1flow.contracts import events
from m1flow.heldout import EvalSetConfig, HeldOutError, heldout_keys, load_set, prompt_key
from ops import ROOT
from svc_eval.config import EvalConfig
from svc_eval.service import EvalService


def rows(path: Path, items: list) -> Path:
    path.write_text("".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in items))
    return path


def row(i: int, kind: str = "arith", gold: str | None = None) -> dict:
    return {"id": f"r{i}", "source": "mine", "prompt": f"{i}+{i}=",
            "verifier": {"kind": kind, **({"gold": gold if gold is not None else str(2 * i)} if kind == "arith" else {})}}


def test_a_set_is_its_first_rows_as_prompts_of_its_group_size(tmp_path):
    path = rows(tmp_path / "sums.jsonl", [row(i) for i in range(6)])
    prompts = load_set(EvalSetConfig(path=str(path), prompts=4, samples=3))
    assert [p.prompt_id for p in prompts] == [f"mine/r{i}" for i in range(4)]
    assert all(p.group_size == 3 and p.verifier.kind == "arith" for p in prompts)
    generated = load_set(EvalSetConfig(generator="arith", seed=5, prompts=3))
    assert [p.prompt_id for p in generated] == ["arith/5-0", "arith/5-1", "arith/5-2"]
    again = load_set(EvalSetConfig(generator="arith", seed=5, prompts=3))
    assert [(p.text, p.verifier.gold) for p in again] == [(p.text, p.verifier.gold) for p in generated]


@pytest.mark.parametrize("content, prompts, message", [
    ([], 1, r"eval set 'bad': .*bad\.jsonl is empty: no prompt to evaluate"),
    ([row(0), "{broken"], 2, r"eval set 'bad': .*bad\.jsonl:1: "),
    ([row(0), row(1, gold="")], 2, r"eval set 'bad': .*bad\.jsonl:1: verifier"),
    ([row(0), row(1, kind="nope")], 2, r"bad\.jsonl:1: verifier\.kind: unknown verifier kind 'nope'"),
    ([row(0), row(1)], 3, r"eval set 'bad': asks for 3 prompts, .*bad\.jsonl has 2 rows"),
])
def test_a_set_that_cannot_be_used_is_refused_with_one_line(tmp_path, content, prompts, message):
    path = rows(tmp_path / "bad.jsonl", content)
    with pytest.raises(HeldOutError, match=message) as err:
        load_set(EvalSetConfig(path=str(path), prompts=prompts))
    assert "\n" not in str(err.value)


def test_a_missing_file_or_generator_is_refused(tmp_path):
    with pytest.raises(HeldOutError, match=r"gone\.jsonl cannot be opened: TableError"):
        load_set(EvalSetConfig(path=str(tmp_path / "gone.jsonl"), prompts=1))
    with pytest.raises(HeldOutError, match=r"generator:nope cannot be opened: ValueError: unknown generator 'nope'"):
        load_set(EvalSetConfig(generator="nope", prompts=1))


def test_set_settings_are_checked_when_they_load():
    with pytest.raises(ValidationError, match=r"pass@8 needs at least 8 samples per prompt, it draws 4"):
        EvalSetConfig(generator="arith", samples=4, k=[1, 8])
    assert EvalSetConfig(generator="arith", samples=4, k=[4, 1, 4]).k == [1, 4]
    with pytest.raises(ValidationError, match=r"names must be unique, \['arith'\] repeated"):
        EvalConfig(eval_sets=[{"generator": "arith"}, {"generator": "arith", "seed": 2}])


def test_the_same_prompt_is_the_same_conversation():
    text = events.Prompt(text="12 + 7 =")
    assert prompt_key(text) == prompt_key(events.Prompt(text=" 12  +\n7 = "))  # whitespace runs
    assert prompt_key(text) == prompt_key(events.Prompt(messages=[events.ChatMessage(role="user", content="12 + 7 =")]))
    system = events.Prompt(messages=[events.ChatMessage(role="system", content="Be brief."),
                                     events.ChatMessage(role="user", content="12 + 7 =")], text="12 + 7 =")
    assert prompt_key(system) != prompt_key(text)  # another conversation: another prompt
    assert prompt_key(events.Prompt(text="12 + 8 =")) != prompt_key(text)
    sets = [EvalSetConfig(generator="arith", seed=9, prompts=5)]
    assert heldout_keys(sets) == {prompt_key(p) for p in load_set(sets[0])}


def test_the_stage_refuses_a_kind_it_cannot_score_before_it_serves(tmp_path):
    path = rows(tmp_path / "code.jsonl", [{"id": "c0", "source": "c", "prompt": "print 1",
                                           "verifier": {"kind": "code", "spec": {"tests": [{"stdin": "", "expected_stdout": "1"}]}}}])
    with pytest.raises(HeldOutError, match=r"eval set 'code': verifier kind 'code' cannot be scored: .*sandbox_address"):
        EvalService(EvalConfig(eval_sets=[{"path": str(path), "prompts": 1}], run_dir=tmp_path))
    with pytest.raises(HeldOutError, match=r"no `eval_sets` configured"):
        EvalService(EvalConfig(run_dir=tmp_path))


def test_the_process_stops_with_one_line_naming_file_and_row(tmp_path):
    path = rows(tmp_path / "held.jsonl", [row(0), row(1), "{broken"])
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"sources": [{"generator": "arith"}],  # the run's file: svc_source's keys too
                                  "eval_sets": [{"path": str(path), "name": "held", "prompts": 3}]}))
    out = subprocess.run([sys.executable, "-m", "svc_eval", "--config", str(config), "--run-dir", str(tmp_path),
                          "--bootstrap", "127.0.0.1:1"], cwd=ROOT, capture_output=True, text=True, timeout=180,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("eval set 'held': ") and "held.jsonl:2: " in last, out.stderr[-2000:]
