"""Each kind's gold answer written as a policy would answer, for checking a row scores full reward.

Why: `m1flow data validate` (and the prompt source's own checks) send the gold through the same
path a rollout takes; the verifier then sees an answer in the form the prompt asked for (a
\\boxed{} math answer, or the source's own style; a puzzle's <answer> tag; a fenced program; a diff),
after the chat format's reasoning section (m1flow.chat.response_text). A kind whose gold cannot be
checked offline raises NoGold with the reason (GenRM judges need a model; a code row without a
reference solution has nothing to run).
"""
from __future__ import annotations

from collections.abc import Callable

from m1flow.chat import response_text
from m1flow.data.record import TaskRecord
from m1flow.registry import Registry


class NoGold(Exception):
    """This row's gold cannot be checked offline; the message says why."""


GOLD: Registry[Callable[[TaskRecord], str]] = Registry("gold answer")


def gold_response(record: TaskRecord) -> str:
    """The whole response text (after the generation prompt) that states the record's gold."""
    return response_text(GOLD.get(record.verifier.family)(record))


@GOLD.register("arith")
def _arith(record: TaskRecord) -> str:
    return record.verifier.gold


_MATH_STYLES = {"boxed": "The answer is $\\boxed{{{}}}$.", "auto": "The answer is $\\boxed{{{}}}$.",
                "gsm8k": "#### {}", "math_dapo": "Answer: {}"}


@GOLD.register("math")
def _math(record: TaskRecord) -> str:
    style = record.verifier.spec.get("style", "auto")
    return _MATH_STYLES.get(style, _MATH_STYLES["auto"]).format(record.verifier.gold)


@GOLD.register("logic")
def _logic(record: TaskRecord) -> str:
    return f"<answer>{record.verifier.gold or record.verifier.spec['solution']}</answer>"


@GOLD.register("code")
def _code(record: TaskRecord) -> str:
    spec, program = record.verifier.spec, record.verifier.gold
    if not program.strip():
        raise NoGold("code without a reference solution (verifier.gold)")
    if spec.get("style") == "function" and f"def {spec['entry_point']}" not in program:
        program = spec.get("prompt", "") + program  # HumanEval's canonical solutions are function bodies
    return f"```{spec.get('language', 'python')}\n{program.rstrip()}\n```"


@GOLD.register("swe")
def _swe(record: TaskRecord) -> str:
    if not record.verifier.gold.strip():
        raise NoGold("swe without a reference patch (verifier.gold)")
    return f"```diff\n{record.verifier.gold.rstrip()}\n```"


@GOLD.register("genrm")
def _genrm(record: TaskRecord) -> str:
    why = "with a reference answer" if record.verifier.gold else "without a reference answer"
    raise NoGold(f"genrm {why}: a judge model scores it, not checkable offline")


@GOLD.register("rg")
def _rg(record: TaskRecord) -> str:
    gold = record.verifier.gold
    if not gold:
        spec = record.verifier.spec
        try:
            from m1flow.tasks.rg import entry  # type: ignore[attr-defined]  # wt/rgcode
        except ImportError:
            raise NoGold("rg row without verifier.gold, and m1flow.tasks.rg is not available") from None
        answer = entry(spec["task"], spec.get("config") or {}, spec["seed"], spec["index"]).get("answer")
        if answer is None:
            raise NoGold(f"reasoning-gym task {spec['task']!r} has no gold answer (answer=None)")
        gold = str(answer)
    return f"<answer>{gold}</answer>"
