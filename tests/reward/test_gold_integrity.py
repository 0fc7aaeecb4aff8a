"""Rewards that cannot be gamed on real golds (issue 38): rows of OpenAI's evals wheel, reasoning-gym
exports and MMLU (tests/fixtures/golds/, LICENSES.md there) through the record -> Prompt -> svc_reward
path, each gaming answer scoring 0 and each honest answer 1.

Where a gaming answer still scores under a kind that compares values (a factorisation's value, an
unreduced fraction under `math`), `data validate` refuses the row: tests/data/test_validate_probes.py.
"""
from __future__ import annotations

import pytest

from m1flow.chat import response_text
from m1flow.contracts import events
from m1flow.data.importers import IMPORTERS, ImportContext, import_row
from m1flow.data.record import RowError, TaskRecord
from m1flow.status import Status
from svc_reward.client import LocalScorer
from svc_reward.verifiers.extract import MAX_BARE_CHARS, extract_bare
from tests.data.gold_rows import evals_row, mmlu_row, read, rg_row

EVALS = {(item["set"], item["line"]): item for item in read("evals.jsonl")}
RG = {(item["task"], item["index"]): item for item in read("rg.jsonl")}
MMLU = read("mmlu.jsonl")


@pytest.fixture(scope="module")
def scorer():
    with LocalScorer() as local:
        yield local


def record(row: dict) -> TaskRecord:
    made = import_row(IMPORTERS.get("auto"), row, 0, ImportContext(source="golds", path="golds.jsonl"))
    assert not isinstance(made, RowError), made
    return made


def scores(scorer: LocalScorer, row: dict, answers: list[str]) -> list[float]:
    """The reward of each answer, written after the reasoning, through the framed Prompt's verifier."""
    prompt = record(row).to_prompt(group_size=len(answers))
    results = scorer.score_group(prompt.text, [response_text(a, "Let me think.") for a in answers], prompt.verifier)
    assert all(r.status in (Status.OK, Status.FORMAT_ERROR) for r in results), [r.detail for r in results]
    return [r.reward for r in results]


def check(scorer: LocalScorer, row: dict, honest: list[str], gaming: list[str]) -> None:
    got = scores(scorer, row, honest + gaming)
    assert got == [1.0] * len(honest) + [0.0] * len(gaming), dict(zip(honest + gaming, got))


# ---- math-verify's misreadings of the issue -------------------------------------------------------
def test_a_derivative_gold_in_programming_notation_no_longer_reads_as_1(scorer):
    row = evals_row(EVALS["math-derivatives", 2])  # ['(x^2 + 1)^-1.5', '(x^2 + 1)^-(3/2)', ...], bare style
    assert row["verifier"]["gold"][0] == "(x^2 + 1)^-1.5"
    check(scorer, row, honest=["{(x^2 + 1)^-1.5}", "1/(x^2 + 1)^(3/2)", "$\\frac{1}{(x^2+1)^{3/2}}$",
                               "(1+x^2)^{-3/2}"],
          gaming=["Answer: 1", "1", "0", "{(x^2 + 1)^-0.5}", "(x^2 + 1)^1.5"])


@pytest.mark.parametrize("line, honest, gaming", [
    (0, ["{cos(x)}", "\\cos x", "\\cos(x)"], ["{sin(x)}", "-\\sin x", "1"]),
    (1, ["{4*x^3*sin(x) + x^4*cos(x)}", "4x^{3}\\sin(x) + x^{4}\\cos(x)", "x^3(4\\sin x + x\\cos x)"],
     ["4x^{3}\\sin(x)", "x^4\\cos(x)", "4x^{3}\\cos(x) + x^{4}\\sin(x)"]),
    (5, ["{x^-1}", "\\frac{1}{x}", "1/x", "x^{-1}"], ["x", "-\\frac{1}{x^2}", "1"]),
    (6, ["{0.5*x^-0.5}", "\\frac{1}{2\\sqrt{x}}", "1/(2*sqrt(x))"], ["\\sqrt{x}", "\\frac{1}{\\sqrt{x}}", "0.5"]),
    (21, ["2e^{x}(\\cos x - \\sin x)", "{2*e^x*cos(x) - 2*e^x*sin(x)}"], ["2e^{x}(\\cos x + \\sin x)", "2e^x\\cos x"]),
])
def test_programming_notation_golds_accept_the_same_answer_in_latex(scorer, line, honest, gaming):
    check(scorer, evals_row(EVALS["math-derivatives", line]), honest, gaming)


@pytest.mark.parametrize("gold, latex", [("x^-1", "\\frac{1}{x}"), ("4*x^3*sin(x)", "4x^{3}\\sin(x)")])
def test_the_issues_two_programming_golds_accept_latex(scorer, gold, latex):
    row = {"id": "1", "prompt": "Differentiate.", "verifier": {"kind": "math", "gold": gold}}
    check(scorer, row, honest=[f"\\boxed{{{latex}}}", f"\\boxed{{{gold}}}"], gaming=["\\boxed{1}", "\\boxed{x}"])


@pytest.mark.parametrize("kind", ["math", "text"])
def test_a_chinese_remainder_gold_of_words_is_text_so_swapped_numbers_do_not_score(scorer, kind):
    row = evals_row(EVALS["chinese-remainder-theorem", 0], kind=kind, style="auto")  # 'x is congruent to 25 modulo 154'
    check(scorer, row,
          honest=["Final answer: x is congruent to 25 modulo 154", "Final answer: X is congruent to 25 modulo 154.",
                  "The answer is $\\boxed{x \\text{ is congruent to } 25 \\text{ modulo } 154}$"],
          gaming=["Final answer: x is congruent to 154 modulo 25", "Final answer: 154 modulo 25 to congruent is x",
                  "Final answer: x is congruent to 25 modulo 155", "Final answer: 1", "Final answer: 0"])


@pytest.mark.parametrize("kind", ["math", "text"])
def test_words_and_their_anagram_are_different_answers(scorer, kind):
    issue = {"id": "1", "prompt": "Decrypt.", "verifier": {"kind": kind, "gold": "TO THIS WORK MR",
                                                           "spec": {"style": "bare"}}}
    check(scorer, issue, honest=["TO THIS WORK MR", "to this work mr"], gaming=["HIKMOORRSTTW", "MR WORK THIS TO"])
    caesar = rg_row(RG["caesar_cipher", 0], kind=kind)  # 'THOSE FROM MARS OF ANY INDEED'
    check(scorer, caesar, honest=["THOSE FROM MARS OF ANY INDEED", "Those from Mars of any indeed."],
          gaming=["ADDEEEFHIMNNOOORRSSTY", "INDEED ANY OF MARS FROM THOSE", "THOSE FROM MARS"])


def test_reasoning_gym_exports_under_the_text_kind_accept_nothing_reasoning_gym_refuses(scorer):
    """reasoning-gym's own score_answer is the oracle: what it does not give 1.0 scores 0 here
    (case_sensitive, as its ciphers are). The other way round, `text` is stricter in one place: a
    factorisation with its factors in another order (reasoning-gym: 1.0, text: 0)."""
    pytest.importorskip("reasoning_gym")
    from m1flow.tasks import rg
    for item in RG.values():
        gold = item["answer"]
        candidates = [gold, gold.lower(), gold.upper(), " ".join(reversed(gold.split())), "".join(sorted(gold)),
                      ", ".join(reversed(gold.split(", "))), "0", "1", gold.replace(" ", "")]
        row = rg_row(item, kind="text")
        row["verifier"]["spec"]["case_sensitive"] = True
        ours = scores(scorer, row, candidates)
        entry = rg.entry(item["task"], {}, item["seed"], item["index"])
        theirs = [rg.score_answer(item["task"], {}, item["seed"], entry, a) for a in candidates]
        assert ours[0] == 1.0 and theirs[0] == 1.0, item
        assert all(t == 1.0 for o, t in zip(ours, theirs) if o == 1.0), (item["task"], candidates, ours, theirs)


def test_reasoning_gym_exports_under_the_text_kind_refuse_the_issues_wrong_forms(scorer):
    check(scorer, rg_row(RG["prime_factorization", 1], kind="text"),  # '2 × 2 × 5 × 7 × 7' (980)
          honest=["2 × 2 × 5 × 7 × 7", "2×2×5×7×7"], gaming=["980", "333", "2 × 2 × 5 × 7", "4 × 5 × 49"])
    check(scorer, rg_row(RG["fraction_simplification", 0], kind="text"),  # '138/583' (lowest terms asked)
          honest=["138/583", "$138/583$"], gaming=["276/1166", "13524/57134", "583/138", "0"])
    words = RG["word_sorting", 0]["answer"]
    check(scorer, rg_row(RG["word_sorting", 0], kind="text"), honest=[words],
          gaming=[", ".join(reversed(words.split(", ")))])


# ---- bare answers, as the sets ask for them -------------------------------------------------------
@pytest.mark.parametrize("key, honest, gaming", [
    (("aime_evaluation", 1), ["079", "79", "Answer: 079"], ["080", "78", "790", "0", "1", "7 9"]),
    (("determinant", 100), ["-55.00", "-55", "$-55.00$"], ["-54.00", "-56.00", "-550.00", "55.00", "0"]),
    (("probabilities-word-problems", 0), ["{70}", "70", "The answer is {70}"], ["{71}", "{7}", "{700}", "{0}"]),
    (("probability_questions", 0), ["0.1111", "Answer: 0.1111"], ["0.1112", "1.1111", "1.111", "0", "1"]),
])
def test_a_bare_number_answered_as_the_prompt_asks_scores(scorer, key, honest, gaming):
    check(scorer, evals_row(EVALS[key]), honest, gaming)


def test_the_bare_style_reads_what_follows_the_reasoning():
    assert extract_bare("reasoning</think>\n  079  ") == "079"
    assert extract_bare("reasoning</think>\nline one\nline two") == "line one\nline two"  # all of it
    assert extract_bare("no think tags, reasoning\n\nso the answer:\n$\\frac{1}{2}$.\n\n") == "\\frac{1}{2}"
    assert extract_bare("</think>\nFinal answer: {70}") == "70"
    assert extract_bare("</think>\nThe answer is \\boxed{B}.") == "B"
    assert extract_bare("</think>\n[1, 2, 3]") == "[1, 2, 3]"  # a list keeps its brackets
    assert extract_bare("</think>\n[x]") == "x"
    assert extract_bare("reasoning</think>\n   ") is None and extract_bare("") is None
    assert extract_bare("</think>\n" + "9" * (MAX_BARE_CHARS + 1)) is None


def test_no_answer_is_a_format_error_not_a_zero(scorer):
    prompt = record(evals_row(EVALS["determinant", 100])).to_prompt(group_size=1)
    [result] = scorer.score_group(prompt.text, [response_text("", "thinking only")], prompt.verifier)
    assert result.status is Status.FORMAT_ERROR and "after the reasoning" in result.detail


# ---- multiple choice ------------------------------------------------------------------------------
def test_choice_options_are_read_from_the_prompt():
    logiqa = record(evals_row(EVALS["logiqa", 0]))
    assert list(logiqa.verifier.spec["options"]) == ["A", "B", "C", "D"]
    assert logiqa.verifier.spec["options"]["C"] == "C.Li chose to travel by ship."
    medmcqa = record(evals_row(EVALS["medmcqa", 0]))
    assert medmcqa.verifier.spec["options"] == {"A": "Hyperplasia", "B": "Hyperophy", "C": "Atrophy", "D": "Dyplasia"}
    jee = record(evals_row(EVALS["jee-math", 0], gold="the correct answer is (B)"))
    assert jee.verifier.spec["options"] == {"A": "60", "B": "90", "C": "108", "D": "126"}


@pytest.mark.parametrize("key, honest, gaming", [
    (("logiqa", 0), ["C", "(C)", "c", "C.", "Answer: C", "C.Li chose to travel by ship."],
     ["A", "B", "D", "A B C D", "ABCD", "A or C", "0", "1"]),
    (("medmcqa", 0), ["c) Atrophy", "c", "C", "Atrophy", "(c)"],
     ["a) Hyperplasia", "Hyperplasia", "c) Hyperplasia", "a b c d", "d"]),
    (("medmcqa", 1), ["c) Vitamin B12", "Vitamin B12", "c"], ["Vitamin B7", "b", "Vitamin"]),
])
def test_a_choice_is_its_letter_or_its_text(scorer, key, honest, gaming):
    check(scorer, evals_row(EVALS[key]), honest, gaming)


def test_jee_math_answers_as_its_prompt_asks(scorer):
    row = evals_row(EVALS["jee-math", 0], gold="the correct answer is (B)")  # style auto
    check(scorer, row, honest=["... Therefore, the correct answer is (B)", "Therefore, the correct answer is (B) 90",
                               "The answer is \\boxed{B}", "B"],
          gaming=["Therefore, the correct answer is (A)", "Therefore, the correct answer is (A) (B) (C) (D)",
                  "Therefore, the correct answer is (B) 126"])


def test_jee_math_ideal_list_is_refused_naming_the_answer_that_names_no_option():
    """The wheel's second and third ideals hold a tab where `\\t` of `\\textbf` was meant."""
    made = import_row(IMPORTERS.get("m1flow"), evals_row(EVALS["jee-math", 0]), 5,
                      ImportContext(source="jee", path="jee.jsonl"))
    assert isinstance(made, RowError) and made.field == "verifier.gold" and "names none of the options" in made.why


@pytest.mark.parametrize("item", MMLU, ids=lambda item: f"mmlu-{item['row']}")
def test_mmlu_letter_or_option_text(scorer, item):
    gold = chr(65 + item["answer"])
    wrong = [chr(65 + i) for i in range(4) if i != item["answer"]]
    check(scorer, mmlu_row(item), honest=[gold, f"{gold}) {item['choices'][item['answer']]}",
                                          item["choices"][item["answer"]]],
          gaming=wrong + ["A B C D"])


def test_a_choice_gold_that_names_no_option_is_refused_naming_the_field():
    row = mmlu_row(MMLU[0])
    row["verifier"]["gold"] = "E"
    made = import_row(IMPORTERS.get("m1flow"), row, 3, ImportContext(source="mmlu", path="mmlu.jsonl"))
    assert isinstance(made, RowError) and str(made) == (
        "mmlu.jsonl:3: verifier.gold: 'E' names none of the options A, B, C, D (a letter, or an option's text)")
    row = {"id": "1", "prompt": "Which one?", "verifier": {"kind": "choice", "gold": "A"}}
    made = import_row(IMPORTERS.get("m1flow"), row, 0, ImportContext(source="s", path="s.jsonl"))
    assert isinstance(made, RowError) and made.field == "verifier.spec.options"


# ---- lists of accepted answers --------------------------------------------------------------------
def test_a_verl_ground_truth_list_is_a_list_of_accepted_answers(scorer):
    item = EVALS["math-derivatives", 5]  # ['x^-1', '1/x']
    verl = {"data_source": "math-derivatives", "ability": "math", "prompt": item["sample"]["input"],
            "reward_model": {"style": "rule", "ground_truth": item["sample"]["ideal"]},
            "extra_info": {"split": "test", "index": 5}}
    made = record(verl)
    assert made.verifier.gold == "x^-1" and made.verifier.spec["answers"] == ["x^-1", "1/x"]
    prompt = made.to_prompt(group_size=3)
    results = scorer.score_group(prompt.text, ["</think>\nAnswer: 1/x", "</think>\nAnswer: x^{-1}",
                                               "</think>\nAnswer: x"], prompt.verifier)
    assert [r.reward for r in results] == [1.0, 1.0, 0.0]


def test_any_accepted_answer_scores_and_a_list_for_a_kind_without_lists_is_refused(scorer):
    row = {"id": "1", "prompt": "Name a primary colour.",
           "verifier": {"kind": "text", "gold": ["red", "blue", "yellow"], "spec": {"style": "bare"}}}
    check(scorer, row, honest=["Red", "blue", "YELLOW"], gaming=["green", "red blue yellow", "der"])
    bad = {"id": "1", "prompt": "1+1=", "verifier": {"kind": "arith", "gold": ["2", "3"]}}
    made = import_row(IMPORTERS.get("m1flow"), bad, 2, ImportContext(source="s", path="s.jsonl"))
    assert isinstance(made, RowError) and made.field == "verifier.gold" and "takes one gold" in made.why


# ---- what is never evaluated ----------------------------------------------------------------------
def test_an_answer_in_programming_notation_is_parsed_without_running_it(scorer, tmp_path):
    marker = tmp_path / "ran"
    row = {"id": "1", "prompt": "d/dx", "verifier": {"kind": "math", "gold": "x^-1", "spec": {"style": "bare"}}}
    hostile = [f"__import__('os').system('touch {marker}')", "open(0).read()", "().__class__.__bases__",
               "exec(input())", "x.__class__"]
    assert scores(scorer, row, hostile) == [0.0] * len(hostile)
    assert not marker.exists()


def test_a_latex_gold_math_verify_misreads_is_a_judge_error_never_a_reward(scorer):
    """The gold check of `data validate` names these; a rollout of such a row is dropped, never scored."""
    for gold, why in [("\\left(x^2 + 1\\right)^-1.5", "reads as the constant 1"),
                      ("TO\\ THIS\\ WORK\\ MR", "product of one-letter symbols"),
                      (EVALS["math-derivatives", 10]["sample"]["ideal"], "primes (derivatives) are lost")]:
        spec = events.VerifierSpec(kind="math", gold=gold, spec_json='{"style": "bare"}')
        [result] = scorer.score_group("", ["</think>\n1"], spec)
        assert result.status is Status.JUDGE_ERROR and why in result.detail, (gold, result.detail)
