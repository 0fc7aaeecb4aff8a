"""Mutations of a Python source file: the bugs the SWE factory plants, each one edit of one line.

Why text edits located by the AST and not a rewritten file: the gold patch is the diff that reverts
the mutation, and a re-printed module would differ on every line a formatter touches. Each mutation
replaces one single-line node's source segment (its line and columns from `ast`) with the mutated
node printed by `ast.unparse`, so the diff is one line. The operators are those of the issue:
comparisons and arithmetic flipped, conditions negated, statements removed, constants off by one,
wrong returns; only inside functions (what the tests call), never a docstring.
"""
from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from m1flow.registry import Registry

COMPARE_FLIPS: dict[type, type] = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt,
                                   ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
                                   ast.Is: ast.IsNot, ast.IsNot: ast.Is}
BINOP_FLIPS: dict[type, type] = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv,
                                 ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv}
BOOLOP_FLIPS: dict[type, type] = {ast.And: ast.Or, ast.Or: ast.And}


@dataclass(frozen=True)
class Mutation:
    """One planted bug: in `path`, line `line`, columns [col, end_col) become `new` (were `old`)."""
    path: str
    function: str
    operator: str
    line: int
    col: int
    end_col: int
    old: str
    new: str

    def apply(self, source: str) -> str:
        """`source` with the mutation made; ValueError when the segment is not where it was found."""
        lines = source.splitlines(keepends=True)
        text = lines[self.line - 1]
        encoded = text.encode()
        if encoded[self.col:self.end_col].decode() != self.old:
            raise ValueError(f"{self.path}:{self.line}: the source changed since the mutation was found")
        lines[self.line - 1] = (encoded[:self.col] + self.new.encode() + encoded[self.end_col:]).decode()
        return "".join(lines)

    @property
    def key(self) -> str:
        return f"{self.path}:{self.line}:{self.col}:{self.operator}"


Mutator = Callable[[ast.AST], "ast.AST | str | None"]  # the mutated node (or its text), None: not applicable
MUTATORS: Registry[Mutator] = Registry("mutation operator")


def _flipped(node: ast.AST, field: str, table: dict[type, type]) -> ast.AST | None:
    op = getattr(node, field)
    if type(op) not in table:
        return None
    mutated = copy.deepcopy(node)
    setattr(mutated, field, table[type(op)]())
    return mutated


@MUTATORS.register("flip_compare")
def flip_compare(node: ast.AST) -> ast.AST | None:
    if not isinstance(node, ast.Compare) or len(node.ops) != 1 or type(node.ops[0]) not in COMPARE_FLIPS:
        return None
    mutated = copy.deepcopy(node)
    mutated.ops = [COMPARE_FLIPS[type(node.ops[0])]()]
    return mutated


@MUTATORS.register("flip_operator")
def flip_operator(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.BinOp):
        return _flipped(node, "op", BINOP_FLIPS)
    if isinstance(node, ast.BoolOp):
        return _flipped(node, "op", BOOLOP_FLIPS)
    return None


@MUTATORS.register("negate_condition")
def negate_condition(node: ast.AST) -> str | None:
    """The test of an if, elif, while or conditional expression, negated (marked by `_conditions`)."""
    if not getattr(node, "_m1flow_condition", False):
        return None
    return f"not ({ast.unparse(node)})"


@MUTATORS.register("off_by_one")
def off_by_one(node: ast.AST) -> ast.AST | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return ast.Constant(node.value + 1)
    return None


@MUTATORS.register("wrong_return")
def wrong_return(node: ast.AST) -> str | None:
    if isinstance(node, ast.Return) and node.value is not None and \
            not (isinstance(node.value, ast.Constant) and node.value.value is None):
        return "return None"
    return None


@MUTATORS.register("remove_statement")
def remove_statement(node: ast.AST) -> str | None:
    """An assignment or a call statement replaced by `pass` (marked by `_removable`: not a body's only one)."""
    if getattr(node, "_m1flow_removable", False) and isinstance(node, (ast.Assign, ast.AugAssign, ast.Expr)):
        return "pass"
    return None


def _mark(function: ast.AST) -> None:
    """Mark the conditions and the removable statements of a function (what two operators need)."""
    for node in ast.walk(function):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            node.test._m1flow_condition = True  # type: ignore[attr-defined]
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and len(body) > 1:
                for statement in body:
                    statement._m1flow_removable = True  # type: ignore[attr-defined]


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                found.add(id(first))
                found.add(id(first.value))
    return found


def functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, node) of every function and method, outermost first."""
    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{prefix}{child.name}", child
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
    yield from walk(tree, "")


def mutations(path: str, source: str, covered: Callable[[int], bool] = lambda line: True,
              operators: tuple[str, ...] | None = None) -> list[Mutation]:
    """Every single-line mutation of the functions in `source` whose first line (its decorator's or
    its def's) `covered` accepts (a function the tests ran), in source order. path: the file's path
    in the repository."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    skip = _docstrings(tree)
    names = operators or tuple(MUTATORS.names())
    found: list[Mutation] = []
    seen: set[int] = set()
    for name, function in functions(tree):
        first = min([function.lineno] + [d.lineno for d in function.decorator_list])
        if not (covered(first) or covered(function.lineno)):
            continue
        _mark(function)
        for node in ast.walk(function):
            if id(node) in seen or id(node) in skip or node is function:
                continue
            if getattr(node, "end_lineno", None) != getattr(node, "lineno", -1) or \
                    isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            seen.add(id(node))
            line = lines[node.lineno - 1].encode()
            old = line[node.col_offset:node.end_col_offset].decode()
            for operator in names:
                mutated = MUTATORS.get(operator)(node)
                if mutated is None:
                    continue
                new = mutated if isinstance(mutated, str) else ast.unparse(mutated)
                if new != old:
                    found.append(Mutation(path, name, operator, node.lineno, node.col_offset, node.end_col_offset,
                                          old, new))
    return found
