"""Position-switched comparison: score from A's point of view, ties on position flips, flip rate."""
import pytest

from svc_reward.genrm import (Comparer, Comparison, FlipTracker, JudgeError, PositionBiasedJudge,
                              QualityJudge, Verdict)

F, T, S = Verdict.FIRST, Verdict.TIE, Verdict.SECOND


class CountingJudge:
    """A real judge wrapped to count the calls it gets."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def judge(self, prompt, first, second):
        self.calls.append((first, second))
        return self.inner.judge(prompt, first, second)


@pytest.mark.parametrize("ab,ba,score,flips", [
    ((F,), (S,), 1.0, 0),    # A wins shown first and shown second
    ((S,), (F,), -1.0, 0),   # B wins both times
    ((F,), (F,), 0.0, 1),    # first-shown always wins: position bias, a tie
    ((S,), (S,), 0.0, 1),    # second-shown always wins
    ((T,), (T,), 0.0, 0),
    ((F,), (T,), 0.5, 0),
    ((T,), (F,), -0.5, 0),
    ((F, F), (S, F), 0.5, 1),  # two blind repeats: one consistent, one flipped
])
def test_score_and_flips(ab, ba, score, flips):
    c = Comparison(ab=ab, ba=ba)
    assert c.score == score and c.flips == flips
    assert c.swapped().score == -score and c.swapped().flips == flips


def test_consistent_judge_gives_plus_one_to_the_better_answer():
    comparer = Comparer(QualityJudge({"good": 2.0, "bad": 1.0}))
    assert comparer.compare("q", "good", "bad").score == 1.0
    assert comparer.compare("q", "bad", "good").score == -1.0
    assert comparer.tracker.rate == 0.0


def test_position_biased_judge_gives_only_ties_and_flip_rate_one():
    tracker = FlipTracker()
    comparer = Comparer(PositionBiasedJudge(), repeats=2, tracker=tracker)
    answers = [f"answer {i}" for i in range(6)]
    scores = [comparer.compare("q", a, b).score for a in answers for b in answers if a < b]
    assert scores == [0.0] * 15
    assert tracker.pairs == 30 and tracker.flips == 30 and tracker.rate == 1.0


def test_both_orders_are_judged_and_remembered():
    judge = CountingJudge(QualityJudge({"x": 1.0, "y": 0.0}))
    comparer = Comparer(judge, repeats=3)
    assert comparer.compare("q", "x", "y").score == 1.0
    assert judge.calls == [("x", "y"), ("y", "x")] * 3
    assert comparer.compare("q", "y", "x").score == -1.0  # from memory, seen from the other side
    assert len(judge.calls) == 6
    assert comparer.compare("other prompt", "x", "y").score == 1.0
    assert len(judge.calls) == 12


def test_identical_answers_tie_without_asking_the_judge():
    judge = CountingJudge(PositionBiasedJudge())
    comparer = Comparer(judge)
    c = comparer.compare("q", "same", "same")
    assert c.score == 0.0 and c.flips == 0 and judge.calls == []
    assert comparer.tracker.pairs == 0


def test_judge_errors_propagate_and_are_returned_in_place_by_compare_many():
    comparer = Comparer(QualityJudge({"a": 1.0, "b": 0.0, "c": 0.5}))
    with pytest.raises(JudgeError):
        comparer.compare("q", "a", "unknown")
    pairs = [("a", "b"), ("a", "unknown"), ("c", "a"), ("b", "c")]
    sequential = comparer.compare_many("q", pairs)
    parallel = Comparer(comparer.judge).compare_many("q", pairs, concurrency=4)
    for outcomes in (sequential, parallel):
        assert isinstance(outcomes[1], JudgeError)
        assert [o.score for i, o in enumerate(outcomes) if i != 1] == [1.0, -1.0, -1.0]
