"""One home per verifier kind: every kind the library declares (m1flow/kinds/) has each of its parts
(schema, gold writer, answer style) and a scorer in svc_reward under the same name; a kind that
lacks one is named with the part. The math answer styles are declared once and read by the schema,
the gold writer, the fast path and svc_reward's extraction alike."""
from __future__ import annotations

import importlib

import pytest

from m1flow.data.fastpath import FAST
from m1flow.kinds import KINDS, Kind, KindSchema, Style, Verifier, gold_answer, kind_of, missing_parts
from m1flow.kinds.check import check_verifier
from m1flow.kinds.math import MathSpec, STYLE_NAMES
from svc_reward.kinds import SCORERS, scorer_module
from svc_reward.verifiers.extract import EXTRACTORS


@pytest.mark.parametrize("name", KINDS.names())
def test_every_declared_kind_has_all_its_parts_and_a_scorer_of_its_name(name):
    kind = KINDS.get(name)
    assert kind.name == name
    assert missing_parts(kind, SCORERS.names()) == [], f"kind {name!r} lacks {missing_parts(kind, SCORERS.names())}"
    assert issubclass(kind.schema, KindSchema) and callable(kind.gold)
    module = importlib.import_module(scorer_module(name))  # the module registers the factory of its name
    assert SCORERS.get(name) is not None, module


def test_every_scorer_is_of_a_declared_kind():
    assert set(SCORERS.names()) == set(KINDS.names())


def test_a_kind_lacking_a_part_is_named_with_the_part():
    bare = Kind(name="bare")
    assert missing_parts(bare) == ["schema", "gold writer", "answer style"]
    assert missing_parts(bare, scorers=("arith",)) == ["schema", "gold writer", "answer style", "scorer"]
    half = Kind(name="half", schema=KindSchema, styles=(Style("plain", reads="the text"),))
    assert missing_parts(half, scorers=("half",)) == ["gold writer"]


def test_kind_of_is_the_name_before_the_colon():
    assert [kind_of(k) for k in ("logic:sudoku", "rg:leg_counting", "math", "")] == ["logic", "rg", "math", ""]
    assert Verifier(kind="logic:sudoku").family == "logic"


def test_the_math_styles_are_declared_once_and_read_everywhere():
    assert STYLE_NAMES == ("auto", "boxed", "math_dapo", "gsm8k", "bare")
    assert tuple(EXTRACTORS) == STYLE_NAMES  # svc_reward extracts exactly the declared styles
    assert set(MathSpec.model_fields["style"].annotation.__args__) == set(STYLE_NAMES)  # the schema accepts them
    for style in STYLE_NAMES:
        assert FAST["math"]("1", {"style": style})  # the fast path accepts them
        check_verifier(Verifier(kind="math", gold="1", spec={"style": style}))
    assert not FAST["math"]("1", {"style": "latex"})
    writes = {s: gold_answer(Verifier(kind="math", gold="7", spec={"style": s})) for s in STYLE_NAMES}
    assert writes == {"auto": "The answer is $\\boxed{7}$.", "boxed": "The answer is $\\boxed{7}$.",
                      "math_dapo": "Answer: 7", "gsm8k": "#### 7", "bare": "7"}


def test_only_kinds_with_a_fast_check_take_the_fast_path():
    assert sorted(FAST) == sorted(name for name in KINDS.names() if KINDS.get(name).fast is not None)
    assert sorted(FAST) == ["arith", "genrm", "math"]
