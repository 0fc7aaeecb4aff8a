"""reasoning-gym as the verifier kind rg:<task>: a record's gold scores 1.0 after the whole path
(record -> Prompt -> framed bytes -> spec -> svc_reward), partial credit survives, bad specs are
judge errors and unknown tasks clear errors. The sweep over all 105 families is scripts/rg_gold.py
(about 4 minutes); here a sample of diverse families."""
from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("reasoning_gym")

from m1flow.bus import codec  # noqa: E402
from m1flow.contracts import events  # noqa: E402
from m1flow.data.generators import rg_record  # noqa: E402
from m1flow.tasks import rg  # noqa: E402
from svc_reward.result import Status  # noqa: E402
from svc_reward.scorers import ScorerRegistry  # noqa: E402

# Arithmetic, algebra, strings, graphs, games, grids, logic, cognition, induction; two without a
# gold answer (graph_color and propositional_logic validate from metadata; their example answer is
# the reference); acre and gsm_symbolic are size-bound; time_intervals has non-JSON defaults.
FAMILIES = ["leg_counting", "basic_arithmetic", "simple_equations", "spell_backward", "caesar_cipher",
            "graph_color", "shortest_path", "mini_sudoku", "maze", "propositional_logic", "knights_knaves",
            "syllogism", "number_sequence", "arc_1d", "acre", "gsm_symbolic", "time_intervals", "countdown"]


def wire(record, group_size: int = 2) -> events.Prompt:
    return codec.decode(codec.encode(record.to_prompt(group_size)), events.Prompt)


@pytest.fixture(scope="module")
def registry():
    return ScorerRegistry()


@pytest.mark.parametrize("task", FAMILIES)
def test_gold_scores_one_after_the_whole_path(task, registry):
    from reasoning_gym.factory import has_curriculum

    level = 2 if has_curriculum(task) else None
    for index in (0, 7):
        record = rg_record(task, seed=3, index=index, level=level)
        assert record == rg_record(task, seed=3, index=index, level=level), "records are deterministic"
        assert record.verifier.kind == f"rg:{task}" and record.source == f"rg:{task}"
        assert set(record.verifier.spec) == {"task", "config", "seed", "index", "fingerprint"}
        assert record.verifier.gold, "every sampled family has a reference answer"
        prompt = wire(record)
        assert prompt.source == f"rg:{task}" and "<answer>" in prompt.text
        good = registry.score(f"<think>hmm</think>\n<answer>{record.verifier.gold}</answer>", prompt.verifier)
        assert (good.status, good.reward, good.correct) == (Status.OK, 1.0, True), good
        bad = registry.score("<think>hmm</think>\n<answer>certainly not this</answer>", prompt.verifier)
        assert bad.status is Status.OK and bad.reward < 1.0 and bad.correct is False, bad


def test_level_changes_the_config_and_the_item():
    easy, hard = (rg_record("basic_arithmetic", 0, 0, level=level) for level in (1, 4))
    assert easy.verifier.spec["config"] != hard.verifier.spec["config"]
    assert easy.prompt != hard.prompt and (easy.difficulty, hard.difficulty) == (1.0, 4.0)
    assert rg_record("basic_arithmetic", 0, 0).verifier.spec["config"] == {}


def test_partial_credit_is_kept(registry):
    record = rg_record("spell_backward", 0, 0)
    gold = record.verifier.gold
    result = registry.score(f"<answer>{gold[:-1]}</answer>", wire(record).verifier)
    assert result.status is Status.OK and 0.0 < result.reward < 1.0 and result.correct is False
    assert result.parts.correctness == result.reward
    from svc_reward.groups import verdict_fields

    sample = events.ScoredSample(**verdict_fields(result))
    assert sample.reward == pytest.approx(result.reward) and sample.HasField("correct") and not sample.correct


def test_no_answer_tag_is_a_format_error(registry):
    spec = wire(rg_record("leg_counting", 0, 0)).verifier
    for response in ("292", "<think><answer>292</answer></think>", ""):
        result = registry.score(response, spec)
        assert result.status is Status.FORMAT_ERROR and result.reward == 0.0 and result.usable


def _spec(**changes) -> events.VerifierSpec:
    data = {"task": "leg_counting", "config": {}, "seed": 0, "index": 0, **changes}
    return events.VerifierSpec(kind=f"rg:{data['task']}", spec_json=json.dumps(data))


@pytest.mark.parametrize("spec", [
    _spec(task="leg_countin"),                       # no such task
    _spec(config={"min_animals": 5, "max_animals": 2}),  # the task's own validation refuses it
    _spec(config={"no_such_field": 1}),
    _spec(index=-1),
    events.VerifierSpec(kind="rg:leg_counting", spec_json="{not json"),
    events.VerifierSpec(kind="rg:spell_backward", spec_json=json.dumps({"task": "leg_counting", "seed": 0, "index": 0})),
    _spec(fingerprint="0" * 16),                     # not the item the prompt showed
])
def test_specs_that_cannot_be_regenerated_are_judge_errors(spec, registry):
    result = registry.score("<answer>12</answer>", spec)
    assert result.status is Status.JUDGE_ERROR and not result.usable, result


def test_unknown_task_is_a_clear_error_naming_close_matches():
    with pytest.raises(ValueError, match="did you mean leg_counting"):
        rg_record("leg_countng", 0, 0)
    with pytest.raises(ValueError, match="composite"):
        rg_record("composite", 0, 0)
    with pytest.raises(ValueError, match="no curriculum"):
        rg_record("gsm_symbolic", 0, 0, level=2)
    with pytest.raises(ValueError, match="do not exist"):
        rg_record("leg_counting", 0, 0, config={"animals": 3})
    with pytest.raises(ValueError, match="size"):
        rg_record("acre", 0, 10, config={"size": 5})
    assert len(rg.task_names()) == 105 and "composite" not in rg.task_names()


def test_regeneration_does_not_cost_the_index(registry):
    """Item 90 000 scores as fast as item 0: the dataset is cached, items are indexed, not iterated."""
    spec = wire(rg_record("leg_counting", 5, 90_000)).verifier
    gold = json.loads(spec.spec_json)
    assert gold["index"] == 90_000
    began = time.perf_counter()
    for _ in range(50):
        assert registry.score(f"<answer>{spec.gold}</answer>", spec).reward == 1.0
    assert (time.perf_counter() - began) / 50 < 0.05
