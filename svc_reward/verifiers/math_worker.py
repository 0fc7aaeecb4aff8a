"""The math-verify worker: a program of its own, started by MathVerifierPool with this file's path.

Why a program and not a multiprocessing target: `spawn` and `forkserver` re-run the caller's main
module in every worker, so a plain script without an `if __name__ == "__main__":` guard (or a
notebook) got a broken pool; `fork` copies a threaded service. This file imports only the standard
library, math-verify and SymPy, never the caller. It reads jobs (JSON: gold, answer and how each is
written, m1flow.kinds.answers.notation: `latex` for math-verify, `expr` for SymPy's parser) from one
descriptor and writes verdicts (JSON) to another, and exits when its parent is gone.

Programming notation (`4*x^3*sin(x)`, `x^-1`) is read by SymPy's `parse_expr` (`^` as a power,
implicit multiplication and function application, no splitting of names), with no Python builtins
and on text of math characters only: parse_expr evaluates the code it builds, and an answer is the
policy's. Its symbols are made real, as math-verify's LaTeX reading makes them, so `x^-1` and
`\\frac{1}{x}` compare equal. A gold math-verify reads as something other than its text (letters
lost: `(x^2 + 1)^-1.5` as `1`; words as a product of one-letter symbols) is a bad gold, never scored.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import re
import resource
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection


def _is_plain_number(x: object) -> bool:
    from sympy import Expr
    return isinstance(x, Expr) and bool(x.is_number)


def _tiny_numbers_differ(gold: object, pred: object) -> bool:
    """math-verify rounds to 6 decimals, so 1/2004! == 1/2006!; compare tiny values relatively."""
    from sympy import Abs
    if not (_is_plain_number(gold) and _is_plain_number(pred)):
        return False
    a, b = gold.evalf(30), pred.evalf(30)
    scale = max(Abs(a), Abs(b))
    return bool(0 < scale < 1e-6 and Abs(a - b) > 1e-6 * scale)


def _identities_differ(gold: object, pred: object, verify) -> bool:
    """Two identities (1+1=2, 2+2=4) both reduce to 0=0 and math-verify calls them equal; compare sides."""
    from sympy import Eq, simplify
    if not (isinstance(gold, Eq) and isinstance(pred, Eq)):
        return False
    if simplify(gold.lhs - gold.rhs) != 0 or simplify(pred.lhs - pred.rhs) != 0:
        return False
    same = lambda g, p: verify(g, p, timeout_seconds=None)  # noqa: E731
    return not ((same(gold.lhs, pred.lhs) and same(gold.rhs, pred.rhs))
                or (same(gold.lhs, pred.rhs) and same(gold.rhs, pred.lhs)))


_SAFE_EXPR = re.compile(r"[\w\s+\-*/^().,=]*")  # math characters only: no quotes, brackets or attributes
_ATTRIBUTE = re.compile(r"\.\s*[^\W\d]|__")
_FUNCTIONS = {  # the names m1flow.kinds.answers.MATH_NAMES lists, as SymPy objects
    "sin": "sin", "cos": "cos", "tan": "tan", "cot": "cot", "sec": "sec", "csc": "csc", "asin": "asin",
    "acos": "acos", "atan": "atan", "acot": "acot", "arcsin": "asin", "arccos": "acos", "arctan": "atan",
    "arccot": "acot", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "coth": "coth", "asinh": "asinh",
    "acosh": "acosh", "atanh": "atanh", "arsinh": "asinh", "arcosh": "acosh", "artanh": "atanh", "ln": "log",
    "log": "log", "exp": "exp", "sqrt": "sqrt", "cbrt": "cbrt", "abs": "Abs", "sgn": "sign", "sign": "sign",
    "pi": "pi", "oo": "oo", "inf": "oo", "floor": "floor", "ceil": "ceiling", "factorial": "factorial", "e": "E"}
_PARSER: tuple | None = None


def _parser() -> tuple:
    """(transformations, globals, locals) for parse_expr: SymPy's own, without builtins."""
    global _PARSER
    if _PARSER is None:
        import sympy
        from sympy.parsing.sympy_parser import (convert_equals_signs, convert_xor, implicit_application,
                                                implicit_multiplication, standard_transformations)
        transformations = standard_transformations + (implicit_multiplication, implicit_application,
                                                      convert_xor, convert_equals_signs)
        names = ("Symbol", "Integer", "Float", "Rational", "Function", "Eq", "I", "Mul", "Add", "Pow")
        global_dict = {"__builtins__": {}, **{n: getattr(sympy, n) for n in names}}
        local_dict = {name: getattr(sympy, target) for name, target in _FUNCTIONS.items()}
        _PARSER = transformations, global_dict, local_dict
    return _PARSER


def read_expr(text: str) -> list:
    """[the SymPy expression, the text] of programming notation; [] when it does not parse."""
    from sympy import Basic, Symbol
    from sympy.parsing.sympy_parser import parse_expr
    if not _SAFE_EXPR.fullmatch(text) or _ATTRIBUTE.search(text) or not text.strip():
        return []
    transformations, global_dict, local_dict = _parser()
    try:
        expr = parse_expr(text, local_dict=dict(local_dict), global_dict=dict(global_dict),
                          transformations=transformations, evaluate=True)
    except Exception:  # noqa: BLE001  (SyntaxError, TypeError, TokenError ...: not an expression)
        return []
    if not isinstance(expr, Basic):
        return []
    real = {s: Symbol(s.name, real=True) for s in expr.free_symbols if isinstance(s, Symbol)}
    return [expr.xreplace(real) if real else expr, text]


def read(text: str, notation: str) -> tuple[list, bool]:
    """(the readings of a gold or an answer as math-verify compares them, whether SymPy's parser made
    them): programming notation by SymPy's parser (math-verify's LaTeX reading when that fails),
    anything else by math-verify."""
    from math_verify import parse
    if notation == "expr":
        found = read_expr(text)
        if found:
            return found, True
    boxed = text if text.lstrip().startswith("\\boxed") else "\\boxed{" + text + "}"
    return parse(boxed, parsing_timeout=None), False


_COMMAND_GROUP = re.compile(r"\\(?:text|mathrm|mbox|textbf|operatorname|mathbf)\s*\{[^{}]*\}")
_LEADING_VARIABLE = re.compile(r"^\s*(?:\\boxed\{)?\s*[A-Za-z]\s*(?:=|\\in\b|\\le|\\ge|<|>)")


def gold_lost(text: str, reading: list) -> str | None:
    """Why math-verify's reading of a gold is not its text (its letters gone, its primes gone, or words
    read as a product of one-letter symbols), else None."""
    from sympy import Basic, Derivative, Mul, Symbol
    first = reading[0] if reading else None
    if not isinstance(first, Basic):
        return None
    plain = _COMMAND_GROUP.sub(" ", _LEADING_VARIABLE.sub(" ", text))
    plain = re.sub(r"\\[A-Za-z]+", " ", plain)
    letters = sorted(set(re.findall(r"[A-Za-z]", plain)))
    if letters and not first.free_symbols and getattr(first, "is_number", False):
        return f"the gold reads as the constant {first}: its letters {''.join(letters)} are lost"
    if "'" in plain and not first.has(Derivative):
        return f"the gold reads as {first}: its primes (derivatives) are lost"
    long_words = [w for w in re.findall(r"[A-Za-z]{4,}", plain) if w.lower() not in _FUNCTIONS]
    singles = [f for f in Mul.make_args(first) if isinstance(f, Symbol) and len(f.name) == 1]
    if long_words and len(singles) >= 2:
        return f"the gold reads as a product of one-letter symbols ({first}): its words are not mathematics"
    return None


@functools.lru_cache(maxsize=256)
def read_gold(text: str, notation: str) -> tuple[list, str | None]:
    """(the gold's readings, why they are not its text or None), kept for the next answers to the same
    gold (a group's rollouts, validate's probes): reading a gold costs as much as judging an answer."""
    gold, by_sympy = read(text, notation)
    return gold, (None if by_sympy or not gold else gold_lost(text, gold))


def judge(gold_text: str, pred_text: str, gold_notation: str = "latex",
          pred_notation: str = "latex") -> tuple[str, str]:
    """('correct' | 'wrong' | 'bad_gold', detail) for a gold and an answer, each read as its notation
    says (`latex`: a \\boxed{} string for math-verify; `expr`: programming notation); untimed."""
    from math_verify import verify
    gold, lost = read_gold(gold_text, gold_notation)
    if not gold:
        return "bad_gold", f"gold did not parse: {gold_text[:200]}"
    if lost:
        return "bad_gold", lost
    pred, _ = read(pred_text, pred_notation)
    if not pred:
        return "wrong", "answer did not parse"
    if not verify(gold, pred, timeout_seconds=None):
        return "wrong", f"{pred[-1]} != {gold[-1]}"
    try:
        if _tiny_numbers_differ(gold[0], pred[0]):
            return "wrong", "tiny numbers differ relatively"
        if _identities_differ(gold[0], pred[0], verify):
            return "wrong", "different identities"
    except Exception:  # noqa: BLE001  (a failed extra check leaves math-verify's verdict)
        pass
    return "correct", f"{pred[-1]} == {gold[-1]}"


def _exit_with_parent(parent: int) -> None:
    """A comparison can run for minutes in SymPy; the worker must not outlive a killed parent."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def main(jobs_fd: int, verdicts_fd: int, memory_mb: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    jobs, verdicts = Connection(jobs_fd, writable=False), Connection(verdicts_fd, readable=False)
    import math_verify  # noqa: F401  (pay the SymPy import before saying ready)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    judge(r"\boxed{1}", r"\boxed{1}")  # warm the parsers so the first real deadline is fair
    judge("x^-1", "x^-1", "expr", "expr")
    if memory_mb:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    verdicts.send_bytes(b'"ready"')
    while True:
        try:
            job = json.loads(jobs.recv_bytes())
        except EOFError:
            return
        try:
            verdict, detail = judge(*job)
        except Exception as err:  # noqa: BLE001  (report, keep serving)
            verdict, detail = "error", f"{type(err).__name__}: {err}"
        verdicts.send_bytes(json.dumps([verdict, detail[:500]]).encode())


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
