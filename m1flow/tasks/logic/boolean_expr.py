"""Boolean expressions: evaluate a nested expression of True/False with not/and/or.

The verifier re-evaluates the puzzle's own expression with a small parser (the usual precedence:
not > and > or) and compares the answer; no Python eval anywhere.
"""
from __future__ import annotations

import random
import re

from m1flow.tasks.logic.base import FormatError, LogicTask
from m1flow.tasks.logic.parsing import TokenStream

_TOKEN = re.compile(r"true\b|false\b|not\b|and\b|or\b|[()]", re.IGNORECASE)
LEVELS = {1: 2, 2: 3, 3: 4}  # depth of the expression tree
TRUTH_WORDS = {"true": True, "false": False, "yes": True, "no": False}


def random_expression(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.15:
        return rng.choice(["True", "False"])
    if rng.random() < 0.25:
        return f"not {random_expression(rng, depth - 1)}"
    op = rng.choice(["and", "or"])
    parts = [random_expression(rng, depth - 1) for _ in range(rng.randint(2, 3))]
    return "(" + f" {op} ".join(parts) + ")"


class _Evaluator:
    """or_ := and_ ('or' and_)* ; and_ := not_ ('and' not_)* ; not_ := 'not' not_ | atom ;
    atom := 'true' | 'false' | '(' or_ ')'"""

    def __init__(self, text: str) -> None:
        self.tokens = TokenStream(text, _TOKEN)

    def run(self) -> bool:
        value = self.or_()
        self.tokens.finish()
        return value

    def or_(self) -> bool:
        value = self.and_()
        while self.tokens.peek() == "or":
            self.tokens.take()
            value = self.and_() or value  # evaluate both sides: the parser must consume them
        return value

    def and_(self) -> bool:
        value = self.not_()
        while self.tokens.peek() == "and":
            self.tokens.take()
            value = self.not_() and value
        return value

    def not_(self) -> bool:
        if self.tokens.peek() == "not":
            self.tokens.take()
            return not self.not_()
        token = self.tokens.take()
        if token == "(":
            value = self.or_()
            self.tokens.expect(")")
            return value
        if token not in ("true", "false"):
            raise FormatError(f"unexpected {token!r}")
        return token == "true"


def evaluate(expression: str) -> bool:
    return _Evaluator(expression).run()


def read_truth(answer: str) -> bool:
    word = answer.strip().strip(".").lower()
    if word not in TRUTH_WORDS:
        raise FormatError("answer must be True or False")
    return TRUTH_WORDS[word]


class BooleanExpressions(LogicTask):
    name = "boolean_expressions"

    def build(self, rng, level):
        expression = random_expression(rng, LEVELS[level])
        while expression in ("True", "False"):
            expression = random_expression(rng, LEVELS[level])
        question = f"Evaluate the expression and answer True or False:\n{expression}"
        return question, str(evaluate(expression)), {"expression": expression}

    def check(self, meta, answer):
        want = evaluate(meta["expression"])
        return None if read_truth(answer) == want else f"the expression is {want}"
