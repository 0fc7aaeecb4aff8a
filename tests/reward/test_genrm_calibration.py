"""Length-controlled recalibration removes a judge's length preference and nothing else."""
import random

import numpy as np
import pytest

from svc_reward.genrm import (CalibrationConfig, Comparer, LengthCalibrator, LengthLovingJudge,
                              LengthRecord, QualityJudge)
from svc_reward.genrm.calibration import fit_logistic


def verdicts(judge_for, n=1500, seed=0):
    """Records of pairs of random-length answers with hidden qualities, judged in both orders."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        a, b = f"{i}a" + "x" * rng.randint(20, 400), f"{i}b" + "y" * rng.randint(20, 400)
        judge = judge_for({a: rng.gauss(0, 1), b: rng.gauss(0, 1)})
        records.append(LengthRecord(Comparer(judge).compare("q", a, b).score, len(a), len(b)))
    return records


def longer_minus_shorter(records, score):
    """Mean score of A when A is longer minus when A is shorter."""
    longer = [score(r) for r in records if r.len_a > r.len_b]
    shorter = [score(r) for r in records if r.len_a < r.len_b]
    return np.mean(longer) - np.mean(shorter)


@pytest.mark.parametrize("bonus", [1 / 200, 1 / 50])
def test_recalibration_removes_a_length_preference(bonus):
    records = verdicts(lambda q: LengthLovingJudge(q, length_bonus=bonus))
    calibrator = LengthCalibrator()
    coefficients = calibrator.fit(records)
    assert coefficients.before > 1.0
    assert abs(coefficients.after) < 0.1 * coefficients.before and abs(coefficients.after) < 0.2
    assert coefficients.as_dict()["before"] == calibrator.coefficient_before
    raw_gap = longer_minus_shorter(records, lambda r: r.score)
    fixed_gap = longer_minus_shorter(records, lambda r: calibrator.correct(r.score, r.len_a, r.len_b))
    assert raw_gap > 0.3 and abs(fixed_gap) < 0.1


def test_pure_length_lover_is_fitted_finitely_and_removed():
    records = verdicts(lambda q: LengthLovingJudge(), n=400)
    coefficients = LengthCalibrator().fit(records)
    assert 3.0 < coefficients.before < 100.0
    assert abs(coefficients.after) < 0.2


def test_a_judge_without_length_preference_is_left_alone():
    records = verdicts(QualityJudge)
    calibrator = LengthCalibrator()
    coefficients = calibrator.fit(records)
    assert abs(coefficients.before) < 0.3 and abs(coefficients.after) < 0.3
    assert abs(coefficients.lc_win_rate - coefficients.raw_win_rate) < 0.05
    changes = [abs(calibrator.correct(r.score, r.len_a, r.len_b) - r.score) for r in records]
    assert np.mean(changes) < 0.1


def test_correction_discounts_only_wins_that_length_explains():
    calibrator = LengthCalibrator()
    calibrator.fit(verdicts(lambda q: LengthLovingJudge(q, length_bonus=1 / 100), n=600))
    assert calibrator.correct(1.0, 400, 50) < 0.9  # the longer answer's win is partly length
    assert calibrator.correct(-1.0, 400, 50) == -1.0  # losing despite being longer: full loss
    assert calibrator.correct(1.0, 50, 400) == 1.0  # winning despite being shorter: full win
    assert calibrator.correct(-1.0, 50, 400) > -0.9
    assert calibrator.correct(0.0, 200, 200) == pytest.approx(0.0, abs=0.05)
    for score in (-1.0, -0.5, 0.0, 0.5, 1.0):
        for len_a, len_b in ((5, 900), (900, 5), (300, 310)):
            assert -1.0 <= calibrator.correct(score, len_a, len_b) <= 1.0


def test_unfitted_calibrator_changes_nothing_and_needs_enough_records():
    calibrator = LengthCalibrator(CalibrationConfig(min_records=10))
    assert calibrator.correct(1.0, 900, 5) == 1.0
    with pytest.raises(ValueError, match="at least 10"):
        calibrator.fit([LengthRecord(1.0, 10, 5), LengthRecord(-1.0, 5, 10)] * 4)
    with pytest.raises(ValueError, match="all equal|are equal"):
        calibrator.fit([LengthRecord(-1.0, n, 50) for n in range(20)])
    assert not calibrator.fitted


def test_logistic_fit_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 20000)
    p = (rng.random(20000) < 1 / (1 + np.exp(-(0.4 + 1.5 * x)))).astype(float)
    b0, b1 = fit_logistic(x, p, l2=0.0, max_iter=50)
    assert b0 == pytest.approx(0.4, abs=0.05) and b1 == pytest.approx(1.5, abs=0.08)


def test_a_fit_on_games_between_peers_is_checked_on_those_games():
    """The broker loop's regime (tests/integration/test_genrm_loop.py): a judge that buys length outright
    (0.05 a character against a quality in [0, 1]) makes the longest answer the reference, which beats
    nearly every rollout; b1 comes from the Swiss games between peers, and so must its residual. Refitted
    on the few discordant pairs left within groups, over these 20 streams it came out at -0.2 to +0.5 of
    the fit (4 of them above 0.3; one broker run 5.98 after 4.76); on the games, 0.05 to 0.21."""
    from svc_reward.genrm import GenRMConfig, GenRMScorer
    from tests.reward.genrm_stream import general_group, length_loving_judge

    for seed in range(20):
        rng = random.Random(seed)
        scorer = GenRMScorer(length_loving_judge(), GenRMConfig(history=112))
        for _ in range(16):
            scorer.score_group(*general_group(rng))
        assert np.mean([r.score for r in scorer.history]) < -0.8  # the regime: rollouts lose to the reference
        fit = scorer.recalibrate()
        assert fit.before > 3.0 and abs(fit.after) < 0.3 * fit.before, (seed, fit)
