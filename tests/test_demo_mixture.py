"""The demo's mixture: its sources, the window its answers need, the cold start's mixture pairs (each
family's answers in the form its verifier reads, right often but not always), and the per-source table."""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from m1flow.chat import response_text
from m1flow.contracts import rpc
from m1flow.kinds import gold_answer, gold_response
from ops.demo import (DEMO_SOURCES, EVAL_SEED, DemoConfig, eval_sets, print_heldout, print_sources, source_file,
                      source_parts, warmstart_for)
from m1flow.tokenizer import build_tokenizer
from ops.warmstart import WarmStartConfig, _key, malformed, mixture_examples, mixture_pairs, noisy_gold, sft_pairs
from svc_reward.client import LocalScorer
from svc_source.config import SourceConfig


def families(sources) -> set[str]:  # noqa: ANN001
    return {d.generator.partition(":")[0] for d in sources}


def test_demo_mixes_three_families_under_two_verifiers():
    cfg = DemoConfig(genrm=False)
    assert len(cfg.sources) == 3 and families(cfg.sources) == {"arith", "rg"}
    assert DemoConfig().sources[:3] == cfg.sources  # the default adds the judged family (test_demo_genrm.py)
    weights = {d.generator: d.weight for d in cfg.sources}
    assert max(weights.values()) - min(weights.values()) < 0.02  # alike: each source's gain is a target


def test_the_demos_tokenizer_spells_its_families_words_as_words():
    """A reasoning-gym prompt spelled one letter a token is three times longer than with its words
    learned; the demo's cold start trains its tokenizer on the families' prompts too."""
    from m1flow import chat
    from m1flow.data.generators import generate

    warm = warmstart_for("native", DEMO_SOURCES)
    assert set(warm.tokenizer.prompts_of) >= {d.generator for d in DEMO_SOURCES if d.generator != "arith"}
    plain, demo = build_tokenizer(WarmStartConfig().tokenizer), build_tokenizer(warm.tokenizer)
    record = generate("rg:products", EVAL_SEED, 0, 1, {})
    assert len(chat.prompt_ids(demo, record.prompt)) * 2 < len(chat.prompt_ids(plain, record.prompt))
    assert demo.decode(demo.encode(record.prompt, add_special_tokens=False)) == record.prompt
    digits = demo.encode("1234", add_special_tokens=False)
    assert len(digits) == 4  # numbers still a digit a token


def held_out(cfg: DemoConfig) -> dict[str, list]:
    """The held-out records of each source: rows 0.. of its generator at seed EVAL_SEED."""
    from m1flow.data.generators import generate

    return {d.source_name: [generate(d.generator, EVAL_SEED, i, d.level, d.config) for i in range(cfg.eval_prompts)]
            for d in cfg.sources}


def test_the_window_holds_every_sources_gold_answer():
    """A policy that writes the gold must fit it in the window, end of turn included."""
    cfg, tok = DemoConfig(genrm=False), build_tokenizer(WarmStartConfig().tokenizer)
    for name, records in held_out(cfg.model_copy(update={"eval_prompts": 20})).items():
        longest = max(len(tok.encode(gold_response(r), add_special_tokens=False)) for r in records)
        assert longest + 1 <= cfg.window, (name, longest)


def test_svc_eval_reads_the_same_held_out_sets_from_the_run_settings(tmp_path):
    """One settings file: svc_source's sources and svc_eval's sets, each set the held-out stream of its
    source (the records above), sampled in the demo's window with pass@1 over 200 samples."""
    from m1flow.heldout import load_set
    from svc_eval.config import EvalConfig

    cfg = DemoConfig(genrm=False, eval_prompts=6)
    settings = json.loads(source_file(tmp_path, cfg).read_text())
    sets = EvalConfig.model_validate({"eval_sets": settings["eval_sets"]}).eval_sets
    assert [s.set_name for s in sets] == [d.source_name for d in cfg.sources] == [s.set_name for s in eval_sets(cfg)]
    held = held_out(cfg)
    for s in sets:
        assert (s.prompts, s.samples, s.max_new_tokens) == (6, cfg.eval_samples, cfg.window)
        assert [p.text for p in load_set(s)] == [r.prompt for r in held[s.set_name]]
    assert DemoConfig(genrm=False).eval_prompts * DemoConfig(genrm=False).eval_samples >= 200


def result(pass1: float, judged: list[int], correct: list[int]) -> dict:
    """An EvalResult as JSON (what `evals` holds)."""
    return {"pass1": pass1, "judged": sum(judged), "correct": sum(correct), "prompt_judged": judged,
            "prompt_correct": correct}


def test_the_held_out_summary_tests_each_gain_and_says_whether_the_target_is_met():
    flat = result(0.25, [4] * 50, [1] * 50)
    up = result(0.5, [4] * 50, [2] * 50)  # every prompt +0.25
    lines: list[str] = []
    assert print_heldout({"a": flat, "b": flat}, {"a": up, "b": up}, 0, 30, say=lines.append)
    assert "mean gain +0.250" in lines[-1] and lines[-1].endswith("met")
    noisy = result(0.27, [4] * 50, [2] + [1] * 49)  # +0.02: not a gain one can tell from noise
    assert not print_heldout({"a": flat, "b": flat}, {"a": up, "b": noisy}, 0, 30, say=lines.append)
    assert lines[-1].endswith("NOT met")
    small = result(0.35, [4] * 50, [1] * 30 + [2] * 20)  # significant, but the mean gain is 0.10
    assert not print_heldout({"a": flat}, {"a": small}, 0, 30, say=lines.append)


def test_the_source_file_is_svc_source_settings(tmp_path):
    cfg = DemoConfig(genrm=False, group_size=4, batch_groups=8)
    settings = SourceConfig.model_validate(json.loads(source_file(tmp_path, cfg).read_text()))
    assert [d.generator for d in settings.sources] == [d.generator for d in DEMO_SOURCES]
    assert (settings.group_size, settings.batch_groups) == (4, 8)


def test_held_out_items_are_another_stream_than_the_source_and_the_cold_start():
    """Another stream, not other items: at level 1 the item spaces are small (a sum of two digits), so
    the stream alone would not keep a held-out problem out of training; svc_source drops its prompts."""
    from m1flow.data.generators import generate

    cfg = DemoConfig(genrm=False, eval_prompts=10)
    held = held_out(cfg)
    assert set(held) == {d.source_name for d in cfg.sources}
    for d in cfg.sources:
        mine = [r.prompt for r in held[d.source_name]]
        for seed in (d.seed, 10_000 + d.seed):  # the source's stream, the cold start's
            assert mine != [generate(d.generator, seed, i, d.level, d.config).prompt for i in range(10)]
        assert len(set(mine)) > 1


def test_mixture_answers_are_what_each_verifier_reads_right_but_not_always():
    warm = WarmStartConfig(task="mixture", mixture=DEMO_SOURCES)
    examples = mixture_examples(warm, 240, random.Random(0))
    counts = Counter(r.verifier.kind for r, _ in examples)
    assert set(counts) == {d.generator for d in DEMO_SOURCES} and min(counts.values()) > 40
    right: dict[str, list[bool]] = {}
    with LocalScorer() as scorer:
        for record, answer in examples:
            result = scorer.score(response_text(answer), record.to_prompt(1).verifier)
            right.setdefault(record.verifier.kind, []).append(result.correct is True)
        clean = WarmStartConfig(task="mixture", mixture=DEMO_SOURCES, label_noise=0.0)
        assert all(scorer.score(response_text(a), r.to_prompt(1).verifier).correct
                   for r, a in mixture_examples(clean, 60, random.Random(1)))
    for family, oks in right.items():
        assert 0.3 < sum(oks) / len(oks) < 0.95, (family, sum(oks) / len(oks))


def test_form_noise_writes_right_values_in_forms_every_verifier_refuses():
    """The cold start's format errors: the value right (no label noise), the form one the verifier
    refuses, so RL has a skill to teach that carries over to prompts it never trains on."""
    broken = WarmStartConfig(task="mixture", mixture=DEMO_SOURCES, label_noise=0.0, form_noise=1.0)
    examples = mixture_examples(broken, 60, random.Random(2))
    assert {r.verifier.kind for r, _ in examples} == {d.generator for d in DEMO_SOURCES}
    with LocalScorer() as scorer:
        for record, answer in examples:
            verifier = record.to_prompt(1).verifier
            assert scorer.score(response_text(answer), verifier).correct is False, answer
            assert gold_answer(record.verifier).replace("<answer>", "").replace("</answer>", "") in answer
    assert malformed("<answer>4</answer>") == "4" and malformed("12") == "= 12"


def test_mixture_pairs_are_the_sft_task_and_batch_by_length():
    warm = WarmStartConfig(task="mixture", mixture=DEMO_SOURCES, steps=4, batch_size=16)
    pairs = sft_pairs(warm, random.Random(0))
    assert len(pairs) == 64
    assert pairs == mixture_pairs(warm, 64, random.Random(0))
    lengths = [len(p) for p, _ in pairs]
    assert lengths == sorted(lengths)  # 64 examples: one window of 8 batches


def test_the_cold_start_cache_key_follows_the_mixture():
    mix = WarmStartConfig(task="mixture", mixture=DEMO_SOURCES)
    other = WarmStartConfig(task="mixture", mixture=DEMO_SOURCES[:2])
    assert len({_key(WarmStartConfig()), _key(mix), _key(other)}) == 3
    assert warmstart_for("native").task == "arith"  # `m1flow up` keeps the arithmetic cold start


def test_a_mixture_without_generators_is_refused():
    with pytest.raises(ValueError, match="mixture"):
        sft_pairs(WarmStartConfig(task="mixture", steps=1, batch_size=2), random.Random(0))


def test_noisy_gold_keeps_the_golds_form():
    rng = random.Random(0)
    assert {noisy_gold("True", rng, 0.5) for _ in range(50)} == {"True", "False"}
    assert all(abs(int(noisy_gold("7", rng, 1.0)) - 7) in (1, 2, 3) for _ in range(20))
    assert noisy_gold("x+1", rng, 1.0) == "x+1"


def row(version: int, source: str, samples: int, reward: float, accuracy: float | None) -> rpc.SourceRow:
    r = rpc.SourceRow(policy_version=version, source=source, kind=source, groups=1, samples=samples,
                      mean_reward=reward, judged=samples if accuracy is not None else 0, mean_length=3.0)
    if accuracy is not None:
        r.accuracy = accuracy
    return r


def test_source_parts_weigh_the_first_and_last_third_of_the_versions(capsys):
    rows = [row(v, "arith", 8, v / 10, v / 10) for v in range(6)] + [row(0, "logic", 4, 0.5, None),
                                                                     row(5, "logic", 12, 1.0, 1.0)]
    parts = source_parts(rows)
    (l1, n1, r1, a1), (l2, n2, r2, a2) = parts["arith"]
    assert (l1, n1, l2, n2) == ("v0-1", 16, "v4-5", 16)
    assert (r1, a1, r2, a2) == pytest.approx((0.05, 0.05, 0.45, 0.45))
    (_, _, _, first_logic), (_, _, _, last_logic) = parts["logic"]
    assert first_logic is None and last_logic == pytest.approx(1.0)
    print_sources(rows)
    out = capsys.readouterr().out
    assert "v0-1" in out and "v4-5" in out and "logic" in out
