"""Dyck language completion: close every open bracket of a prefix, in the right order."""
from __future__ import annotations

from m1flow.tasks.logic.base import FormatError, LogicTask

PAIRS = {"(": ")", "[": "]", "{": "}", "<": ">"}
CLOSERS = {v: k for k, v in PAIRS.items()}
LEVELS = {1: (4, 2), 2: (8, 3), 3: (14, 4)}  # pairs in the full sequence, bracket kinds


def unclosed(sequence: list[str]) -> list[str] | None:
    """The stack of still-open brackets, or None when a closer does not match."""
    stack: list[str] = []
    for token in sequence:
        if token in PAIRS:
            stack.append(token)
        elif not stack or stack.pop() != CLOSERS[token]:
            return None
    return stack


class Dyck(LogicTask):
    name = "dyck"

    def build(self, rng, level):
        pairs, kinds = LEVELS[level]
        openers = list(PAIRS)[:kinds]
        sequence, stack, opened = [], [], 0
        while opened < pairs or stack:
            if opened < pairs and (not stack or rng.random() < 0.55):
                stack.append(rng.choice(openers))
                sequence.append(stack[-1])
                opened += 1
            else:
                sequence.append(PAIRS[stack.pop()])
        depth, cuts = 0, []
        for i, token in enumerate(sequence):
            depth += 1 if token in PAIRS else -1
            if depth > 0:
                cuts.append(i + 1)
        cut = rng.choice(cuts[len(cuts) // 2:])
        prefix = sequence[:cut]
        completion = [PAIRS[t] for t in reversed(unclosed(prefix))]
        question = ("Complete the bracket sequence by adding only closing brackets so that every bracket "
                    f"is matched and properly nested:\n{' '.join(prefix)}\n\n"
                    "Answer with the closing brackets to append, separated by spaces.")
        return question, " ".join(completion), {"prefix": prefix}

    def check(self, meta, answer):
        prefix = meta["prefix"]
        tokens = [ch for ch in answer if not ch.isspace()]
        if not tokens or any(t not in PAIRS and t not in CLOSERS for t in tokens):
            raise FormatError("answer must be brackets only")
        if len(tokens) > len(prefix) and tokens[:len(prefix)] == prefix:
            tokens = tokens[len(prefix):]  # the whole sequence was written out
        if any(t in PAIRS for t in tokens):
            return "only closing brackets may be added"
        stack = unclosed(prefix + tokens)
        if stack is None:
            return "a closing bracket does not match"
        return f"{len(stack)} brackets left open" if stack else None
