"""The re-check variant of the chained sums: the re-check is rare in the warm start's labels, is taken
independently of the slip, and when taken always ends in the right answer."""
from __future__ import annotations

import random

from m1flow.tasks import chain
from m1flow.tasks.recheck import RECHECK, noisy_solution, parse_answer, problems, reward, took_recheck, write_recheck
from m1flow.tokenizer import CharTokenizer
from m1flow.warmstart import WarmStartConfig, _key, sft_pairs


def test_a_recheck_redoes_the_scratchpad_and_its_answer_is_the_stated_one():
    assert write_recheck([4, 7, 2, 9]) == chain.write_solution([4, 7, 2, 9]) == "4+7=11,11+2=13,13+9=22;22"
    slipped = write_recheck([4, 7, 2, 9], slip=(1, 1))
    assert slipped == "4+7=11,11+2=14,14+9=23;23" and parse_answer(slipped) == 23
    fixed = write_recheck([4, 7, 2, 9], slip=(1, 1), recheck=True)
    assert fixed == "4+7=11,11+2=14,14+9=23?4+7=11,11+2=13,13+9=22;22"
    assert parse_answer(fixed) == 22 and reward(fixed, "22") == 1.0 and reward(slipped, "22") == 0.0
    # a slip in the stated answer only: the re-check states the right one instead
    assert write_recheck([3, 4, 5], slip=(2, -2), recheck=True) == "3+4=7,7+5=12?3+4=7,7+5=12;12"


def test_took_recheck_looks_only_before_the_stated_answer():
    assert took_recheck("4+7=11?4+7=11;11") and not took_recheck("4+7=11;11")
    assert not took_recheck("4+7=11;1?") and parse_answer("4+7=11;1?") is None
    assert took_recheck("4+7=12?4+7=11")  # cut short after the re-check: took it, states nothing
    assert parse_answer("4+7=12?4+7=11") is None


def test_labels_slip_and_recheck_independently_at_their_rates():
    rng = random.Random(0)
    data = problems(seed=5, n=4000)
    labels = [noisy_solution(p, rng, noise=0.5, recheck_rate=0.2) for p in data]
    rechecked = [took_recheck(s) for s in labels]
    # the first scratchpad differs from the reference's when a partial sum slipped
    slipped = [s.split(RECHECK)[0].rsplit(";", 1)[0] != p.solution.rsplit(";", 1)[0] for p, s in zip(data, labels)]
    assert 0.17 < sum(rechecked) / len(data) < 0.23
    rates = []
    for took in (True, False):
        group = [slip for slip, r in zip(slipped, rechecked) if r is took]
        rates.append(sum(group) / len(group))
    assert 0.3 < rates[1] < 0.45 and abs(rates[0] - rates[1]) < 0.06  # as often with the re-check as without
    for p, s, took in zip(data, labels, rechecked):
        if took:
            assert parse_answer(s) == int(p.answer) and s.endswith(p.solution)
        else:
            assert RECHECK not in s
    assert all(noisy_solution(p, rng, 0.0, 0.0) == p.solution for p in data[:50])


def test_every_recheck_character_is_one_token():
    tok = CharTokenizer.build()
    unk = tok.tokenizer.token_to_id("<unk>")
    for p in problems(seed=4, n=50, max_operand=12):
        text = write_recheck(chain.terms_of(p), slip=(0, 2), recheck=True)
        ids = tok.encode(text)
        assert unk not in ids and len(ids) == len(text) and tok.decode(ids) == text
    assert len(tok.encode(RECHECK)) == 1


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
