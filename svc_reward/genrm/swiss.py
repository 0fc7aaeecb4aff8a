"""Swiss-round tournament that picks a reference answer among N candidates.

Why Swiss: a round-robin costs N(N-1)/2 judged pairs, a Swiss system about N/2 * log2 N, and
after ceil(log2 N) rounds with a consistent judge exactly one undefeated player is left when N is
a power of two. Rules: players are ranked by points (then Buchholz, then seed order) and paired
top-down without rematches, backtracking when greedy pairing gets stuck; with an odd count the
lowest-ranked player who has not had a bye gets one, which scores a win. A match gives A
(1 + score) / 2 points and B the rest, so a tie or a position flip is a draw. A match the judge
failed is a draw too, and is counted, so the caller can refuse a reference built on failures.
Final standings break equal points by Buchholz: the sum of the opponents' final points.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from .judge import JudgeError
from .pairwise import Comparer, Comparison

Pair = tuple[int, int]
PlayRound = Callable[[list[Pair]], list["Comparison | JudgeError"]]


@dataclass(frozen=True)
class Match:
    round: int
    a: int
    b: int | None  # None: a bye for `a`
    score: float  # A's score in [-1, 1]; a bye is a win (+1)
    error: str = ""

    @property
    def points_a(self) -> float:
        return (1.0 + self.score) / 2

    @property
    def points_b(self) -> float:
        return (1.0 - self.score) / 2


@dataclass(frozen=True)
class Standing:
    player: int
    points: float
    buchholz: float
    opponents: tuple[int, ...]
    byes: int


@dataclass(frozen=True)
class TournamentResult:
    standings: list[Standing]  # best first
    matches: list[Match]
    rounds: int  # rounds actually played
    comparisons: dict[Pair, Comparison]  # judged pairs, keyed (a, b) as played

    @property
    def winner(self) -> int:
        return self.standings[0].player

    @property
    def error_rate(self) -> float:
        """Share of played (non-bye) matches the judge failed."""
        played = [m for m in self.matches if m.b is not None]
        return sum(1 for m in played if m.error) / len(played) if played else 0.0


def swiss_rounds(n: int) -> int:
    """ceil(log2 n) rounds: enough for a single undefeated player among n."""
    return math.ceil(math.log2(n)) if n > 1 else 0


def standings(n: int, matches: Sequence[Match]) -> list[Standing]:
    """Rank players 0..n-1 by points, then Buchholz (opponents' points; byes add none), then seed."""
    points = [0.0] * n
    opponents: list[list[int]] = [[] for _ in range(n)]
    byes = [0] * n
    for m in matches:
        points[m.a] += m.points_a
        if m.b is None:
            byes[m.a] += 1
        else:
            points[m.b] += m.points_b
            opponents[m.a].append(m.b)
            opponents[m.b].append(m.a)
    table = [Standing(p, points[p], sum(points[o] for o in opponents[p]), tuple(opponents[p]), byes[p])
             for p in range(n)]
    return sorted(table, key=lambda s: (-s.points, -s.buchholz, s.player))


def pair_round(ranked: Sequence[int], played: set[frozenset[int]],
               had_bye: set[int]) -> tuple[list[Pair], int | None] | None:
    """Pairs for one round and the bye (if the count is odd), or None when no rematch-free pairing exists.

    The bye goes to the lowest-ranked player without a previous bye; if the others cannot then be
    paired, the next candidate up gets it instead.
    """
    ranked = list(ranked)
    budget = [_SEARCH_BUDGET]
    if len(ranked) % 2 == 0:
        pairs = _pair(ranked, played, budget)
        return (pairs, None) if pairs is not None else None
    for bye in reversed(ranked):
        if bye in had_bye:
            continue
        pairs = _pair([p for p in ranked if p != bye], played, budget)
        if pairs is not None:
            return pairs, bye
    return None


_SEARCH_BUDGET = 100_000  # pairing attempts per round before giving up; far above what N <= 1000 needs


def _pair(ranked: list[int], played: set[frozenset[int]], budget: list[int]) -> list[Pair] | None:
    """Pair the top player with the nearest-ranked new opponent, backtracking when the rest cannot pair."""
    if not ranked:
        return []
    top, rest = ranked[0], ranked[1:]
    for i, opponent in enumerate(rest):
        if frozenset((top, opponent)) in played:
            continue
        budget[0] -= 1
        if budget[0] < 0:
            return None
        tail = _pair(rest[:i] + rest[i + 1:], played, budget)
        if tail is not None:
            return [(top, opponent)] + tail
    return None


def run_swiss(n: int, play_round: PlayRound, rounds: int | None = None) -> TournamentResult:
    """Play a Swiss tournament among players 0..n-1, judging each round's pairs with `play_round`.

    Stops early, with the rounds played so far, when no rematch-free pairing is left.
    """
    rounds = swiss_rounds(n) if rounds is None else rounds
    matches: list[Match] = []
    comparisons: dict[Pair, Comparison] = {}
    played: set[frozenset[int]] = set()
    had_bye: set[int] = set()
    done = 0
    for number in range(1, rounds + 1):
        ranked = [s.player for s in standings(n, matches)]
        pairing = pair_round(ranked, played, had_bye)
        if pairing is None:
            break
        pairs, bye = pairing
        for pair, outcome in zip(pairs, play_round(pairs)):
            played.add(frozenset(pair))
            if isinstance(outcome, JudgeError):
                matches.append(Match(number, *pair, score=0.0, error=str(outcome)[:200]))
            else:
                comparisons[pair] = outcome
                matches.append(Match(number, *pair, score=outcome.score))
        if bye is not None:
            had_bye.add(bye)
            matches.append(Match(number, bye, None, score=1.0))
        done = number
    return TournamentResult(standings(n, matches), matches, done, comparisons)


def swiss_tournament(prompt: str, candidates: Sequence[str], comparer: Comparer,
                     rounds: int | None = None, concurrency: int = 1) -> TournamentResult:
    """Rank candidate answers to `prompt`; `result.winner` indexes the reference answer."""
    def play_round(pairs: list[Pair]) -> list[Comparison | JudgeError]:
        texts = [(candidates[a], candidates[b]) for a, b in pairs]
        return comparer.compare_many(prompt, texts, concurrency)

    return run_swiss(len(candidates), play_round, rounds)
