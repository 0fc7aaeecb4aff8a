"""Recalibration over a stream of judged groups lands at zero length bias, for a range of injected biases.

The stream is what svc_reward sees: groups of 8 answers (10-40 words whose distinct-word share, the
judge's hidden quality, is drawn independently of their number), a Swiss-round reference, each answer
judged against it in both orders by the quality judge with a known length bonus per character. The
bias is read as the monitor reads it: the mean within-group rank correlation of reward and length
(svc_monitor's genrm/length_corr), over 300 groups.

What the old correction did on this stream (the deterministic map p -> p q0 / q on one pooled fit,
history 4096; bias 0 / 0.001 / 0.003 / 0.01 / 0.03 per character): rank correlation 0.00 / 0.15 / 0.35 /
0.51 / 0.56 before, +0.56 / -0.48 / -0.43 / -0.34 / -0.33 after, while the mean reward still rose with
length (Pearson +0.02 / +0.14 / +0.31 / +0.49 / +0.54 after). The map gave the many tied losses against
a strong reference a strict order by length (shorter first when b1 > 0, longer first when a fair judge
fits b1 slightly below 0), the pooled fit was attenuated by the references' different strengths, and
the reference's tie with itself (0 against -1 for the rest) was left alone although the biased rounds
chose it for its length. With the within-group fit and thinning: +0.01 / +0.05 / +0.08 / +0.07 / +0.03
after (Pearson +0.01 / +0.05 / +0.07 / +0.07 / +0.03). `bench/genrm.py calibration` prints the same
comparison on the general tasks (bench/README.md).
"""
import random

import numpy as np
import pytest

from m1flow.stats import spearman
from svc_reward.genrm import CalibrationConfig, GenRMConfig, GenRMScorer, QualityJudge, distinct_word_share

from tests.reward.genrm_stream import answer

GROUPS = 300


def length_correlation(scorer: GenRMScorer, rng: random.Random, groups: int = GROUPS) -> float:
    """Mean within-group rank correlation of reward and length (groups all scored alike left out)."""
    corrs = []
    for g in range(groups):
        answers = [answer(rng) for _ in range(8)]
        rewards = [r.reward for r in scorer.score_group(f"prompt {g} {rng.random()}", answers).results]
        corr = spearman(np.array(rewards), np.array([len(a) for a in answers]))
        if corr is not None:
            corrs.append(corr)
    assert len(corrs) >= groups // 5, "too few groups with any ordering to read a correlation from"
    return float(np.mean(corrs))


def scorer_for(bonus: float) -> GenRMScorer:
    return GenRMScorer(QualityJudge(distinct_word_share, bonus, margin=0.05), GenRMConfig(history=4096))


@pytest.mark.parametrize("bonus", [0.003, 0.01, 0.03])
def test_recalibrated_length_bias_is_within_a_tenth_of_zero(bonus):
    rng, scorer = random.Random(1), scorer_for(bonus)
    before = length_correlation(scorer, rng)
    fit = scorer.recalibrate()
    after = length_correlation(scorer, rng)
    assert before > 0.3 and fit.before > CalibrationConfig().min_coefficient, (before, fit)
    assert abs(after) < 0.1, (before, after, fit)


def test_an_unbiased_judge_is_left_as_judged():
    rng, scorer = random.Random(2), scorer_for(0.0)
    before = length_correlation(scorer, rng)
    fit = scorer.recalibrate()
    assert abs(before) < 0.1 and fit.before <= CalibrationConfig().min_coefficient, (before, fit)
    answers = [answer(rng) for _ in range(8)]
    raw = [r.reward for r in scorer_for(0.0).score_group("p", answers).results]
    assert [r.reward for r in scorer.score_group("p", answers).results] == raw  # nothing corrected


def test_a_group_scored_again_gets_the_same_corrected_rewards():
    rng, scorer = random.Random(3), scorer_for(0.01)
    length_correlation(scorer, rng, 100)
    scorer.recalibrate()
    answers = [answer(rng) for _ in range(8)]
    first = [r.reward for r in scorer.score_group("p", answers).results]
    assert [r.reward for r in scorer.score_group("p", answers).results] == first
    assert set(first) <= {-1.0, 0.0, 1.0}  # thinning keeps the judge's score levels
