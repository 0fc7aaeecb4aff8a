"""GenRM rewards for a group: Swiss reference, pairwise scores, judge errors, calibration hook."""
import random

from svc_reward.genrm import (GenRMConfig, GenRMScorer, LengthLovingJudge, PositionBiasedJudge,
                              QualityJudge)
from svc_reward.result import Status


class CountingJudge:
    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def judge(self, prompt, first, second):
        self.calls += 1
        return self.inner.judge(prompt, first, second)


def group(n=8, seed=0):
    rng = random.Random(seed)
    quality = {f"rollout {i}": rng.random() for i in range(n)}
    return list(quality), quality


def test_rollouts_are_scored_against_the_tournament_winner():
    rollouts, quality = group()
    judge = CountingJudge(QualityJudge(quality))
    result = GenRMScorer(judge).score_group("q", rollouts)
    best = max(rollouts, key=quality.get)
    assert result.reference == best
    for text, r in zip(rollouts, result.results):
        assert r.status is Status.OK and r.correct is None and r.usable
        assert r.reward == r.parts.genrm == (0.0 if text == best else -1.0)
        assert r.parts.correctness == 0.0
    # 3 rounds x 4 games x 2 orders; the winner's 3 games are reused, the other 4 rollouts are new
    assert judge.calls == 24 + 4 * 2


def test_external_candidates_and_better_rollouts():
    candidates, quality = group(5, seed=1)
    quality.update({"great": 2.0, "awful": -1.0})
    result = GenRMScorer(QualityJudge(quality)).score_group("q", ["great", "awful"], candidates)
    assert result.reference == max(candidates, key=quality.get)
    assert [r.reward for r in result.results] == [1.0, -1.0]


def test_judge_errors_mark_samples_for_dropping():
    rollouts, quality = group()  # "unrateable" has no hidden quality: the judge fails on it
    result = GenRMScorer(QualityJudge(quality)).score_group("q", rollouts + ["unrateable"], rollouts)
    assert [r.status for r in result.results[:-1]] == [Status.OK] * len(rollouts)
    assert result.results[-1].status is Status.JUDGE_ERROR and not result.results[-1].usable


def test_no_reference_when_the_judge_fails_most_matches():
    rollouts, quality = group()
    judge = QualityJudge({k: v for k, v in quality.items() if k in rollouts[:2]})
    result = GenRMScorer(judge, GenRMConfig(max_error_rate=0.5)).score_group("q", rollouts)
    assert result.reference is None and result.tournament.error_rate > 0.5
    assert all(r.status is Status.JUDGE_ERROR for r in result.results)


def test_position_biased_judge_gives_zero_rewards_and_flip_rate_one():
    rollouts, _ = group()
    scorer = GenRMScorer(PositionBiasedJudge(), GenRMConfig(repeats=2))
    result = scorer.score_group("q", rollouts)
    assert [r.reward for r in result.results] == [0.0] * len(rollouts)
    assert scorer.flip_rate == 1.0 and scorer.tracker.pairs > 0


def test_recalibration_from_recent_verdicts_lowers_rewards_bought_with_length():
    rng = random.Random(0)
    quality = {f"{i}:" + "w" * rng.randint(10, 300): rng.gauss(0, 1) for i in range(40)}
    texts = list(quality)
    scorer = GenRMScorer(LengthLovingJudge(quality, length_bonus=1 / 60))
    for k in range(5):
        scorer.score_against(f"prompt {k}", texts, texts[k])
    assert len(scorer.history) == 5 * 39  # every verdict but each reference against itself
    coefficients = scorer.recalibrate()
    assert coefficients.before > 1.0 and abs(coefficients.after) < 0.3
    reference = min(texts, key=len)
    longest = max(texts, key=len)
    [raw] = GenRMScorer(scorer.judge).score_against("p", [longest], reference)
    fixed = [scorer.score_against(f"p{k}", [longest], reference)[0] for k in range(200)]
    assert raw.reward == 1.0 and {f.reward for f in fixed} == {-1.0, 1.0}  # thinned: levels kept
    assert all(f.parts.genrm == f.reward for f in fixed)
    assert sum(f.reward for f in fixed) / len(fixed) < 0.6  # a win bought with length is often taken back
