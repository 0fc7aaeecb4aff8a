"""The length-bias rule on a stream scored by svc_reward's GenRM scorer with a judge that has no length
preference: how often a window reads as biased (the false-trigger rate), and that it never asks for a
recalibration. Measured: 1 biased window in 300 of 12 groups, 0 in 300 of 16 (the default); no command.
And with a judge that buys length outright, how soon the rule asks."""
import random

from svc_monitor.config import LengthBiasConfig
from svc_monitor.rules.length_bias import LengthBiasRule
from svc_monitor.schema import GenRMSampleRow
from svc_reward.genrm import GenRMScorer, QualityJudge, distinct_word_share

from tests.reward.genrm_stream import answer, general_group, length_loving_judge


def test_a_fair_judge_is_never_recalibrated():
    rng, windows, groups = random.Random(0), 120, 12
    scorer = GenRMScorer(QualityJudge(distinct_word_share, margin=0.05))
    rule = LengthBiasRule(LengthBiasConfig(window_groups=groups))
    biased, commands = 0, []
    for w in range(windows):
        rows = []
        for g in range(groups):
            answers = [answer(rng) for _ in range(8)]
            rows += [GenRMSampleRow(group_id=f"{w}-{g}", policy_version=w, score=r.reward, length=len(a.split()),
                                    correct=None, ts_ms=0)
                     for a, r in zip(answers, scorer.score_group(f"prompt {w}-{g}", answers).results)]
        out = rule.evaluate(rows)
        biased += sum(s.value for s in out.signals if s.name == "genrm/biased_window")
        commands += out.commands
    assert commands == [] and rule.state.recalibrations == 0
    assert biased / windows <= 0.02, biased  # false-trigger rate per window


def test_a_length_loving_judge_is_recalibrated_within_the_configured_windows():
    """The broker loop's judge (tests/integration/test_genrm_loop.py: 0.05 a character against a quality in
    [0, 1]) on general tasks answered in 2-12 words, from its first window: in every one of 10 streams the
    rule asks after exactly `consecutive` windows. Measured: 120 of 120 windows biased (20 streams of 6)."""
    cfg = LengthBiasConfig()
    for seed in range(10):
        rng = random.Random(seed)
        scorer = GenRMScorer(length_loving_judge())
        rule = LengthBiasRule(cfg)
        for w in range(cfg.consecutive):
            rows = []
            for g in range(cfg.window_groups):
                prompt, answers = general_group(rng)
                rows += [GenRMSampleRow(group_id=f"{w}-{g}", policy_version=w, score=r.reward,
                                        length=len(a.split()), correct=None, ts_ms=0)
                         for a, r in zip(answers, scorer.score_group(prompt, answers).results)]
            out = rule.evaluate(rows)
            assert [s.value for s in out.signals if s.name == "genrm/biased_window"] == [1.0], (seed, w, out.signals)
            assert len(out.commands) == (w == cfg.consecutive - 1), (seed, w, out.commands)
