"""`m1flow data validate` refuses rows whose reward can be gamed: real rows (tests/fixtures/golds/,
LICENSES.md there) whose gold a wrong answer matches (m1flow.kinds.probe), or that math-verify reads
as something other than its text, each named with the answer and why; the same rows under the kind
their prompt calls for are good."""
from __future__ import annotations

from pathlib import Path

import pytest

from m1flow.kinds import Verifier
from m1flow.kinds.probe import probes
from tests.data.gold_rows import evals_row, mmlu_row, read, rg_row, write_jsonl
from tests.data.test_data_validate import validate

EVALS = read("evals.jsonl")
RG = read("rg.jsonl")


def summary(out: list[str]) -> tuple[list[str], str]:
    """validate's lines: the bad rows, and its summary line (the per-source lines after it left out)."""
    at = next(i for i, line in enumerate(out) if line.startswith("validate: "))
    return out[:at], out[at]


def test_the_real_rows_under_the_kinds_their_prompts_call_for_are_good(capsys, tmp_path):
    rows = [evals_row(item) for item in EVALS if (item["set"], item["line"]) not in {("math-derivatives", 10),
                                                                                      ("jee-math", 0)}]
    jee = next(item for item in EVALS if item["set"] == "jee-math")
    rows.append(evals_row(jee, gold=jee["sample"]["ideal"][0]))
    rows += [mmlu_row(item) for item in read("mmlu.jsonl")] + [rg_row(item, kind="text") for item in RG]
    code, out, _ = validate(capsys, write_jsonl(tmp_path / "golds.jsonl", rows))
    assert code == 0 and summary(out) == ([], f"validate: {len(rows)} rows in 1 file(s): {len(rows)} good, 0 bad, "
                                             "0 schema-checked only"), out


def test_reasoning_gym_exports_under_math_are_refused_where_a_wrong_form_scores(capsys, tmp_path):
    path = write_jsonl(tmp_path / "rg.jsonl", [rg_row(item, kind="math") for item in RG])
    code, out, _ = validate(capsys, path)
    hint = ("; the math kind compares values: where the answer's form matters (words, a factorisation, a reduced "
            "fraction, an order), use kind text")
    assert code == 1
    errors, total = summary(out)
    assert errors == [
        f"{path}:0: verifier.gold: the wrong answer '980' (the factorisation's value, not its factors) scores 1 "
        f"(980 == 2 × 2 × 5 × 7 × 7){hint}",
        f"{path}:1: verifier.gold: the wrong answer '245' (the factorisation's value, not its factors) scores 1 "
        f"(245 == 5 × 7 × 7){hint}",
        f"{path}:2: verifier.gold: the wrong answer '276/1166' (the fraction not in the lowest terms the prompt asks "
        f"for) scores 1 (\\frac{{276}}{{1166}} == \\frac{{138}}{{583}}){hint}",
        f"{path}:3: verifier.gold: the wrong answer '1768/1958' (the fraction not in the lowest terms the prompt asks "
        f"for) scores 1 (\\frac{{1768}}{{1958}} == \\frac{{884}}{{979}}){hint}",
    ], out
    # the cipher, the jumble and the sorted words are compared as text; the arithmetic is a number
    assert total == "validate: 8 rows in 1 file(s): 4 good, 4 bad, 0 schema-checked only"


def test_golds_math_verify_reads_as_something_else_are_refused(capsys, tmp_path):
    derivative = next(item for item in EVALS if (item["set"], item["line"]) == ("math-derivatives", 10))
    rows = [
        {"id": "1", "prompt": "d/dx", "verifier": {"kind": "math", "gold": "\\left(x^2 + 1\\right)^-1.5"}},
        {"id": "2", "prompt": "Decrypt.", "verifier": {"kind": "math", "gold": "TO\\ THIS\\ WORK\\ MR"}},
        evals_row(derivative),
        {"id": "4", "prompt": "Simplify.", "verifier": {"kind": "math", "gold": "\\sin^2 x + \\cos^2 x"}},
        {"id": "5", "prompt": "d/dx ln x", "verifier": {"kind": "math", "gold": ["x^-1", "f'(x)"],
                                                        "spec": {"style": "bare"}}},
        {"id": "6", "prompt": "d/dx ln x", "verifier": {"kind": "math", "gold": ["x^-1", "1/x"],
                                                        "spec": {"style": "bare"}}},
    ]
    code, out, _ = validate(capsys, path := write_jsonl(tmp_path / "misread.jsonl", rows))
    assert code == 1
    assert out[:3] == [
        f"{path}:0: verifier.gold: the gold scores 0, not 1 (JUDGE_ERROR: the gold reads as the constant 1: its "
        "letters x are lost)",
        f"{path}:1: verifier.gold: the gold scores 0, not 1 (JUDGE_ERROR: the gold reads as a product of one-letter "
        "symbols (I*h*k*m*o*o*r*r*s*t*t*w): its words are not mathematics)",
        f"{path}:2: verifier.gold: the gold scores 0, not 1 (JUDGE_ERROR: the gold reads as f(x)*g(x) + f(x)*g(x): "
        "its primes (derivatives) are lost)",
    ], out
    assert out[3].startswith(f"{path}:3: verifier.gold: the wrong answer '1' (a degenerate answer) scores 1"), out
    assert out[4].startswith(f"{path}:4: verifier.gold: the accepted answer \"f'(x)\" scores 0, not 1"), out
    assert summary(out)[1] == "validate: 6 rows in 1 file(s): 1 good, 5 bad, 0 schema-checked only", out


# ---- the probes themselves -----------------------------------------------------------------------------
def answers(kind: str, gold, prompt: str = "", **spec) -> list[str]:
    from m1flow.data.record import TaskRecord

    record = TaskRecord(id="1", source="s", prompt=prompt or "q", verifier=Verifier(kind=kind, gold=gold, spec=spec))
    return [p.answer for p in probes(record.verifier, record.instructions)]


def test_a_text_gold_is_probed_with_its_words_letters_and_numbers_reordered():
    got = answers("text", "x is congruent to 25 modulo 154")
    assert {"0", "1", "", "154 modulo 25 to congruent is x", "x is congruent to 154 modulo 25"} <= set(got)
    assert "".join(sorted("xiscongruenttomodulo")) in got  # its letters, sorted
    assert "HIKMOORRSTTW" in answers("text", "TO THIS WORK MR")


@pytest.mark.parametrize("gold, expected", [
    ("079", ["80", "78", "790"]), ("-3.00", ["-2.00", "-4.00", "-30.00"]), ("0.1111", ["1.1111", "-0.8889", "1.1110"]),
    ("3/4", ["7/4", "-1/4", "15/2"]), ("{70}", ["71", "69", "700"]),
])
def test_a_numeric_gold_is_probed_with_nearby_numbers(gold, expected):
    got = answers("math", gold)
    assert set(expected) <= set(got) and {"0", "1", ""} <= set(got), got


def test_probes_equal_to_the_gold_are_not_sent_and_order_is_probed_only_where_it_matters():
    assert "0" not in answers("math", "0.00") and "1" not in answers("math", "1") and "" in answers("math", "1")
    assert "[3, 2, 1]" in answers("math", "[1, 2, 3]") and "(b, a)" in answers("math", "(a, b)")
    assert not any("2, 1" in a for a in answers("math", "\\{1, 2\\}"))  # a set
    assert not any("2, 1" in a for a in answers("math", "1, 2"))  # roots: a bare comma list
    assert "6" in answers("math", "2 × 3") and "3 × 2" not in answers("math", "2 × 3")
    assert "2/4" in answers("math", "1/2", "Give the fraction in lowest terms.")
    assert "2/4" not in answers("math", "1/2", "What fraction of the cake is left?")


def test_a_choice_is_probed_with_the_other_letters_and_all_of_them():
    got = answers("choice", "c) Atrophy", "a) Hyperplasia\nb) Hyperophy\nc) Atrophy\nd) Dyplasia")
    assert {"A", "B", "D", "A B C D", "ABCD"} <= set(got) and "C" not in got


def test_kinds_that_compare_no_gold_are_not_probed():
    assert probes(Verifier(kind="genrm", gold="a reference")) == []
    assert probes(Verifier(kind="code", gold="print(1)", spec={"tests": [{"expected_stdout": "1"}]})) == []
