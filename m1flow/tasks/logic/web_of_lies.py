"""Web of lies: each person says whether another tells the truth; decide who is truthful.

The verifier derives everyone's truthfulness from the stated fact and the statements (each person
speaks only about someone earlier in the chain), then checks the answers for the people asked.
"""
from __future__ import annotations

import re

from m1flow.tasks.logic.base import FormatError, LogicTask
from m1flow.tasks.logic.boolean_expr import TRUTH_WORDS

NAMES = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory",
         "Niaj", "Olivia", "Peggy", "Rupert", "Sybil"]
LEVELS = {1: (4, 1), 2: (6, 2), 3: (9, 3)}  # people, people asked about


def derive(meta: dict) -> list[bool]:
    """Everyone's truthfulness, from the fact about the first person and the statements in order."""
    truthful = [bool(meta["first_truthful"])]
    for speaker, subject, claims_truthful in meta["statements"]:
        assert speaker == len(truthful) and subject < speaker, "statements must run down the chain"
        truthful.append(truthful[subject] == claims_truthful)
    return truthful


class WebOfLies(LogicTask):
    name = "web_of_lies"

    def build(self, rng, level):
        people, asked_count = LEVELS[level]
        names = rng.sample(NAMES, people)
        truthful = [rng.random() < 0.5 for _ in names]
        statements, lines = [], [f"{names[0]} {'tells the truth' if truthful[0] else 'lies'}."]
        for speaker in range(1, people):
            subject = speaker - 1 if level == 1 or rng.random() < 0.6 else rng.randrange(speaker)
            claims = truthful[subject] == truthful[speaker]
            statements.append([speaker, subject, claims])
            lines.append(f"{names[speaker]} says {names[subject]} {'tells the truth' if claims else 'lies'}.")
        asked = sorted(rng.sample(range(1, people), asked_count))
        who = ", ".join(names[i] for i in asked)
        question = (" ".join(lines) + f"\nDoes each of these people tell the truth: {who}?\n"
                    "Answer yes or no for each, in that order, separated by commas.")
        solution = ", ".join("yes" if truthful[i] else "no" for i in asked)
        return question, solution, {"names": names, "first_truthful": truthful[0],
                                    "statements": statements, "asked": asked}

    def check(self, meta, answer):
        words = [w for w in re.split(r"[,\s]+", answer.strip().lower().rstrip(".")) if w]
        if len(words) != len(meta["asked"]) or any(w not in TRUTH_WORDS for w in words):
            raise FormatError(f"answer must be {len(meta['asked'])} yes/no words")
        truthful = derive(meta)
        for word, person in zip(words, meta["asked"]):
            if TRUTH_WORDS[word] != truthful[person]:
                return f"wrong about {meta['names'][person]}"
        return None
