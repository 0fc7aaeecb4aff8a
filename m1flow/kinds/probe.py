"""Wrong answers a verifier must not accept, made from a row's gold: what `m1flow data validate` sends
through the row's scorer besides the gold itself.

Why: validate used to check only that a gold matches itself, and every gold matches itself, even one
read as `1` (`(x^2 + 1)^-1.5` by math-verify) or as a product of one-letter symbols (words). A gold
any of these answers matches would reward a policy for them, so validate refuses the row, naming
the answer and why it is wrong. The probes, for the kinds that compare an answer with a gold
(`Kind.probed`: arith, math, text, choice):

* degenerate answers: `0`, `1`, the empty answer;
* for a gold of words: its words in reverse order, its letters sorted (an anagram) or reversed;
* its numbers swapped (first and last distinct), unless the gold is a set (`{...}`) or a bare
  comma list; an ordered list (`[a, b]`, `(a, b)`) reversed;
* for a numeric gold: gold + 1, gold - 1, gold x 10;
* for a factorisation (`2 × 2 × 5`): its product; for a fraction when the prompt asks for lowest
  terms or the simplest form: the same fraction unreduced;
* for multiple choice: every other option's letter and all the letters at once;
* for swe: the empty patch (the unfixed repository must fail its FAIL_TO_PASS tests).

A probe equal to an accepted answer (as normalised text, or as a number) is not sent.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from m1flow.chat import response_text
from m1flow.kinds.answers import NUMBER, normalise_text, number_value, words
from m1flow.kinds.base import KINDS, Verifier, accepted, kind_of
from m1flow.kinds.check import gold_answer
from m1flow.kinds.swe import EMPTY_PATCH


@dataclass(frozen=True)
class Probe:
    """A wrong answer and what it is (`the gold's numbers swapped`), for validate's error line. form:
    the gold's own value in a form the prompt does not ask for (kept though it equals the gold's value)."""
    answer: str
    why: str
    form: bool = False


_FACTORS = re.compile(r"^\s*\d+(?:\s*(?:×|x|\*|·|\\times|\\cdot)\s*\d+)+\s*$")
_FACTOR_SIGN = re.compile(r"×|x|\*|·|\\times|\\cdot")
_FRACTION = re.compile(r"^\s*(?:(\d+)\s*/\s*(\d+)|\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\})\s*$")
_ASKS_FORM = re.compile(r"lowest terms|simplest form|simplif|reduced form|fully reduce|irreducible",
                        re.IGNORECASE)


def probes(verifier: Verifier, prompt: str = "") -> list[Probe]:
    """The wrong answers to send for a row (empty for a kind that compares no gold). `prompt`: the
    prompt's instructions, which say whether the answer's form matters (lowest terms)."""
    name = kind_of(verifier.kind)
    if name == "swe":
        return [Probe(EMPTY_PATCH, "the empty patch: the unfixed repository")]
    if name not in KINDS or not KINDS.get(name).probed:
        return []
    golds = accepted(verifier.gold, verifier.spec)
    found = [Probe("0", "a degenerate answer"), Probe("1", "a degenerate answer"), Probe("", "the empty answer")]
    for gold in golds:
        found += _of_gold(gold, prompt)
    if name == "choice":
        found += _of_choice(verifier)
    return _wrong_only(found, golds, verifier)


def probe_response(verifier: Verifier, answer: str) -> str:
    """The whole response that gives `answer` in the row's answer style, as its gold is written."""
    return response_text(gold_answer(verifier.model_copy(update={"gold": answer})))


def _of_gold(gold: str, prompt: str) -> list[Probe]:
    out = []
    tokens = gold.split()
    has_words = bool(words(gold))
    if has_words and len(tokens) >= 2:
        out.append(Probe(" ".join(reversed(tokens)), "the gold's words in reverse order"))
    letters = [c for c in gold if c.isalpha()]
    if has_words and len(letters) >= 2:
        anagram = "".join(sorted(letters))
        if anagram == "".join(letters):
            anagram = anagram[::-1]
        out.append(Probe(anagram, "the gold's letters reordered"))
    value = number_value(gold)
    if value is not None:
        out += [Probe(_like(value + 1, gold), "the gold + 1"), Probe(_like(value - 1, gold), "the gold - 1"),
                Probe(_like(value * 10, gold), "the gold x 10")]
    if _FACTORS.match(gold):
        product = 1
        for n in re.findall(r"\d+", gold):
            product *= int(n)
        out.append(Probe(str(product), "the factorisation's value, not its factors", form=True))
    fraction = _FRACTION.match(gold)
    if fraction and _ASKS_FORM.search(prompt):
        num, den = (int(g) for g in (fraction.group(1) or fraction.group(3), fraction.group(2) or fraction.group(4)))
        out.append(Probe(f"{2 * num}/{2 * den}", "the fraction not in the lowest terms the prompt asks for",
                         form=True))
    if not _FACTORS.match(gold):  # a product's factors in another order are the same factorisation
        out += _swapped(gold)
    return out


def _swapped(gold: str) -> list[Probe]:
    """The gold with its first number and its last different number swapped, or its list reversed."""
    stripped = gold.strip()
    if stripped.startswith(("{", "\\{")) or ("," in stripped and stripped[:1] not in "[(" and "\\" not in stripped):
        return []  # a set or a bare comma list: order does not matter
    out = []
    found = list(NUMBER.finditer(gold))
    first = found[0] if found else None
    last = next((m for m in reversed(found) if first is not None and m.group(0) != first.group(0)), None)
    if first is not None and last is not None:
        swapped = (gold[:first.start()] + last.group(0) + gold[first.end():last.start()] + first.group(0)
                   + gold[last.end():])
        out.append(Probe(swapped, "the gold's numbers swapped"))
    items = _ordered_items(stripped)
    if items and len(set(items)) >= 2:
        out.append(Probe(stripped[0] + ", ".join(reversed(items)) + stripped[-1], "the gold's list reversed"))
    return out


def _ordered_items(text: str) -> list[str]:
    """The items of `[a, b]` or `(a, b)` split at top-level commas; [] for anything else."""
    if len(text) < 2 or (text[0], text[-1]) not in (("[", "]"), ("(", ")")):
        return []
    items, depth, start = [], 0, 1
    for i, ch in enumerate(text[1:-1], start=1):
        depth += 1 if ch in "([{" else -1 if ch in ")]}" else 0
        if depth < 0:
            return []
        if ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:-1].strip())
    return items if len(items) >= 2 else []


def _like(value: Fraction, gold: str) -> str:
    """A number written as the gold writes numbers: a fraction as a/b, a decimal with its places."""
    if value.denominator == 1:
        places = len(gold.split(".")[1].rstrip("%").strip()) if "." in gold else 0
        return f"{value.numerator}.{'0' * places}" if places else str(value.numerator)
    if "/" in gold or "frac" in gold:
        return f"{value.numerator}/{value.denominator}"
    places = max(len(gold.split(".")[1]) if "." in gold else 0, 1)
    return format(Decimal(value.numerator) / Decimal(value.denominator), f".{places}f")


def _of_choice(verifier: Verifier) -> list[Probe]:
    from m1flow.kinds.choice import choice_of, lettered

    options = lettered(verifier.spec.get("options") or {})
    golds = {choice_of(g, options) for g in accepted(verifier.gold, verifier.spec)}
    out = [Probe(letter, "another option") for letter in options if letter not in golds]
    out.append(Probe(" ".join(options), "every option at once"))
    out.append(Probe("".join(options), "every option at once"))
    return out


def _wrong_only(found: list[Probe], golds: list[str], verifier: Verifier) -> list[Probe]:
    """The probes, each once, without those that are an accepted answer written another way."""
    same_text = {normalise_text(g) for g in golds}
    same_value = {v for g in golds if (v := number_value(g)) is not None}
    chosen: set[str] = set()
    if kind_of(verifier.kind) == "choice":
        from m1flow.kinds.choice import choice_of, lettered

        options = lettered(verifier.spec.get("options") or {})
        chosen = {c for g in golds if (c := choice_of(g, options)) is not None}
    out, seen = [], set()
    for probe in found:
        if probe.answer in seen or (probe.answer and normalise_text(probe.answer) in same_text):
            continue
        if not probe.form and probe.answer and number_value(probe.answer) in same_value:
            continue
        if chosen and probe.answer in chosen:
            continue
        seen.add(probe.answer)
        out.append(probe)
    return out
