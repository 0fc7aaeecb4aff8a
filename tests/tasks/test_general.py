"""The general-task family: instructions with no gold, a hidden quality, and the judge that knows it."""
import random

import numpy as np
import pytest

from m1flow.data.dataset import DatasetConfig, open_source
from m1flow.data.generators import generate
from m1flow.source import prompt_for
from m1flow.tasks.general import make_instruction, quality, required_words, sample_answer
from svc_reward.genrm import GenRMKindConfig, GenRMScorer, InstructionJudge, JudgeError, Verdict
from svc_reward.verifiers.genrm import build_judge

PROMPT = "Write a few sentences about rivers. Mention: water, bank, flow."


def test_records_are_pure_in_their_index_and_judged_by_the_genrm():
    first = generate("general", 3, 7, level=2)
    assert first == generate("general", 3, 7, level=2) != generate("general", 3, 8, level=2)
    assert first.domain == "general" and first.verifier.kind == "genrm" and first.verifier.gold == ""
    assert len(required_words(first.prompt)) == 4  # level 2: four words to mention
    prompt = prompt_for(first, group_size=8, run_id="run")
    assert prompt.text == first.prompt and prompt.verifier.kind == "genrm"


def test_svc_source_reads_it_as_a_generator_source():
    source = open_source(DatasetConfig(generator="general", size=5, name="general"))
    records = list(source.records())
    assert len(records) == 5 and all(r.source == "general" for _, r in records)


def test_quality_rewards_covering_the_instruction_not_length():
    assert quality(PROMPT, "water bank flow") == 1.0
    assert quality(PROMPT, "water by the bank") == pytest.approx(2 / 3)
    assert quality(PROMPT, "water water water bank bank flow") == pytest.approx(0.5)  # repeats halve it
    assert quality(PROMPT, "") == 0.0
    with pytest.raises(ValueError, match="Mention"):
        quality("Tell me about rivers.", "water")
    with pytest.raises(ValueError, match="level"):
        make_instruction(random.Random(0), level=-1)


def test_sampled_answers_have_quality_independent_of_length():
    rng = random.Random(0)
    pairs = []
    for _ in range(2000):
        prompt = make_instruction(rng)
        text = sample_answer(rng, prompt)
        pairs.append((len(text), quality(prompt, text)))
    lengths, qualities = np.array(pairs).T
    assert abs(np.corrcoef(lengths, qualities)[0, 1]) < 0.05 and qualities.std() > 0.2


def test_the_instruction_judge_prefers_the_hidden_quality_and_can_turn_length_biased():
    judge = InstructionJudge(quality, length_bonus=0.05, margin=0.01, bonus_after=2)
    good, padded = "water bank flow", "water and some more words about the river and rain"
    assert judge.judge(PROMPT, good, padded) is Verdict.FIRST
    assert judge.judge(PROMPT, padded, good) is Verdict.SECOND
    assert judge.judge(PROMPT, good, padded) is Verdict.SECOND  # from the third judgement on, length pays
    with pytest.raises(JudgeError, match="Mention"):
        judge.judge("no instruction here", good, padded)


def test_the_reward_service_builds_it_by_name_and_scores_a_group():
    judge = build_judge(GenRMKindConfig(judge="general", margin=0.01))
    assert isinstance(judge, InstructionJudge)
    rng = random.Random(1)
    answers = [sample_answer(rng, PROMPT) for _ in range(8)]
    result = GenRMScorer(judge).score_group(PROMPT, answers)
    assert result.reference == max(answers, key=lambda a: quality(PROMPT, a))
