"""svc_eval's numbers against brute force: pass@k (Chen et al.'s unbiased estimator) against the
fraction of all k-subsets of the samples that hold a correct one, and the bootstrap interval of
pass@1 against the exact bootstrap distribution (every resample of the prompts enumerated)."""
from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from m1flow.contracts import events
from m1flow.stats import bootstrap_interval, mean_pass_at_k, paired_flip_test, pass_at_k, two_proportion_test
from svc_eval.result import SetRun


def brute_pass_at_k(outcomes: list[bool], k: int) -> float:
    """The definition: k samples drawn without replacement from the n; the chance one is correct."""
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 4, 7, 10])
def test_pass_at_k_is_the_share_of_k_subsets_holding_a_correct_sample(n):
    rng = random.Random(n)
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        rng.shuffle(outcomes)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(outcomes, k), abs=1e-12), (n, c, k)
            assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
    assert pass_at_k(n, 0, 1) == 0.0 and pass_at_k(n, n, 1) == 1.0


def test_pass_at_k_refuses_what_it_cannot_estimate():
    for n, c, k in ((4, 1, 5), (4, 5, 1), (4, 1, 0)):
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_mean_pass_at_k_averages_over_prompts_with_enough_samples():
    assert mean_pass_at_k([4, 4, 2], [1, 0, 2], 4) == pytest.approx((1.0 + 0.0) / 2)  # the n=2 prompt cannot say
    assert mean_pass_at_k([2], [1], 4) is None
    assert mean_pass_at_k([4, 4], [1, 3], 1) == pytest.approx((0.25 + 0.75) / 2)


def exact_bootstrap(rates: list[float], level: float = 0.95) -> tuple[float, float]:
    """Every one of the m**m resamples of m prompts, equally likely: the distribution the Monte Carlo
    bootstrap samples from, and its quantiles by the same rule (linear between order statistics)."""
    m = len(rates)
    means = sorted(sum(rates[i] for i in pick) / m for pick in itertools.product(range(m), repeat=m))
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


@pytest.mark.parametrize("rates", [[0.0, 0.25, 0.5, 1.0, 0.75], [0.0, 0.0, 0.0, 1.0, 0.5, 0.25],
                                   [0.5, 0.5, 0.5, 0.5]])
def test_the_bootstrap_interval_matches_the_exact_bootstrap_distribution(rates):
    exact = exact_bootstrap(rates)
    atom = 1 / (4 * len(rates))  # the means' grid: rates are quarters here
    low, high = bootstrap_interval(rates, resamples=20_000)
    assert abs(low - exact[0]) <= atom + 1e-9 and abs(high - exact[1]) <= atom + 1e-9, (low, high, exact)
    assert low <= float(np.mean(rates)) <= high
    assert bootstrap_interval(rates, resamples=2000) == bootstrap_interval(rates, resamples=2000)  # fixed seed


def test_the_interval_covers_the_true_pass1_about_95_percent_of_the_time():
    """Prompts of varied difficulty (the case a binomial interval over samples gets wrong): over many
    simulated sets, the bootstrap interval holds the population's pass@1 close to 95% of the time."""
    rng = np.random.default_rng(0)
    difficulty = rng.beta(0.5, 0.8, size=100_000)  # the population of prompts' solve rates
    truth = float(difficulty.mean())
    covered, trials = 0, 300
    for t in range(trials):
        rates = rng.binomial(4, rng.choice(difficulty, 60)) / 4  # 60 prompts x 4 samples
        low, high = bootstrap_interval(list(rates), resamples=1000, seed=t)
        covered += low <= truth <= high
    assert 0.90 <= covered / trials <= 0.99, covered / trials


def test_a_set_run_counts_verdicts_and_leaves_infrastructure_failures_out():
    run = SetRun("s", 3, prompts=3, samples=4, ks=[1, 2, 4])
    ok, wrong, infra, partial = (True, False, 1.0), (False, False, 0.0), (None, True, 0.0), (None, False, 0.5)
    run.add(0, [2, 2, 2, 2], [ok, wrong, wrong, wrong])
    run.add(2, [1, 1, 1, 1], [ok, ok, infra, partial])  # n = 2 verdicts, both correct
    assert not run.complete
    run.add(1, [3, 3, 3, 3], [wrong] * 4)
    policy = events.PolicyVersion(version=3, checkpoint_uri="file:///p/v3", sha256="ab")
    result = run.result("r", policy, engine="native", temperature=1.0, top_p=0.95, max_new_tokens=8,
                        trigger="schedule", resamples=500)
    assert list(result.prompt_judged) == [4, 4, 2] and list(result.prompt_correct) == [1, 0, 2]
    assert result.judged == 10 and result.correct == 3 and result.infra_failed == 1
    assert result.pass1 == pytest.approx((0.25 + 0 + 1.0) / 3)
    assert dict(result.pass_at_k) == pytest.approx({1: result.pass1, 2: (pass_at_k(4, 1, 2) + 0 + 1.0) / 3,
                                                    4: (1.0 + 0.0) / 2})
    assert result.pass1_low <= result.pass1 <= result.pass1_high
    assert result.mean_length == pytest.approx((8 + 12 + 4) / 12)
    assert result.header.message_id == "eval:r/s/v3" and result.checkpoint_uri == "file:///p/v3"


def test_the_two_proportion_test_against_a_worked_example_and_its_level_under_the_null():
    # 40/200 -> 70/200: pooled 0.275, se sqrt(0.275 * 0.725 * 2/200) = 0.04465, z = 0.15 / se
    z, p = two_proportion_test(40, 200, 70, 200)
    assert z == pytest.approx(3.3593, abs=1e-3) and p == pytest.approx(math.erfc(3.3593 / math.sqrt(2)), rel=1e-3)
    assert two_proportion_test(70, 200, 40, 200)[0] == pytest.approx(-z)
    assert two_proportion_test(0, 10, 0, 10) == (0.0, 1.0)
    rng = np.random.default_rng(1)  # no change: p < 0.05 about 5% of the time
    rejects = sum(two_proportion_test(int(rng.binomial(200, 0.3)), 200, int(rng.binomial(200, 0.3)), 200)[1] < 0.05
                  for _ in range(2000))
    assert 0.03 < rejects / 2000 < 0.07
    with pytest.raises(ValueError):
        two_proportion_test(0, 0, 1, 2)


def test_the_paired_flip_test_is_exact_on_a_small_case_and_holds_its_level():
    # 4 prompts, all +0.5: of the 16 sign patterns only the 2 all-same reach |mean| 0.5, so p -> 2/16
    assert paired_flip_test([0.5] * 4, resamples=40_000) == pytest.approx(2 / 16, abs=0.01)
    assert paired_flip_test([0.0] * 5) == 1.0
    rng = np.random.default_rng(2)  # per-prompt rates that do not change: rejects at 5% about 5% of the time
    rejects = 0
    for trial in range(300):
        rates = rng.uniform(0, 1, 50)
        a, b = rng.binomial(4, rates) / 4, rng.binomial(4, rates) / 4
        rejects += paired_flip_test(list(b - a), resamples=2000, seed=trial) < 0.05
    assert rejects / 300 < 0.09
    assert paired_flip_test([0.25] * 30 + [0.0] * 20) < 0.001
