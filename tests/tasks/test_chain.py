"""The chained-sum task: reference responses are right, slips are wrong, every character encodes;
the warm start trains on it when asked."""
from __future__ import annotations

import random

import pytest

from m1flow.tasks.chain import noisy_solution, parse_answer, problems, reward, terms_of, write_solution
from m1flow.tokenizer import build_tokenizer
from ops.warmstart import WarmStartConfig, _key, sft_pairs


def test_reference_solution_works_each_step_and_ends_in_the_sum():
    assert write_solution([4, 7, 2, 9]) == "4+7=11,11+2=13,13+9=22;22"
    for p in problems(seed=3, n=200):
        steps, final = p.solution.split(";")
        total = terms_of(p)[0]
        for step, term in zip(steps.split(","), terms_of(p)[1:]):
            assert step == f"{total}+{term}={total + term}"
            total += term
        assert int(final) == total == int(p.answer) == parse_answer(p.solution)


def test_problems_are_seeded_long_and_within_bounds():
    a, b = problems(seed=1, n=50), problems(seed=1, n=50)
    assert a == b and a != problems(seed=2, n=50)
    data = problems(seed=0, n=500, max_operand=9, min_terms=3, max_terms=5)
    for p in data:
        assert 3 <= len(terms_of(p)) <= 5 and all(0 <= t <= 9 for t in terms_of(p))
        assert 13 <= len(p.solution) <= 40  # shortest: "3+2=5,5+0=5;5"
    assert sum(len(p.solution) for p in data) / len(data) > 20
    assert {len(terms_of(p)) for p in problems(seed=0, n=200, min_terms=2, max_terms=6)} == {2, 3, 4, 5, 6}
    with pytest.raises(ValueError):
        problems(seed=0, n=1, min_terms=1)


def test_tokenizer_round_trips_and_spells_numbers_digit_by_digit():
    tok = build_tokenizer()
    for p in problems(seed=4, n=100, max_operand=30):
        for text in (p.text, p.solution):
            ids = tok.encode(text, add_special_tokens=False)
            assert tok.decode(ids) == text
            pieces = [tok.decode([i]) for i in ids]
            assert sum(piece.isdigit() for piece in pieces) == sum(ch.isdigit() for ch in text)


def test_parse_answer_reads_only_the_final_answer():
    assert parse_answer("4+7=11,11+2=13;13") == 13
    assert parse_answer("4+7=11;11 ") == 11
    assert parse_answer("4+7=11,11+2=13") is None  # no separator: no stated answer
    assert parse_answer("4+7=11;1x") is None
    assert parse_answer("13;") is None
    assert parse_answer("") is None
    assert reward("4+7=99;11", "11") == 1.0  # only the outcome is verified
    assert reward("4+7=11;12", "11") == 0.0 and reward("garbage", "11") == 0.0


def test_noisy_solutions_slip_at_the_requested_rate_and_are_always_wrong_when_they_do():
    rng = random.Random(0)
    data = problems(seed=5, n=2000)
    noisy = [noisy_solution(p, rng, 0.4) for p in data]
    wrong = [(p, s) for p, s in zip(data, noisy) if s != p.solution]
    assert 0.35 < len(wrong) / len(data) < 0.45
    assert all(parse_answer(s) != int(p.answer) and parse_answer(s) is not None for p, s in wrong)
    # both kinds of slip occur: a wrong scratchpad step, and a right scratchpad with a near-miss answer
    right_pad = [s for p, s in wrong if s.split(";")[0] == p.solution.split(";")[0]]
    assert 0 < len(right_pad) < len(wrong)
    assert all(abs(parse_answer(s) - int(p.answer)) <= 3 for p, s in wrong)
    assert all(noisy_solution(p, rng, 0.0) == p.solution for p in data[:50])


def test_warm_start_trains_on_noisy_chain_solutions_when_asked():
    cfg = WarmStartConfig(task="chain", steps=4, batch_size=100, label_noise=0.3)
    pairs = sft_pairs(cfg, random.Random(0))
    assert len(pairs) == 400
    right = sum(parse_answer(s) == sum(map(int, p[:-1].split("+"))) for p, s in pairs)
    assert 0.6 < right / len(pairs) < 0.8
    assert all(";" in s and all(0 <= int(t) <= cfg.max_operand for t in p[:-1].split("+")) for p, s in pairs)
    arith_pairs = sft_pairs(WarmStartConfig(steps=1, batch_size=10), random.Random(0))
    assert all(";" not in s and parse_answer(s) is None for _, s in arith_pairs)
    assert _key(cfg) != _key(cfg.model_copy(update={"task": "arith"}))
