"""The logic families as library task records: deterministic in (seed, index, level), carried whole in
the spec, and the record's gold passes the family's check after the trip through a framed Prompt."""
from __future__ import annotations

import json

import pytest

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.data.generators import logic_record
from m1flow.tasks import logic
from svc_reward.scorers import ScorerRegistry


@pytest.mark.parametrize("family", logic.task_names())
def test_record_gold_scores_after_the_wire(family):
    registry = ScorerRegistry()
    for index in range(3):
        record = logic_record(family, seed=4, index=index, level=2)
        assert record == logic_record(family, seed=4, index=index, level=2)
        assert record.verifier.kind == f"logic:{family}" and record.source == f"logic:{family}"
        assert logic.TASKS[family].check(record.verifier.spec["metadata"], record.verifier.gold) is None
        prompt = codec.decode(codec.encode(record.to_prompt(group_size=4)), events.Prompt)
        assert prompt.text == record.prompt and prompt.verifier.kind == f"logic:{family}"
        result = registry.score(f"<think>...</think><answer>{record.verifier.gold}</answer>", prompt.verifier)
        assert result.reward == 1.0 and result.correct, result


def test_index_gives_distinct_puzzles_and_level_clamps():
    specs = {json.dumps(logic_record("sudoku", 0, i).verifier.spec["metadata"]) for i in range(8)}
    assert len(specs) == 8
    assert logic_record("sudoku", 0, 0, level=9).difficulty == float(logic.TASKS["sudoku"].max_level)
    assert logic_record("sudoku", 0, 0).difficulty == 1.0


def test_unknown_family_names_close_matches():
    with pytest.raises(ValueError, match="did you mean sudoku"):
        logic_record("sudokku", 0, 0)
