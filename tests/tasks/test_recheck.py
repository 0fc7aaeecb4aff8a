"""The re-check variant of the chained sums: the quick pass forgets carries, the re-check redoes it right,
and the warm start's labels take the re-check rarely and independently of the quick pass."""
from __future__ import annotations

import random

from m1flow import chat
from m1flow.tasks import chain
from m1flow.tasks.recheck import (RECHECK, carries, noisy_solution, parse_answer, problems, reward, took_recheck,
                                  write_recheck)
from m1flow.tokenizer import build_tokenizer
from ops.warmstart import WarmStartConfig, _key, sft_pairs


def test_the_quick_pass_forgets_the_carries_it_is_told_to_and_the_recheck_states_the_right_sum():
    terms = [4, 7, 2, 9]  # 4+7 carries, 11+2 does not, 13+9 carries
    assert [carries(4, 7), carries(11, 2), carries(13, 9)] == [True, False, True]
    assert write_recheck(terms) == chain.write_solution(terms) == "4+7=11,11+2=13,13+9=22;22"
    quick = write_recheck(terms, frozenset({0, 1, 2}))
    assert quick == "4+7=1,1+2=3,3+9=2;2" and parse_answer(quick) == 2 and reward(quick, "22") == 0.0
    assert write_recheck(terms, frozenset({1})) == chain.write_solution(terms)  # step 1 has no carry to forget
    fixed = write_recheck(terms, frozenset({0, 1, 2}), recheck=True)
    assert fixed == "4+7=1,1+2=3,3+9=2?4+7=11,11+2=13,13+9=22;22"
    assert parse_answer(fixed) == 22 and reward(fixed, "22") == 1.0 and took_recheck(fixed)


def test_took_recheck_looks_only_before_the_stated_answer():
    assert took_recheck("4+7=11?4+7=11;11") and not took_recheck("4+7=11;11")
    assert not took_recheck("4+7=11;1?") and parse_answer("4+7=11;1?") is None
    assert took_recheck("4+7=1?4+7=11")  # cut short after the re-check: took it, states nothing
    assert parse_answer("4+7=1?4+7=11") is None


def test_labels_forget_carries_and_recheck_independently_at_their_rates():
    rng = random.Random(0)
    data = problems(seed=5, n=4000, max_operand=12)
    labels = [noisy_solution(p, rng, carry_slip=0.5, recheck_rate=0.2) for p in data]
    rechecked = [took_recheck(s) for s in labels]
    assert 0.17 < sum(rechecked) / len(data) < 0.23
    # the quick pass is wrong as often whether or not the label re-checks
    quick_wrong = [s.split(RECHECK)[0].rsplit(";", 1)[0] != p.solution.rsplit(";", 1)[0] for p, s in zip(data, labels)]
    rates = [sum(w for w, r in zip(quick_wrong, rechecked) if r is took) / sum(r is took for r in rechecked)
             for took in (True, False)]
    assert 0.3 < rates[1] < 0.8 and abs(rates[0] - rates[1]) < 0.06
    for p, s, took in zip(data, labels, rechecked):
        if took:
            assert parse_answer(s) == int(p.answer) and s.endswith(p.solution)
        else:
            assert RECHECK not in s and parse_answer(s) <= int(p.answer) and (int(p.answer) - parse_answer(s)) % 10 == 0
    always = [noisy_solution(p, rng, 1.0, 0.0) for p in data[:300]]  # every carry forgotten: right only without one
    for p, s in zip(data, always):
        terms = chain.terms_of(p)
        no_carry = not any(carries(sum(terms[: i + 1]), t) for i, t in enumerate(terms[1:]))
        assert (parse_answer(s) == int(p.answer)) is no_carry
    assert all(noisy_solution(p, rng, 0.0, 0.0) == p.solution for p in data[:50])


def test_the_recheck_token_is_one_token_and_responses_round_trip():
    """The benchmark finds the re-check by its token id: "?" must stay one token wherever it stands."""
    tok = build_tokenizer()
    [recheck_id] = tok.encode(RECHECK, add_special_tokens=False)
    for p in problems(seed=4, n=50, max_operand=12):
        text = chat.response_text(write_recheck(chain.terms_of(p), frozenset({0, 1}), recheck=True))
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text and ids.count(recheck_id) == 1


def test_warm_start_teaches_the_redo_first_then_makes_the_recheck_rare():
    cfg = WarmStartConfig(task="recheck", steps=10, batch_size=200, recheck_rate=0.04, recheck_skill_rate=0.5,
                          recheck_skill_frac=0.6)
    pairs = sft_pairs(cfg, random.Random(0))
    assert len(pairs) == 2000
    early = [took_recheck(s) for _, s in pairs[:1200]]
    late = [took_recheck(s) for _, s in pairs[1200:]]
    assert 0.45 < sum(early) / len(early) < 0.55
    assert 0.02 < sum(late) / len(late) < 0.06
    assert all(RECHECK not in s for _, s in sft_pairs(cfg.model_copy(update={"task": "chain"}), random.Random(0)))
    assert _key(cfg) != _key(cfg.model_copy(update={"task": "chain"}))
    assert _key(cfg) != _key(cfg.model_copy(update={"recheck_rate": 0.03}))
