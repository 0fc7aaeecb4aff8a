"""Cryptarithm: letters stand for distinct digits and the sum of the words must hold.

Built from a real sum of random numbers, so one solution always exists; the verifier checks the
assignment (distinct digits, no leading zero, the sum) and so accepts every other solution too.
"""
from __future__ import annotations

import re

from m1flow.tasks.logic.base import FormatError, LogicTask

LEVELS = {1: (2, 3), 2: (2, 4), 3: (3, 4)}  # addends, digits per addend
_PAIR = re.compile(r"([A-Za-z])\s*[=:]\s*(\d+)")


def word_value(word: str, digits: dict[str, int]) -> int:
    value = 0
    for letter in word:
        value = value * 10 + digits[letter]
    return value


def parse_assignment(answer: str, letters: set[str]) -> dict[str, int]:
    """'A=1, B=2' -> {'A': 1, 'B': 2}; every letter of the puzzle once, nothing else."""
    pairs = _PAIR.findall(answer)
    leftover = _PAIR.sub("", answer)
    if re.search(r"[A-Za-z0-9]", leftover):
        raise FormatError("answer must be a list of LETTER=DIGIT pairs")
    digits: dict[str, int] = {}
    for letter, digit in pairs:
        letter = letter.upper()
        if letter in digits or letter not in letters or len(digit) != 1:
            raise FormatError(f"bad or repeated assignment {letter}={digit}")
        digits[letter] = int(digit)
    if set(digits) != letters:
        raise FormatError(f"letters without a digit: {''.join(sorted(letters - set(digits)))}")
    return digits


class Cryptarithm(LogicTask):
    name = "cryptarithm"

    def build(self, rng, level):
        addends, width = LEVELS[level]
        cipher = dict(zip("0123456789", rng.sample("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 10)))
        numbers = [rng.randint(10 ** (width - 1), 10 ** width - 1) for _ in range(addends)]
        words = ["".join(cipher[d] for d in str(n)) for n in numbers + [sum(numbers)]]
        equation = " + ".join(words[:-1]) + " = " + words[-1]
        used = sorted(set("".join(words)))
        solution = ", ".join(f"{cipher[d]}={d}" for d in sorted(cipher) if cipher[d] in used)
        question = (f"Solve the cryptarithm {equation}. Each letter stands for a different digit and no "
                    f"number starts with 0. Answer with every letter's digit, e.g. A=1, B=2.")
        return question, solution, {"words": words}

    def check(self, meta, answer):
        words = meta["words"]
        digits = parse_assignment(answer, set("".join(words)))
        if len(set(digits.values())) != len(digits):
            return "two letters share a digit"
        for word in words:
            if len(word) > 1 and digits[word[0]] == 0:
                return f"{word} starts with 0"
        total = sum(word_value(w, digits) for w in words[:-1])
        if total != word_value(words[-1], digits):
            return f"the sum is {total}, not {word_value(words[-1], digits)}"
        return None
