"""Judges whose preferences are known exactly: for tests, CPU demos and bias probes.

They are real judges (they implement `Judge`), so the pairwise, tournament and calibration code
run against them unchanged, and the answer each of those should produce can be derived by hand.
"""
from __future__ import annotations

import itertools
from typing import Callable, Mapping

from .judge import JudgeError
from .prompts import Verdict


class QualityJudge:
    """Prefers the answer with the higher hidden value: quality + length_bonus * len(answer).

    Answers whose values differ by at most `margin` tie. An answer missing from a quality table
    is a JudgeError, the same as a judge that could not read it. With `bonus_after`, the length
    bonus starts only after that many judgements: a judge that turns length-biased mid-run.
    """

    def __init__(self, quality: Mapping[str, float] | Callable[[str], float],
                 length_bonus: float = 0.0, margin: float = 0.0, bonus_after: int = 0) -> None:
        self.quality = quality
        self.length_bonus = length_bonus
        self.margin = margin
        self.bonus_after = bonus_after
        self.judgements = itertools.count()  # next() is atomic: scoring threads share the judge

    def value(self, answer: str, length_bonus: float | None = None) -> float:
        if callable(self.quality):
            base = self.quality(answer)
        elif answer in self.quality:
            base = self.quality[answer]
        else:
            raise JudgeError(f"no hidden quality for answer {answer[:40]!r}")
        return base + (self.length_bonus if length_bonus is None else length_bonus) * len(answer)

    def judge(self, prompt: str, first: str, second: str) -> Verdict:
        bonus = self.length_bonus if next(self.judgements) >= self.bonus_after else 0.0
        diff = self.prompted_value(prompt, first, bonus) - self.prompted_value(prompt, second, bonus)
        if diff > self.margin:
            return Verdict.FIRST
        if diff < -self.margin:
            return Verdict.SECOND
        return Verdict.TIE

    def prompted_value(self, prompt: str, answer: str, length_bonus: float) -> float:
        """The value an answer to `prompt` is compared by; this judge's quality ignores the prompt."""
        return self.value(answer, length_bonus)


class InstructionJudge(QualityJudge):
    """The quality judge of instructions whose hidden quality reads the prompt, e.g. the general tasks'
    (m1flow.tasks.general.quality): value = quality(prompt, answer) + length_bonus * len(answer)."""

    def __init__(self, quality: Callable[[str, str], float], length_bonus: float = 0.0, margin: float = 0.0,
                 bonus_after: int = 0) -> None:
        super().__init__(lambda _: 0.0, length_bonus, margin, bonus_after)
        self.instruction_quality = quality

    def prompted_value(self, prompt: str, answer: str, length_bonus: float) -> float:
        try:
            base = self.instruction_quality(prompt, answer)
        except ValueError as err:  # not an instruction this quality can read
            raise JudgeError(str(err)) from err
        return base + length_bonus * len(answer)


class LengthLovingJudge(QualityJudge):
    """Prefers the longer answer; with a quality table, quality still counts but length adds to it."""

    def __init__(self, quality: Mapping[str, float] | Callable[[str], float] = lambda _: 0.0,
                 length_bonus: float = 1.0, margin: float = 0.0) -> None:
        super().__init__(quality, length_bonus, margin)


class PositionBiasedJudge:
    """Always prefers the answer shown first, whatever it says."""

    def judge(self, prompt: str, first: str, second: str) -> Verdict:
        return Verdict.FIRST


def distinct_word_share(text: str) -> float:
    """Share of distinct words: the quality judge's hidden value, low for repetitive rambling."""
    words = text.lower().split()
    return len(set(words)) / len(words) if words else 0.0
