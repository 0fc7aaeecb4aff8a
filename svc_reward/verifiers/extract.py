"""Finding the final answer in a model response.

Why here: every verifier must look only at what the model committed to after its reasoning, and
the same rules (last answer wins, ignore what is inside <think>) must hold for math and puzzles.
Everything is plain string scanning; nothing the model wrote is ever evaluated.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from m1flow.chat import THINK_END, after_reasoning
from m1flow.kinds.answers import unwrap
from m1flow.kinds.math import STYLE_NAMES

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_LINE = re.compile(
    r"^[\s>*_#-]*(?:\*\*)?(?:the\s+)?(?:final\s+)?answer(?:\*\*)?\s*(?:is)?\s*(?:\*\*)?\s*[:：]\s*(.+?)\s*$",
    re.IGNORECASE | re.MULTILINE)
_HASHES_LINE = re.compile(r"^\s*####\s*(.+?)\s*$", re.MULTILINE)  # GSM8K's final line
_ANSWER_IS = re.compile(  # "Therefore, the answer is 12." and Minerva's "The final answer is $x$. I hope it is correct."
    r"\banswer\s+is\s*[:：]?\s*(.+?)\s*(?:\.\s*I hope it is correct\.?)?\s*$", re.IGNORECASE | re.MULTILINE)
_BOLD_ON_ANSWER_LINE = re.compile(r"^.*\banswer\b.*$", re.IGNORECASE | re.MULTILINE)
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_DELIMITERS = [("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("**", "**")]


def _balanced_from(text: str, open_at: int) -> str | None:
    """Content of the brace group whose '{' is at open_at, or None when it never closes."""
    depth = 0
    for i in range(open_at, len(text)):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
            continue
        if ch == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif ch == "}" and (i == 0 or text[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return text[open_at + 1:i]
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} whose braces balance."""
    for match in reversed(list(_BOXED.finditer(text))):
        content = _balanced_from(text, match.end() - 1)
        if content is not None:
            return content
    return None


def strip_delimiters(answer: str) -> str:
    """Drop math-mode and bold wrappers and a final full stop: '$\\frac12$.' -> '\\frac12'."""
    answer = answer.strip()
    if answer.count("**") == 1:  # '**Answer:** 3' leaves a lone marker behind
        answer = answer.replace("**", "").strip()
    changed = True
    while changed and answer:
        changed = False
        if answer.endswith(".") and not answer[:-1].rstrip().endswith("."):
            answer, changed = answer[:-1].rstrip(), True
        for left, right in _DELIMITERS:
            if len(answer) > len(left) + len(right) and answer.startswith(left) and answer.endswith(right):
                answer, changed = answer[len(left):-len(right)].strip(), True
                break
    return answer


def _last_answer_line(text: str) -> str | None:
    found = _ANSWER_LINE.findall(text)
    return found[-1] if found else None


def _last_hashes_line(text: str) -> str | None:
    found = _HASHES_LINE.findall(text)
    return found[-1] if found else None


def _last_answer_is(text: str) -> str | None:
    found = _ANSWER_IS.findall(text)
    return found[-1] if found else None


def _answer_tag(text: str) -> str | None:
    return last_tag(text, "answer")


def _last_bold_on_answer_line(text: str) -> str | None:
    """'The final answer is **3**.': math-verify misses markdown bold, so we pick it up here."""
    for line in reversed(_BOLD_ON_ANSWER_LINE.findall(text)):
        bold = _BOLD.findall(line)
        if bold:
            return bold[-1]
    return None


def extract_math_answer(response: str) -> str | None:
    """The final math answer, in the forms math RL datasets ask for, the first form found winning.

    Last \\boxed{}; an <answer> tag (R1-Zero style prompts); an 'Answer:' line (DAPO-Math); a
    '#### 42' line (GSM8K); 'the (final) answer is ...' (Minerva's "I hope it is correct" included);
    a bold span on a line that mentions the answer.
    """
    tail = after_reasoning(response)
    for finder in (last_boxed, _answer_tag, _last_answer_line, _last_hashes_line, _last_answer_is,
                   _last_bold_on_answer_line):
        found = finder(tail)
        if found is not None:
            boxed_inside = last_boxed(found)
            found = boxed_inside if boxed_inside is not None else (_last_answer_is(found) or found)
            answer = strip_delimiters(found)
            if answer:
                return answer
    return None


def last_tag(response: str, tag: str = "answer") -> str | None:
    """Content of the last <tag>...</tag> after the reasoning, stripped; None when absent."""
    tail = after_reasoning(response)
    close = tail.rfind(f"</{tag}>")
    if close < 0:
        return None
    open_at = tail.rfind(f"<{tag}>", 0, close)
    if open_at < 0:
        return None
    return tail[open_at + len(tag) + 2:close].strip()


# Per-source extraction: where the dataset's own scorer (verl's, for the sources it names) looks
# for the answer, one extractor per style the library declares (m1flow.kinds.math.STYLES). The
# answer is found that way, then compared by math-verify (equivalence, not string equality);
# tests/reward/test_math_styles.py lists every case where the verdict differs from verl's, with why.
_GSM8K_LINE = re.compile(r"####\s*\$?\s*(-?(?:\d[\d,]*(?:\.\d+)?|\.\d+))")  # verl: "#### (\-?[0-9\.\,]+)"
_DAPO_ANSWER = re.compile(r"Answer\s*:\s*([^\n]+)", re.IGNORECASE)  # verl math_dapo's answer_pattern
_NUMBER_THEN_WORDS = re.compile(r"^\s*(-?[\d.,]*\d)\s+[A-Za-z][A-Za-z ]*\.?\s*$")  # "34 dollars": math-verify reads no number
_BOXED_SPACE = re.compile(r"\\boxed (\S+?)(?=\$|\s|$)")  # "\boxed 5", MATH's own short form


def extract_boxed_answer(response: str) -> str | None:
    """MATH (verl's math_reward): the last \\boxed{} or \\fbox{} (or "\\boxed 5") after the reasoning."""
    tail = after_reasoning(response)
    boxed = last_boxed(tail)
    spaced = _BOXED_SPACE.findall(tail)
    if spaced and (boxed is None or tail.rfind("\\boxed ") > tail.rfind("\\boxed{")):
        return spaced[-1]
    return boxed.strip() if boxed is not None else None


def extract_gsm8k_answer(response: str) -> str | None:
    """GSM8K (verl's gsm8k, strict): the number after the last '####', thousands separators dropped."""
    found = _GSM8K_LINE.findall(after_reasoning(response))
    return found[-1].replace(",", "") if found else None


def extract_dapo_answer(response: str) -> str | None:
    """DAPO-Math (verl's math_dapo): the rest of the last 'Answer:' line, else the last \\boxed{}.

    As verl's normalisation does, only what follows the last '=' counts ('Answer: x = 5' -> '5').
    """
    tail = after_reasoning(response)
    found = _DAPO_ANSWER.findall(tail)
    if not found:
        return last_boxed(tail)
    answer = found[-1].split("=")[-1]
    inner = last_boxed(answer)
    answer = strip_delimiters(inner if inner is not None else answer)
    unit = _NUMBER_THEN_WORDS.match(answer)
    return (unit.group(1) if unit else answer) or None


MAX_BARE_CHARS = 4000  # a bare "answer" longer than this is the reasoning, not an answer
_LABEL = re.compile(r"^[\s>*_#-]*(?:\*\*)?(?:(?:so|thus|therefore|hence)[\s,]+)?(?:the\s+)?(?:final\s+)?"
                    r"answer(?:\*\*)?\s*(?:is\s*[:：]?|[:：])\s*(?:\*\*)?", re.IGNORECASE)


def extract_bare(response: str) -> str | None:
    """The `bare` style: the answer is what follows the reasoning. Precisely: the text after the last
    </think>, or, in a response without </think>, its last non-empty line; then one leading label
    ('Answer:', 'Final answer:', 'The answer is') is dropped, a \\boxed{} is opened, math delimiters
    ($...$, \\(...\\)), bold and a final full stop are stripped, and one pair of braces or brackets
    around a single item (`{70}`, `[B]`) is removed. None when nothing is left or it is longer than
    MAX_BARE_CHARS."""
    if THINK_END in response:
        text = after_reasoning(response).strip()
    else:
        lines = [line for line in response.splitlines() if line.strip()]
        text = lines[-1].strip() if lines else ""
    text = _LABEL.sub("", text, count=1).strip()
    boxed = last_boxed(text)
    answer = unwrap(strip_delimiters(boxed if boxed is not None else text))
    return answer if answer and len(answer) <= MAX_BARE_CHARS else None


def extract_answer_line(response: str) -> str | None:
    """The rest of the last 'Answer:' line after the reasoning, delimiters stripped (text and choice
    kinds: no '=' split and no unit dropped, unlike math_dapo)."""
    found = _last_answer_line(after_reasoning(response))
    return strip_delimiters(found) or None if found is not None else None


def extract_final(response: str) -> str | None:
    """The text and choice kinds' `auto`: a marked final answer (as math's auto finds it), else the
    bare answer, so a prompt that asks for the bare letter or words is answered as it asks."""
    return extract_math_answer(response) or extract_bare(response)


EXTRACTORS: dict[str, Callable[[str], str | None]] = {
    "auto": extract_math_answer, "boxed": extract_boxed_answer, "math_dapo": extract_dapo_answer,
    "gsm8k": extract_gsm8k_answer, "bare": extract_bare}
# the text and choice kinds' styles (m1flow.kinds.text.FINAL_STYLES)
FINAL_EXTRACTORS: dict[str, Callable[[str], str | None]] = {
    "auto": extract_final, "bare": extract_bare, "boxed": extract_boxed_answer, "answer_line": extract_answer_line}


def extract_answer(response: str, style: str = "auto") -> str | None:
    """The final answer the way `style`'s dataset asks for it; 'auto' accepts every form it knows."""
    if style not in EXTRACTORS:
        raise ValueError(f"unknown math answer style {style!r}; known: {', '.join(STYLE_NAMES)}")
    return EXTRACTORS[style](response)
