"""Swiss rounds: the known best answer wins, no rematches, byes, Buchholz order, ceil(log2 N) rounds."""
import math
import random

import pytest

from svc_reward.genrm import (Comparer, Match, PositionBiasedJudge, QualityJudge,
                              swiss_rounds, swiss_tournament)
from svc_reward.genrm.swiss import pair_round, standings


def answers_with_hidden_quality(n, seed):
    rng = random.Random(seed)
    quality = {f"answer {i} from seed {seed}": rng.random() for i in range(n)}
    return list(quality), quality


def test_rounds_are_ceil_log2():
    assert [swiss_rounds(n) for n in (1, 2, 3, 4, 5, 8, 9, 16, 17)] == [0, 1, 2, 2, 3, 3, 4, 4, 5]


def test_best_answer_wins_undefeated_among_16():
    candidates, quality = answers_with_hidden_quality(16, seed=1)
    result = swiss_tournament("q", candidates, Comparer(QualityJudge(quality)))
    best = max(range(16), key=lambda i: quality[candidates[i]])
    assert result.rounds == 4
    assert result.winner == best
    assert result.standings[0].points == 4.0
    assert result.standings[1].points < 4.0  # 16 -> 8 -> 4 -> 2 -> 1 undefeated
    assert candidates[result.winner] == max(candidates, key=quality.get)


@pytest.mark.parametrize("n", range(2, 26))
def test_pairing_rules_hold_for_every_size(n):
    candidates, quality = answers_with_hidden_quality(n, seed=n)
    result = swiss_tournament("q", candidates, Comparer(QualityJudge(quality)))
    assert result.rounds == math.ceil(math.log2(n))
    best = max(range(n), key=lambda i: quality[candidates[i]])
    top_points = result.standings[0].points
    assert dict((s.player, s.points) for s in result.standings)[best] == top_points
    games = [frozenset((m.a, m.b)) for m in result.matches if m.b is not None]
    assert len(games) == len(set(games)), "rematch"
    byes = [m.a for m in result.matches if m.b is None]
    assert len(byes) == len(set(byes)), "a second bye"
    for number in range(1, result.rounds + 1):
        round_matches = [m for m in result.matches if m.round == number]
        seated = [p for m in round_matches for p in (m.a, m.b) if p is not None]
        assert sorted(seated) == list(range(n)), "everyone plays exactly once a round"
        bye = [m for m in round_matches if m.b is None]
        assert len(bye) == n % 2
        if bye:
            assert bye[0].score == 1.0 and bye[0].points_a == 1.0
            before = [m for m in result.matches if m.round < number]
            ranked = [s.player for s in standings(n, before)]
            earlier_byes = {m.a for m in before if m.b is None}
            assert bye[0].a == [p for p in ranked if p not in earlier_byes][-1]


def test_greedy_pairing_that_gets_stuck_backtracks():
    # Greedy would pair 0-1 and then face the rematch 2-3.
    pairs, bye = pair_round([0, 1, 2, 3], {frozenset((2, 3))}, set())
    assert (pairs, bye) == ([(0, 2), (1, 3)], None)
    # The lowest-ranked player (2) would take the bye but leave the rematch 0-1; 1 takes it instead.
    pairs, bye = pair_round([0, 1, 2], {frozenset((0, 1))}, set())
    assert (pairs, bye) == ([(0, 2)], 1)
    # The bye skips a player who already had one.
    assert pair_round([0, 1, 2], set(), {2}) == ([(0, 2)], 1)
    assert pair_round([0, 1], {frozenset((0, 1))}, set()) is None


def test_tournament_stops_when_only_rematches_are_left():
    candidates, quality = answers_with_hidden_quality(2, seed=0)
    result = swiss_tournament("q", candidates, Comparer(QualityJudge(quality)), rounds=3)
    assert result.rounds == 1 and len(result.matches) == 1


def test_buchholz_breaks_equal_points_against_seed_order():
    matches = [Match(1, 0, 3, score=1.0), Match(1, 2, 1, score=1.0),
               Match(2, 0, 2, score=1.0), Match(2, 1, 3, score=0.0),
               Match(3, 4, None, score=1.0)]
    table = {s.player: s for s in standings(5, matches)}
    assert [table[p].points for p in range(5)] == [2.0, 0.5, 1.0, 0.5, 1.0]
    assert [table[p].buchholz for p in range(5)] == [1.5, 1.5, 2.5, 2.5, 0.0]
    assert table[4].byes == 1 and table[4].opponents == ()
    assert [s.player for s in standings(5, matches)] == [0, 2, 4, 3, 1]


def test_position_biased_judge_draws_every_game():
    candidates = [f"answer {i}" for i in range(8)]
    result = swiss_tournament("q", candidates, Comparer(PositionBiasedJudge()))
    assert all(m.score == 0.0 for m in result.matches)
    assert {s.points for s in result.standings} == {1.5}


def test_failed_matches_are_draws_and_counted():
    candidates, quality = answers_with_hidden_quality(8, seed=3)
    del quality[candidates[5]]  # the judge cannot rate this one
    result = swiss_tournament("q", candidates, Comparer(QualityJudge(quality)), concurrency=3)
    failed = [m for m in result.matches if m.error]
    assert len(failed) == 3 and all(5 in (m.a, m.b) and m.score == 0.0 for m in failed)
    assert result.error_rate == 3 / 12
    assert all(isinstance(c.score, float) for c in result.comparisons.values())
    assert not any(5 in pair for pair in result.comparisons)
