"""Position-switched pairwise comparison and its flip accounting.

Each pair is judged twice, A shown first (s_AB) and B shown first (s_BA), each verdict on -1/0/+1
from the point of view of the answer shown first. score = (s_AB - s_BA) / 2 is then from A's point
of view: +1 when A wins in both orders, -1 when B does, +-1/2 when one order is a tie. When both
orders prefer whichever answer came first (or both the second), the judge contradicts itself:
the score is 0 and the pair counts as a position flip. The flip rate measures position bias.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

from .judge import Judge, JudgeError
from .prompts import Verdict


@dataclass(frozen=True)
class Comparison:
    """Raw verdicts on one pair: `ab[i]` with A shown first, `ba[i]` with B shown first."""

    ab: tuple[Verdict, ...]
    ba: tuple[Verdict, ...]

    @property
    def score(self) -> float:
        """A's score in [-1, 1], averaged over the blind repeats."""
        return sum(x - y for x, y in zip(self.ab, self.ba)) / (2 * len(self.ab))

    @property
    def flips(self) -> int:
        """Repeats whose two orders disagree in sign (the first-shown answer won both times, or lost both)."""
        return sum(1 for x, y in zip(self.ab, self.ba) if x == y != Verdict.TIE)

    def swapped(self) -> "Comparison":
        """The same judgements seen from B's side."""
        return Comparison(ab=self.ba, ba=self.ab)


class FlipTracker:
    """Counts judged order-pairs and position flips; safe to share between threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pairs = 0
        self.flips = 0

    def add(self, comparison: Comparison) -> None:
        with self._lock:
            self.pairs += len(comparison.ab)
            self.flips += comparison.flips

    @property
    def rate(self) -> float:
        """Share of order-pairs that flipped; 0 before anything was judged."""
        return self.flips / self.pairs if self.pairs else 0.0


class Comparer:
    """Judges pairs in both orders, `repeats` times each, remembering what it already judged."""

    def __init__(self, judge: Judge, repeats: int = 1, tracker: FlipTracker | None = None) -> None:
        self.judge = judge
        self.repeats = repeats
        self.tracker = tracker if tracker is not None else FlipTracker()
        self._seen: dict[tuple[str, str, str], Comparison] = {}
        self._lock = threading.Lock()

    def compare(self, prompt: str, a: str, b: str) -> Comparison:
        """Score A against B; raises JudgeError when any judgement fails."""
        if a == b:  # the same text cannot be better than itself: no judge call, no flip
            ties = (Verdict.TIE,) * self.repeats
            return Comparison(ab=ties, ba=ties)
        with self._lock:
            if (prompt, a, b) in self._seen:
                return self._seen[prompt, a, b]
            if (prompt, b, a) in self._seen:
                return self._seen[prompt, b, a].swapped()
        ab, ba = [], []
        for _ in range(self.repeats):
            ab.append(Verdict(self.judge.judge(prompt, a, b)))
            ba.append(Verdict(self.judge.judge(prompt, b, a)))
        comparison = Comparison(ab=tuple(ab), ba=tuple(ba))
        self.tracker.add(comparison)
        with self._lock:
            self._seen[prompt, a, b] = comparison
        return comparison

    def compare_many(self, prompt: str, pairs: Sequence[tuple[str, str]],
                     concurrency: int = 1) -> list[Comparison | JudgeError]:
        """Compare every pair, in parallel threads when `concurrency` > 1; errors are returned in place."""
        def one(pair: tuple[str, str]) -> Comparison | JudgeError:
            try:
                return self.compare(prompt, *pair)
            except JudgeError as err:
                return err

        if concurrency <= 1 or len(pairs) <= 1:
            return [one(pair) for pair in pairs]
        with ThreadPoolExecutor(max_workers=min(concurrency, len(pairs))) as pool:
            return list(pool.map(one, pairs))
