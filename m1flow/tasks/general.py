"""Generated general tasks without ground truth: short instructions whose better answers a hidden
quality function knows, for the GenRM side of the curriculum (the report's open tasks, judged pairwise).

An instruction asks for a few sentences on a topic and names the words it should mention:
"Write a few sentences about rivers. Mention: water, bank, flow." Nothing checks it offline (its
verifier is `genrm`); `quality` is the hidden value a known-preference judge compares answers by
(svc_reward.genrm.heuristic.InstructionJudge): the share of the named words the answer mentions, times
the share of its words that are distinct, so covering the instruction helps and padding with repeats
hurts, and length by itself buys nothing. `quality` reads the words from the instruction text, so the
judge needs no table: any prompt rendering that keeps the "Mention:" line works.

Level L names L + 2 words (level 1: three, the default).
"""
from __future__ import annotations

import random
import re

TOPICS = {
    "rivers": ["water", "bank", "flow", "delta", "fish", "bridge", "flood", "stone"],
    "cities": ["street", "market", "tower", "bus", "park", "crowd", "light", "square"],
    "forests": ["tree", "leaf", "moss", "owl", "path", "shade", "root", "deer"],
    "kitchens": ["knife", "bread", "oven", "salt", "spoon", "steam", "table", "onion"],
    "oceans": ["wave", "salt", "whale", "tide", "shell", "storm", "ship", "coral"],
    "mountains": ["peak", "snow", "rock", "goat", "trail", "cloud", "cliff", "pine"],
}
FILLER = ("the a and of is very quite there with many some near it was one two old new long short big small "
          "good bad early late here when where then also often rarely always never every each other most "
          "few more less still just even far close high low warm cold").split()
_MENTION = re.compile(r"Mention:\s*([a-z ,]+)\.")


def make_instruction(rng: random.Random, level: int = 1) -> str:
    """One instruction; `level` + 2 words to mention (at most the topic's eight)."""
    if level < 0:
        raise ValueError(f"level must be >= 0, got {level}")
    topic = rng.choice(sorted(TOPICS))
    words = rng.sample(TOPICS[topic], min(level + 2, len(TOPICS[topic])))
    return f"Write a few sentences about {topic}. Mention: {', '.join(words)}."


def required_words(instruction: str) -> list[str]:
    """The words an instruction asks to mention; ValueError when it has no "Mention:" line."""
    match = _MENTION.search(instruction)
    if match is None:
        raise ValueError(f"not a general-task instruction (no 'Mention: ...' line): {instruction[:80]!r}")
    return [w.strip() for w in match.group(1).split(",") if w.strip()]


def quality(instruction: str, answer: str) -> float:
    """The hidden value in [0, 1]: named words covered times distinct-word share."""
    words = re.findall(r"[a-z]+", answer.lower())
    if not words:
        return 0.0
    wanted = required_words(instruction)
    covered = len(set(wanted) & set(words)) / len(wanted)
    return covered * len(set(words)) / len(words)


def sample_answer(rng: random.Random, instruction: str, min_words: int = 10, max_words: int = 40) -> str:
    """An answer a policy might write, for simulations and benches: a length drawn independently of
    how many named words it covers and how much it repeats itself."""
    wanted = required_words(instruction)
    n = rng.randint(min_words, max_words)
    mentioned = rng.sample(wanted, rng.randint(0, len(wanted)))
    distinct = max(1, len(mentioned), round(n * rng.uniform(0.3, 1.0)))
    vocabulary = mentioned + rng.sample(FILLER, min(len(FILLER), distinct - len(mentioned)))
    words = vocabulary + [rng.choice(vocabulary) for _ in range(max(0, n - len(vocabulary)))]
    rng.shuffle(words)
    return " ".join(words)
