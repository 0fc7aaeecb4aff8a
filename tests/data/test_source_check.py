"""The check `m1flow up` runs on its sources before it starts anything (m1flow.source_check, through
ops.sources_file): each source opened and its first rows read as svc_source reads them, each held-out
set loaded as svc_eval loads it, and every problem one line naming the setting, the source and why."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from m1flow.source_check import SourceCheckError, check_settings
from ops.sources_file import SourcesFileError, check_sources, effective_settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data"
GOOD = str(FIXTURES / "mixed.jsonl")


def refused(settings: dict) -> str:
    with pytest.raises(SourceCheckError) as caught:
        check_settings(settings)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_good_files_and_generators_pass_and_a_few_bad_rows_are_left_to_the_source():
    assert check_settings({"sources": [{"path": GOOD}, {"generator": "arith", "size": 4}],
                           "eval_sets": [{"generator": "arith", "name": "held", "prompts": 2}]}) == ["mixed", "arith"]
    # one bad row among the first: svc_source dead-letters it and goes on, so the check does too
    assert check_settings({"sources": {"path": str(FIXTURES / "missing_gold.jsonl")}}) == ["missing_gold"]


def test_a_source_that_cannot_be_opened_is_named_with_the_reason(tmp_path):
    message = refused({"sources": [{"path": GOOD}, {"path": str(tmp_path / "nope.jsonl")}]})
    assert message.startswith(f"sources[1] ({tmp_path / 'nope.jsonl'}) cannot be opened: ") and "no such file" in message
    assert "unknown generator 'nosuch'" in refused({"sources": [{"generator": "nosuch"}]})
    assert refused({"sources": [{"path": str(FIXTURES / "truncated.parquet")}]}).startswith("sources[0] (")


def test_a_source_none_of_whose_first_rows_is_usable_or_with_no_rows_is_refused(tmp_path):
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"question": "1+1?"}\n{"question": "2+2?"}\n')
    message = refused({"sources": [{"path": str(junk)}]})
    assert message.startswith(f"sources[0] ({junk}): none of its first 2 rows can become a prompt; the first: {junk}:0:")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert refused({"sources": [{"path": str(empty)}]}) == f"sources[0] ({empty}) has no rows: nothing to publish"


def test_bad_settings_name_the_entry_and_field():
    assert refused({"sources": [{"path": GOOD, "weight": -1}]}).startswith("sources[0]: weight: ")
    assert "exactly one of path and generator" in refused({"sources": [{"path": GOOD, "generator": "arith"}]})
    assert refused({"sources": "data.jsonl"}) == "sources: a list of datasets or generators, got str"
    assert refused({"sources": [{"path": GOOD}, {"path": GOOD}]}).startswith("sources: names must be unique")
    assert refused({"sources": [{"path": GOOD}], "group_size": 0}).startswith("group_size: ")


def test_a_held_out_set_that_cannot_be_loaded_is_named(tmp_path):
    message = refused({"sources": [{"path": GOOD}], "eval_sets": [{"path": str(tmp_path / "held.jsonl")}]})
    assert message.startswith("eval_sets[0]: eval set 'held': ") and "cannot be opened" in message
    assert "asks for 64 prompts" in refused({"eval_sets": [{"path": GOOD}]})  # the fixture has 7 rows


def test_up_checks_the_file_with_the_environment_over_it_and_names_the_file_as_given(tmp_path):
    conf = tmp_path / "sources.json"
    conf.write_text(json.dumps({"sources": [{"path": GOOD}], "group_size": 4}))
    assert check_sources(conf, env={}) == ["mixed"]
    env = {"M1FLOW_SOURCES": json.dumps([{"path": str(tmp_path / "other.jsonl")}]), "M1FLOW_GROUP_SIZE": "2"}
    assert effective_settings(conf, env)["group_size"] == 2
    with pytest.raises(SourcesFileError, match=r"^--sources run\.yaml: sources\[0\] \(.*other\.jsonl\) cannot be opened"):
        check_sources(conf, env=env, named="run.yaml")
    with pytest.raises(SourcesFileError, match=r"^M1FLOW_SOURCES: sources\[0\]"):
        check_sources(None, env=env)
