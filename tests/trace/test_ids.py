"""How ids name each other (m1flow/trace/ids.py): the rollout service's formats, and every way an id
containing '/' can be read, most specific first."""
from __future__ import annotations

from m1flow.trace.ids import Reading, group_id_for, readings, rollout_id_for


def test_group_and_rollout_ids_are_built_from_the_prompt_and_its_message():
    group = group_id_for("gsm8k/12", "0123abcdef")
    assert group == "gsm8k/12/0123abcd" and rollout_id_for(group, 3) == "gsm8k/12/0123abcd/3"


def test_an_id_is_read_as_rollout_group_and_prompt_where_its_form_allows():
    assert readings("gsm8k/12/0123abcd/3") == [Reading("rollout", "gsm8k/12", "0123abcd", 3),
                                               Reading("prompt", "gsm8k/12/0123abcd/3")]
    assert readings("gsm8k/12/0123abcd") == [Reading("group", "gsm8k/12", "0123abcd"),
                                             Reading("prompt", "gsm8k/12/0123abcd")]
    # an 8-character row id makes a prompt id look like a group id: both readings are kept
    assert [r.kind for r in readings("gsm8k/00001234")] == ["group", "prompt"]
    assert readings("arith-3-0") == [Reading("prompt", "arith-3-0")]
    assert readings("a/0123abcd/7")[0].group_id == "a/0123abcd"
    assert readings("") == []
