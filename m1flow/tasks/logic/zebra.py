"""Zebra (Einstein) puzzles: houses in a row, one value of each attribute per house, and clues.

The generator draws a solution, then adds true clues until a small solver finds exactly one
solution, so every puzzle is solvable and unique. The verifier reads the answer table and checks
every clue (plus one value of each attribute per house), not the stored table.
"""
from __future__ import annotations

import random
import re
from itertools import permutations

from m1flow.tasks.logic.base import FormatError, LogicTask

ATTRIBUTES = {
    "color": ["red", "green", "blue", "yellow", "white"],
    "pet": ["dog", "cat", "bird", "fish", "horse"],
    "drink": ["tea", "coffee", "milk", "juice", "water"],
    "job": ["doctor", "teacher", "painter", "pilot", "chef"],
}
PHRASE = {"color": "the {} house", "pet": "the {} owner", "drink": "the {} drinker", "job": "the {}"}
LEVELS = {1: (3, 2), 2: (4, 3), 3: (5, 3)}  # houses, attributes
_HOUSE_LINE = re.compile(r"house\s*(\d+)\s*[:\-–]\s*(.*)", re.IGNORECASE)


def holds(clue: list, pos: dict[str, int]) -> bool:
    kind, a, b = clue
    if kind == "at":
        return pos[a] == b
    if kind == "not_at":
        return pos[a] != b
    if kind == "same":
        return pos[a] == pos[b]
    if kind == "not_same":
        return pos[a] != pos[b]
    if kind == "left_of":
        return pos[a] + 1 == pos[b]
    if kind == "next_to":
        return abs(pos[a] - pos[b]) == 1
    if kind == "before":
        return pos[a] < pos[b]
    raise ValueError(f"unknown clue kind {kind!r}")


def _values_of(clue: list) -> set[str]:
    return {clue[1]} | ({clue[2]} if isinstance(clue[2], str) else set())


def count_solutions(attrs: dict[str, list[str]], houses: int, clues: list[list], limit: int = 2) -> int:
    """Solutions up to `limit`: one attribute at a time, each drawing from the orders its one-value
    clues allow (most constrained first), checking the other clues as soon as their values are placed."""
    unary = [c for c in clues if not isinstance(c[2], str)]
    options = {}
    for name, values in attrs.items():
        mine = [c for c in unary if c[1] in values]
        options[name] = [order for order in permutations(range(houses))
                         if all(holds(c, dict(zip(values, order))) for c in mine)]
    names = sorted(attrs, key=lambda name: len(options[name]))
    binary = [c for c in clues if isinstance(c[2], str)]
    placed: set[str] = set()
    ready = []
    for name in names:
        placed |= set(attrs[name])
        ready.append([c for c in binary if _values_of(c) <= placed and c not in sum(ready, [])])
    pos: dict[str, int] = {}

    def search(level: int) -> int:
        if level == len(names):
            return 1
        found = 0
        for order in options[names[level]]:
            pos.update(zip(attrs[names[level]], order))
            if all(holds(c, pos) for c in ready[level]):
                found += search(level + 1)
                if found >= limit:
                    return found
        return found

    return search(0)


def random_clue(rng: random.Random, pos: dict[str, int], houses: int) -> list:
    """A clue that is true of the solution `pos`."""
    a, b = rng.sample(sorted(pos), 2)
    kind = rng.choice(["at", "not_at", "same", "not_same", "left_of", "next_to", "before"])
    if kind == "at":
        return ["at", a, pos[a]]
    if kind == "not_at":
        return ["not_at", a, rng.choice([h for h in range(houses) if h != pos[a]])]
    if pos[a] > pos[b]:
        a, b = b, a
    gap = pos[b] - pos[a]
    if gap == 0:
        return ["same", a, b]
    if kind in ("same", "not_same"):
        return ["not_same", a, b]
    if kind == "left_of" and gap == 1:
        return ["left_of", a, b]
    if kind == "next_to" and gap == 1:
        return ["next_to", a, b] if rng.random() < 0.5 else ["next_to", b, a]
    return ["before", a, b]


def describe(clue: list, owner: dict[str, str]) -> str:
    """The clue in English; owner maps each value to its attribute."""
    kind, a, b = clue
    pa = PHRASE[owner[a]].format(a)
    if kind in ("at", "not_at"):
        text = f"{pa} is {'' if kind == 'at' else 'not '}in house {b + 1}"
    else:
        pb = PHRASE[owner[b]].format(b)
        text = {"same": f"{pa} and {pb} are in the same house",
                "not_same": f"{pa} and {pb} are in different houses",
                "left_of": f"{pa} is directly left of {pb}",
                "next_to": f"{pa} is next to {pb}",
                "before": f"{pa} is somewhere left of {pb}"}[kind]
    return text[0].upper() + text[1:] + "."


def attribute_of(attrs: dict[str, list[str]]) -> dict[str, str]:
    return {v: name for name, values in attrs.items() for v in values}


def parse_table(answer: str, attrs: dict[str, list[str]], houses: int) -> dict[str, int]:
    """'House 1: red, dog' lines -> value -> house (0-based); each house and value exactly once."""
    owner = attribute_of(attrs)
    pos: dict[str, int] = {}
    seen_houses = set()
    for line in answer.splitlines():
        match = _HOUSE_LINE.search(line)
        if not match:
            continue
        house = int(match.group(1)) - 1
        values = [v.strip().lower().rstrip(".") for v in re.split(r"[,;/]", match.group(2)) if v.strip()]
        if not 0 <= house < houses or house in seen_houses:
            raise FormatError(f"bad or repeated house {house + 1}")
        seen_houses.add(house)
        if sorted(owner.get(v, "?") for v in values) != sorted(attrs):
            raise FormatError(f"house {house + 1} needs one value of each of {', '.join(attrs)}")
        for v in values:
            if v in pos:
                raise FormatError(f"{v} placed twice")
            pos[v] = house
    if len(seen_houses) != houses:
        raise FormatError(f"expected lines 'House 1: ...' for all {houses} houses")
    return pos


class Zebra(LogicTask):
    name = "zebra"

    def build(self, rng, level):
        houses, count = LEVELS[level]
        names = rng.sample(sorted(ATTRIBUTES), count)
        attrs = {name: rng.sample(ATTRIBUTES[name], houses) for name in names}
        pos = {v: h for values in attrs.values() for v, h in zip(values, rng.sample(range(houses), houses))}
        clues: list[list] = []
        while not clues or count_solutions(attrs, houses, clues) > 1:
            for _ in range(houses - 1):  # a few clues per solver call; pruning removes the excess
                clue = random_clue(rng, pos, houses)
                if clue not in clues:
                    clues.append(clue)
        for clue in list(clues):  # drop clues the others already imply
            rest = [c for c in clues if c is not clue]
            if count_solutions(attrs, houses, rest) == 1:
                clues = rest
        owner = attribute_of(attrs)
        listing = "\n".join(f"- {name}: {', '.join(sorted(values))}" for name, values in attrs.items())
        question = (f"{houses} houses stand in a row, numbered 1 to {houses} from left to right. Each house has "
                    f"exactly one value of each attribute, and no value is used twice:\n{listing}\nClues:\n"
                    + "\n".join(f"{i + 1}. {describe(c, owner)}" for i, c in enumerate(clues))
                    + "\n\nAnswer with one line per house listing its values, e.g. "
                    f"'House 1: {', '.join(names)}' with each attribute name replaced by that house's value.")
        by_house = {h: [v for values in attrs.values() for v in values if pos[v] == h] for h in range(houses)}
        solution = "\n".join(f"House {h + 1}: {', '.join(by_house[h])}" for h in range(houses))
        return question, solution, {"houses": houses, "attributes": attrs, "clues": clues}

    def check(self, meta, answer):
        pos = parse_table(answer, meta["attributes"], meta["houses"])
        owner = attribute_of(meta["attributes"])
        for clue in meta["clues"]:
            if not holds(clue, pos):
                return f"clue broken: {describe(clue, owner)}"
        return None
