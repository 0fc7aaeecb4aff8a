"""Word sorting: put made-up words in alphabetical (or reverse) order.

Words are built from syllables so no word list is shipped; higher levels use more words, shared
stems (which make the comparison go deeper) and reverse order.
"""
from __future__ import annotations

import re
from collections import Counter

from m1flow.tasks.logic.base import FormatError, LogicTask

ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr"]
VOWELS = ["a", "e", "i", "o", "u"]
LEVELS = {1: (6, 0.0), 2: (10, 0.3), 3: (16, 0.6)}  # words, share of words reusing a stem


class WordSorting(LogicTask):
    name = "word_sorting"

    def build(self, rng, level):
        count, stem_share = LEVELS[level]
        words: list[str] = []
        while len(words) < count:
            syllables = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(rng.randint(2, 3)))
            word = (rng.choice(words)[:3] + syllables[:4]) if words and rng.random() < stem_share else syllables
            if word not in words:
                words.append(word)
        descending = level >= 2 and rng.random() < 0.5
        order = "reverse alphabetical (Z to A)" if descending else "alphabetical (A to Z)"
        question = (f"Sort these words in {order} order: {', '.join(words)}.\n"
                    "Answer with the sorted words separated by commas.")
        solution = ", ".join(sorted(words, reverse=descending))
        return question, solution, {"words": words, "descending": descending}

    def check(self, meta, answer):
        words = [w.lower() for w in re.split(r"[,\s]+", answer.strip()) if w]
        if not words or not all(w.isalpha() for w in words):
            raise FormatError("answer must be words separated by commas")
        if Counter(words) != Counter(meta["words"]):
            return "the words are not exactly the given ones"
        if words != sorted(words, reverse=meta["descending"]):
            return "the words are out of order"
        return None
