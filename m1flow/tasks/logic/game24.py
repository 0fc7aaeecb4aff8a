"""Game of 24: combine the given numbers with + - * / and parentheses to reach the target.

The answer is parsed by a recursive-descent parser into exact Fractions; each given number must be
used exactly once; unary minus and number gluing ('1' '2' -> 12) are not allowed.
"""
from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction
from itertools import combinations

from m1flow.tasks.logic.base import FormatError, LogicTask
from m1flow.tasks.logic.parsing import TokenStream

_TOKEN = re.compile(r"\d+|[-+*/()×÷=]")
_OPS = {"×": "*", "÷": "/"}
LEVELS = {1: (4, 9), 2: (4, 13), 3: (5, 13)}  # how many numbers, largest number
TARGET = 24


class _Evaluator:
    """expr := term (('+'|'-') term)* ; term := factor (('*'|'/') factor)* ; factor := INT | '(' expr ')'"""

    def __init__(self, tokens: TokenStream) -> None:
        self.tokens = tokens
        self.used: list[int] = []
        self.divided_by_zero = False

    def expr(self) -> Fraction:
        value = self.term()
        while self.tokens.peek() in ("+", "-"):
            value = value + self.term() if self.tokens.take() == "+" else value - self.term()
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.tokens.peek() in ("*", "/"):
            op, right = self.tokens.take(), self.factor()
            if op == "*":
                value *= right
            elif right == 0:
                self.divided_by_zero = True
            else:
                value /= right
        return value

    def factor(self) -> Fraction:
        token = self.tokens.take()
        if token == "(":
            value = self.expr()
            self.tokens.expect(")")
            return value
        if not token.isdigit():
            raise FormatError(f"expected a number or '(' but got {token!r}")
        self.used.append(int(token))
        return Fraction(int(token))


def evaluate(text: str) -> tuple[Fraction | None, list[int], int | None]:
    """(value or None on division by zero, numbers used, claimed result) of an arithmetic answer.

    'expression' and 'expression = N' are accepted; N is the claimed result.
    """
    tokens = TokenStream(text, _TOKEN, normalise=lambda t: _OPS.get(t, t))
    claimed = None
    if "=" in tokens.tokens:
        cut = tokens.tokens.index("=")
        tail = tokens.tokens[cut + 1:]
        if len(tail) != 1 or not tail[0].isdigit():
            raise FormatError("only 'expression = number' is allowed")
        tokens.tokens, claimed = tokens.tokens[:cut], int(tail[0])
    ev = _Evaluator(tokens)
    value = ev.expr()
    tokens.finish()
    return (None if ev.divided_by_zero else value), ev.used, claimed


def _wrap(expression: str) -> str:
    return expression if expression.isdigit() else f"({expression})"


def _combine(a: Fraction, ea: str, b: Fraction, eb: str) -> list[tuple[Fraction, str]]:
    pa, pb = _wrap(ea), _wrap(eb)
    out = [(a + b, f"{ea} + {eb}"), (a * b, f"{pa} * {pb}"), (a - b, f"{ea} - {pb}"), (b - a, f"{eb} - {pa}")]
    if b:
        out.append((a / b, f"{pa} / {pb}"))
    if a:
        out.append((b / a, f"{pb} / {pa}"))
    return out


def _splits(mask: int):
    """Unordered splits of a bit mask into two non-empty parts."""
    sub = (mask - 1) & mask
    while sub:
        if sub < mask ^ sub:
            yield sub, mask ^ sub
        sub = (sub - 1) & mask


def solve(numbers: list[int], target: int) -> str | None:
    """One expression reaching the target: all values of every proper subset (subset DP), then, for
    the full set, only a look-up of the partner value each operation would need."""
    k, goal = len(numbers), Fraction(target)
    full = (1 << k) - 1
    reach: dict[int, dict[Fraction, str]] = {1 << i: {Fraction(n): str(n)} for i, n in enumerate(numbers)}
    for mask in range(1, full):
        if mask not in reach:
            values: dict[Fraction, str] = {}
            for sub, rest in _splits(mask):
                for a, ea in reach[sub].items():
                    for b, eb in reach[rest].items():
                        for value, text in _combine(a, ea, b, eb):
                            values.setdefault(value, text)
            reach[mask] = values
    if k == 1:
        return str(numbers[0]) if numbers[0] == target else None
    for sub, rest in _splits(full):
        partners = reach[rest]
        for a, ea in reach[sub].items():
            needed = {goal - a, a - goal, a + goal, goal * a}
            if a:
                needed.add(goal / a)
            if goal:
                needed.add(a / goal)
            for b in needed & partners.keys():
                for value, text in _combine(a, ea, b, partners[b]):
                    if value == goal:
                        return text
    return None


class Game24(LogicTask):
    name = "game24"

    def build(self, rng, level):
        count, largest = LEVELS[level]
        while True:
            numbers = sorted(rng.randint(1, largest) for _ in range(count))
            solution = solve(numbers, TARGET)
            if solution is not None:
                break
        question = (f"Use the numbers {', '.join(map(str, numbers))} each exactly once, with + - * / and "
                    f"parentheses, to make {TARGET}. Answer with the expression only, e.g. (1 + 2) * 8.")
        return question, solution, {"numbers": numbers, "target": TARGET}

    def check(self, meta, answer):
        value, used, claimed = evaluate(answer)
        if Counter(used) != Counter(meta["numbers"]):
            return f"used {sorted(used)}, must use {meta['numbers']} each once"
        if value is None:
            return "division by zero"
        if value != meta["target"]:
            return f"evaluates to {value}, not {meta['target']}"
        if claimed is not None and claimed != meta["target"]:
            return f"claims {claimed}, the target is {meta['target']}"
        return None
