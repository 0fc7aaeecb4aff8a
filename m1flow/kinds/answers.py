"""How a gold or an answer is written, read without evaluating it: as text, as LaTeX (or a plain
number) for math-verify, or as an expression in programming notation for SymPy's parser.

Why: math-verify reads everything as LaTeX, so a gold written as words became a product of
one-letter symbols (`x is congruent to 25 modulo 154` equalled `x is congruent to 154 modulo 25`)
and a gold in programming notation lost its meaning (`(x^2 + 1)^-1.5` read as `1`). The kinds that
compare an answer with a gold (math, text, choice) and `m1flow data validate`'s probes
(m1flow/kinds/probe.py) decide here, once, which reading a text gets. Everything is string work;
the parsing itself is math-verify's and SymPy's, in svc_reward.
"""
from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Literal

Notation = Literal["text", "expr", "latex"]

# Names SymPy's parser reads as functions or constants (svc_reward/verifiers/math_worker.py maps the
# same names): a gold made of these and one-letter symbols is an expression, any other word is text.
MATH_NAMES = frozenset({
    "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot", "arcsin", "arccos", "arctan",
    "arccot", "sinh", "cosh", "tanh", "coth", "asinh", "acosh", "atanh", "arsinh", "arcosh", "artanh",
    "ln", "log", "exp", "sqrt", "cbrt", "abs", "sgn", "sign", "pi", "oo", "inf", "floor", "ceil", "factorial",
})
_WORD = re.compile(r"[^\W\d_]{2,}")
_LATEX = re.compile(r"\\[A-Za-z]|\\[{}(\[,;! ]|\$")
_FUNCTION_CALL = re.compile(r"\b(?:" + "|".join(sorted(MATH_NAMES, key=len, reverse=True)) + r")\s*\(")
# programming notation: '*', '**', and powers LaTeX would misread (x^-1, x^(1/2), x^0.5, x^10)
_PROGRAMMING = re.compile(r"\*|\^\s*(?:[-+(]|\d*\.\d|\d{2,})")
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w.])|(?<![\w.])[-+]?\.\d+(?![\w.])")


def words(text: str) -> list[str]:
    """The words of a text that are not the math names SymPy knows (sin, ln, pi ...), LaTeX commands
    left out: what makes a gold text, not an expression."""
    without_commands = re.sub(r"\\[A-Za-z]+", " ", text)
    return [w for w in _WORD.findall(without_commands) if w.lower() not in MATH_NAMES]


def notation(text: str) -> Notation:
    """How a gold or an answer is written: `latex` (LaTeX, or a plain number or tuple: math-verify reads
    it), `expr` (programming notation: `4*x^3*sin(x)`, `x^-1`; SymPy's parser reads it) or `text`
    (words: `x is congruent to 25 modulo 154`, `TO THIS WORK MR`; compared as normalised text)."""
    if _LATEX.search(text):
        return "latex"
    if words(text):
        return "text"
    if _PROGRAMMING.search(text) or _FUNCTION_CALL.search(text):
        return "expr"
    return "latex"


_PUNCTUATION_KEPT = frozenset("-+/%")


def normalise_text(text: str, case_sensitive: bool = False) -> str:
    """A text as the text kinds compare it: Unicode NFKC, case folded (unless `case_sensitive`), math
    delimiters and punctuation dropped (a '.' or ',' between digits, '-', '+', '/' and '%' kept),
    symbols spaced as tokens, whitespace collapsed. `x  is Congruent to 25, modulo 154.` ->
    `x is congruent to 25 modulo 154`; `2×2` and `2 × 2` are the same."""
    text = unicodedata.normalize("NFKC", text)
    text = re.sub(r"\\(?:text|textbf|mathrm|mathbf|emph)\s*\{([^{}]*)\}", r"\1", text)
    text = text.replace("$", " ")
    if not case_sensitive:
        text = text.casefold()
    out = []
    for i, ch in enumerate(text):
        category = unicodedata.category(ch)
        between_digits = 0 < i < len(text) - 1 and text[i - 1].isdigit() and text[i + 1].isdigit()
        if ch.isalnum():
            out.append(ch)
        elif ch in ".," and between_digits:
            out.append(ch)
        elif ch in _PUNCTUATION_KEPT or category[0] == "S":
            out.append(f" {ch} ")
        else:  # punctuation, whitespace, anything else: a separator
            out.append(" ")
    return " ".join("".join(out).split())


def number_value(text: str) -> Fraction | None:
    """The value of a gold that is one plain number (`-3.00`, `079`, `1,000`, `3/4`, `\\frac{3}{4}`,
    `{70}`, `50%`), exactly; None for anything else. No expression is evaluated."""
    t = unwrap(text.strip().strip("$").strip())
    t = re.sub(r"^\\[dt]?frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(\d+)\s*\}$", r"\1/\2", t)
    percent = t.endswith("%")
    t = t.rstrip("%").rstrip("\\").strip()
    match = re.fullmatch(r"([-+]?)\s*(\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)(?:\s*/\s*(\d+))?", t)
    if match is None:
        return None
    try:
        value = Fraction(Decimal(match.group(2).replace(",", "")))
    except InvalidOperation:
        return None
    if match.group(3):
        if int(match.group(3)) == 0:
            return None
        value /= int(match.group(3))
    value = -value if match.group(1) == "-" else value
    return value / 100 if percent else value


def unwrap(text: str) -> str:
    """The content of one pair of braces or brackets around a single item (`{70}`, `[x]`, `{cos(x)}`),
    as answer formats ask for; a list (`[1, 2]`) or a group that does not enclose the whole text is kept."""
    t = text.strip()
    if len(t) >= 2 and (t[0], t[-1]) in (("{", "}"), ("[", "]")) and "," not in t:
        depth = 0
        for i, ch in enumerate(t):
            depth += 1 if ch in "{[" else -1 if ch in "}]" else 0
            if depth == 0 and i < len(t) - 1:
                return t  # `{a}{b}`: the first group closes before the end
        return t[1:-1].strip()
    return t


def numbers(text: str) -> list[str]:
    """The numbers written in a text, in order (`x is congruent to 25 modulo 154` -> ['25', '154'])."""
    return [m.group(0) for m in NUMBER.finditer(text)]
