"""The GenRM loop against a policy that learns from its rewards: svc_reward's scorer and recalibration,
svc_monitor's length-bias rule deciding when, and a policy that buys length whenever the rewards pay
for it (tests/reward/genrm_stream.py's LengthPolicy, one update per window of 16 groups).

The judge is fair for the first windows, then pays 0.05 per character (as `m1flow demo --genrm`'s judge
turns). What must hold: no recalibration while it is fair; the bias detected within a few windows of
appearing; after the first recalibration the rule's length correlation is within 0.1 of zero on average
and the answers stop growing, while without recalibration they grow to the longest the policy can
write. The demo's run 3 is the case this guards: a fit that left part of the preference, a policy that
climbed it (11.8 -> 14.6 tokens) and three more recalibrations.

Measured on seeds 0-2 with the fit as it was before (b1 on the verdicts against references only, every
recalibration refitted on raw verdicts): seed 1's recalibration was skipped, all 256 verdicts being
losses to the length-loving reference, and its answers grew from 12.2 to 32.8 words (correlation after
+0.22); seed 0's fit found b1 0.74 and needed a second. With b1 from the Swiss games and later
recalibrations compounding: b1 5.7 / 5.4 / 4.9, correlation after -0.01 / +0.00 / -0.01, at most
1.8 words of growth.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import pytest

from m1flow.tasks.general import make_instruction, quality
from svc_monitor.config import LengthBiasConfig
from svc_monitor.rules.length_bias import LengthBiasRule
from svc_monitor.schema import GenRMSampleRow
from svc_reward.genrm import CalibrationConfig, GenRMConfig, GenRMScorer, InstructionJudge

from tests.reward.genrm_stream import LengthPolicy

FAIR_WINDOWS, WINDOWS, BONUS = 6, 60, 0.05


@dataclass
class Episode:
    corr: list[float] = field(default_factory=list)  # the rule's genrm/length_corr per window
    words: list[float] = field(default_factory=list)  # mean answer length per window
    recalibrated_at: list[int] = field(default_factory=list)
    fits: list = field(default_factory=list)  # LengthCoefficients of each recalibration, or why it was skipped


def episode(seed: int, recalibrate: bool = True, fair_windows: int = FAIR_WINDOWS, windows: int = WINDOWS,
            **calibration) -> Episode:
    """`windows` windows of 16 groups of 8 answers; the judge pays for length from `fair_windows` on."""
    rng, policy = random.Random(seed), LengthPolicy(seed)
    judge = InstructionJudge(quality, 0.0, margin=0.05)
    scorer = GenRMScorer(judge, GenRMConfig(history=256), CalibrationConfig(**calibration))
    rule, out = LengthBiasRule(LengthBiasConfig(enabled=recalibrate)), Episode()
    for window in range(windows):
        judge.length_bonus = BONUS if window >= fair_windows else 0.0
        rows = []
        for g in range(rule.cfg.window_groups):
            prompt = make_instruction(rng)
            ks, answers = policy.group(prompt)
            rewards = [r.reward for r in scorer.score_group(f"{prompt} ({window}.{g})", answers).results]
            policy.observe(ks, rewards)
            rows += [GenRMSampleRow(group_id=f"{window}.{g}", policy_version=window, score=r,
                                    length=len(a.split()), correct=None, ts_ms=0) for r, a in zip(rewards, answers)]
        policy.update()
        outcome = rule.evaluate(rows)
        signals = {s.name: s.value for s in outcome.signals}
        out.corr.append(signals.get("genrm/length_corr", 0.0))
        out.words.append(float(np.mean([r.length for r in rows])))
        if any(c.command == "recalibrate" for c in outcome.commands):
            try:
                out.fits.append(scorer.recalibrate())
            except ValueError as exc:  # svc_reward skips it the same way (too few or uniform verdicts)
                out.fits.append(exc)
            out.recalibrated_at.append(window)
    return out


def moving_mean(values: list[float], n: int = 5) -> list[float]:
    return [float(np.mean(values[i:i + n])) for i in range(len(values) - n + 1)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_bias_is_detected_removed_and_stays_removed_while_the_policy_adapts(seed):
    run = episode(seed)
    first = run.recalibrated_at[0]
    assert FAIR_WINDOWS <= first <= FAIR_WINDOWS + 3, run.recalibrated_at  # not while fair; within 3 windows
    after = run.corr[first + 2:]  # the cool-down window holds groups scored before the fit
    assert abs(np.mean(after)) < 0.1, (np.mean(after), run.fits)
    grown = max(moving_mean(run.words[first + 1:])) - run.words[first]
    assert grown < 3.0, (run.words, run.fits)  # the answers stop growing (words per answer)
    assert len(run.recalibrated_at) <= 3, (run.recalibrated_at, run.fits)


def test_without_recalibration_the_policy_buys_length():
    run = episode(0, recalibrate=False)
    assert np.mean(run.corr[FAIR_WINDOWS:FAIR_WINDOWS + 10]) > 0.3 and run.words[-1] > 25.0, (run.corr, run.words)


def test_a_fair_judge_is_never_recalibrated():
    run = episode(0, fair_windows=30, windows=30)
    assert run.recalibrated_at == [] and abs(np.mean(run.corr)) < 0.3, run.corr
