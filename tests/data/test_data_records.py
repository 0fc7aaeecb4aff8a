"""The task record, the schema per verifier kind, the importers and the generator sources."""
from __future__ import annotations

import json

import pytest

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.data import DatasetConfig, RowError, SpecError, TaskRecord, Verifier, open_source
from m1flow.data.importers import IMPORTERS, ImportContext, import_row
from m1flow.kinds import KINDS

CTX = ImportContext(source="set", path="f.jsonl")


def rec(kind: str, gold: str = "", spec: dict | None = None, **extra) -> TaskRecord:
    return TaskRecord(id="1", source="s", prompt="q", verifier=Verifier(kind=kind, gold=gold, spec=spec or {}),
                      **extra)


def test_to_prompt_carries_source_domain_messages_and_sorted_spec():
    record = TaskRecord(id="7", source="gsm8k", domain="general", verifier=Verifier(
        kind="math", gold="72", spec={"style": "gsm8k", "a": 1}), prompt=[
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"}, {"role": "user", "content": "what is 8*9?"}])
    prompt = codec.decode(codec.encode(record.to_prompt(group_size=4, run_id="r")), events.Prompt)
    assert prompt.prompt_id == "gsm8k/7" and prompt.task_type == "math" and prompt.group_size == 4
    assert prompt.text == "what is 8*9?" and [m.role for m in prompt.messages] == ["system", "user", "assistant", "user"]
    assert prompt.source == "gsm8k" and prompt.domain == "general" and prompt.header.trace.run_id == "r"
    assert prompt.verifier.spec_json == json.dumps({"a": 1, "style": "gsm8k"}, sort_keys=True)
    assert rec("logic:sudoku", spec=_puzzle()).to_prompt(1, prompt_id="x").task_type == "logic"


def _puzzle(task: str = "sudoku") -> dict:
    return {"task": task, "seed": 1, "difficulty": 1, "question": "q", "solution": "s", "metadata": {}}


@pytest.mark.parametrize("kind,gold,spec,field,why", [
    ("math", "", {}, "verifier.gold", "missing"),
    ("arith", "x", {}, "verifier.gold", "pattern"),
    ("math", "1", {"style": "latex"}, "verifier.spec.style", "boxed"),
    ("spelling", "a", {}, "verifier.kind", "unknown verifier kind 'spelling'"),
    ("logic", "", {}, "verifier.kind", "logic:<family>"),
    ("logic:sudoku", "", {"task": "sudoku"}, "verifier.spec.seed", "required"),
    ("logic:sudoku", "", _puzzle("dyck"), "verifier.spec.task", "not the kind's family"),
    ("code", "", {"tests": []}, "verifier.spec.tests", "at least 1"),
    ("code", "", {"tests": [{"stdin": "1"}]}, "verifier.spec.tests[0].expected_stdout", "required"),
    ("code", "", {"style": "function", "test": "def check(f): pass"}, "verifier.spec.entry_point", "required"),
    ("swe", "", {"fail_to_pass": []}, "verifier.spec.fail_to_pass", "at least 1"),
    ("swe", "", {"fail_to_pass": ["t::a"]}, "verifier.payload_uri", "snapshot"),
    ("rg:leg_countin", "", {"task": "leg_countin", "seed": 1, "index": 0}, "verifier.spec.task", "leg_counting"),
    ("rg:leg_counting", "", {"task": "leg_counting", "seed": 1, "index": -1}, "verifier.spec.index", "greater"),
])
def test_each_kind_schema_names_the_bad_field(kind, gold, spec, field, why):
    with pytest.raises(SpecError) as err:
        rec(kind, gold, spec)
    assert err.value.field == field and why in err.value.why


def test_good_records_of_every_kind():
    assert set(KINDS.names()) == {"arith", "math", "text", "choice", "logic", "code", "swe", "genrm", "rg"}
    rec("arith", "-3")
    rec("text", "x is congruent to 25 modulo 154", {"style": "bare"})
    rec("choice", "B", {"options": ["60", "90"]})
    rec("math", "\\frac{1}{2}", {"style": "boxed"})
    rec("logic:sudoku", spec=_puzzle())
    rec("code", "print(1)", {"tests": [{"expected_stdout": "1"}]})
    rec("code", "", {"style": "function", "test": "def check(f): assert f()", "entry_point": "f"})
    TaskRecord(id="1", source="s", prompt="q", verifier=Verifier(kind="swe", spec={"fail_to_pass": ["t::a"]},
                                                                 payload_uri="file:///store/ab"))
    rec("genrm")
    rec("rg:leg_counting", spec={"task": "leg_counting", "seed": 1, "index": 3, "config": {}})


def test_m1flow_importer_reads_flattened_csv_cells_and_names_bad_fields():
    row = {"id": "", "prompt": "2+2=", "verifier.kind": "arith", "verifier.gold": "4", "verifier.spec": "",
           "difficulty": "", "license": ""}
    record = import_row(IMPORTERS.get("m1flow"), row, 5, CTX)
    assert isinstance(record, TaskRecord) and record.id == "5" and record.source == "set"
    bad = import_row(IMPORTERS.get("m1flow"), {"id": 1, "prompt": [{"role": "bot", "content": "x"}],
                                                "verifier": {"kind": "arith", "gold": "1"}}, 3, CTX)
    assert isinstance(bad, RowError) and str(bad) == "f.jsonl:3: prompt[0].role: Input should be 'system', " \
                                                     "'user' or 'assistant'"
    bad = import_row(IMPORTERS.get("m1flow"), {"id": 1, "prompt": "q", "verifier": '{"kind": "math"'}, 0, CTX)
    assert isinstance(bad, RowError) and bad.field == "verifier" and "JSON" in bad.why
    assert import_row(IMPORTERS.get("m1flow"), {"id": 1, "prompt": "q"}, 0, CTX).field == "verifier"


def verl(source="openai/gsm8k", truth="72", **extra):
    return {"data_source": source, "prompt": [{"role": "user", "content": "q"}], "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": truth}, "extra_info": {"split": "train", "index": 4},
            **extra}


def test_verl_importer_maps_data_source_to_kind_and_style():
    auto = IMPORTERS.get("auto")
    record = import_row(auto, verl(), 0, CTX)
    assert record.verifier.kind == "math" and record.verifier.gold == "72" and record.id == "train-4"
    assert record.verifier.spec == {"style": "gsm8k"} and record.source == "set" and record.domain == "reasoning"
    assert import_row(auto, verl(truth="so 1,234 apples\n#### 1,234"), 0, CTX).verifier.gold == "1234"
    assert import_row(auto, verl("aime_2024", 17), 0, CTX).verifier.spec == {"style": "math_dapo"}
    assert import_row(auto, verl("HuggingFaceH4/MATH-500", "\\frac12"), 0, CTX).verifier.spec == {"style": "boxed"}
    code = import_row(auto, verl("apps", json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}), ability="code"), 0, CTX)
    assert code.verifier.kind == "code" and code.verifier.spec["tests"] == [{"stdin": "1 2\n", "expected_stdout": "3\n"}]
    judged = import_row(auto, {**verl("chat/x"), "ability": "chat", "reward_model": {"style": "model"}}, 0, CTX)
    assert judged.verifier.kind == "genrm" and judged.domain == "general"
    unknown = import_row(auto, {**verl("my/set"), "ability": "puzzles"}, 9, CTX)
    assert isinstance(unknown, RowError) and unknown.field == "data_source" and "kinds" in unknown.why
    mapped = import_row(auto, {**verl("my/set"), "ability": "puzzles"}, 9,
                        ImportContext(source="set", kinds={"my/set": "math"}))
    assert mapped.verifier.kind == "math" and mapped.verifier.spec == {"style": "auto"}
    missing = import_row(auto, verl(truth=""), 2, CTX)
    assert isinstance(missing, RowError) and missing.field == "reward_model.ground_truth"
    flat = {"data_source": "openai/gsm8k", "prompt": "q", "reward_model.ground_truth": "5", "reward_model.style": "rule"}
    assert import_row(auto, flat, 0, CTX).verifier.gold == "5"


def test_arith_generator_is_a_pure_function_of_seed_and_index():
    cfg = DatasetConfig(generator="arith", size=50, seed=4, level=2)
    source = open_source(cfg)
    whole = [r for _, r in source.records()]
    assert len(source) == 50 and [r for _, r in source.records(30, 33)] == whole[30:33]
    assert [r for _, r in open_source(cfg).records(0, 5)] == whole[:5]
    assert all(isinstance(r, TaskRecord) and r.source == "arith" for r in whole)
    assert max(int(x) for r in whole for x in r.prompt.rstrip("=").replace("-", "+").split("+")) > 99
    assert [r.id for _, r in open_source(DatasetConfig(generator="arith", size=3, name="warm")).records()] == \
        ["0-0", "0-1", "0-2"]
    with pytest.raises(ValueError, match="unknown generator 'nope'"):
        open_source(DatasetConfig(generator="nope"))
    with pytest.raises(ValueError, match="leg_counting"):
        open_source(DatasetConfig(generator="rg:leg_countin"))


def test_logic_generator_source():
    records = [r for _, r in open_source(DatasetConfig(generator="logic:sudoku", size=3, seed=1)).records()]
    assert all(isinstance(r, TaskRecord) and r.verifier.kind == "logic:sudoku" for r in records)


def test_rg_generator_source():
    records = [r for _, r in open_source(DatasetConfig(generator="rg:leg_counting", size=3, seed=1)).records()]
    assert all(isinstance(r, TaskRecord) and r.verifier.kind == "rg:leg_counting" for r in records)
