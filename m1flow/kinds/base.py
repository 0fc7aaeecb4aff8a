"""What a verifier kind is to the library: one `Kind` declaration holding every part of it.

Why one object: a row is checked where it is read (the prompt source, `m1flow data validate`), its gold
is written as a policy would answer (validate, the warm start), its answer takes a form the prompt
asks for, and the prompt source's fast path proves common rows well formed; each of those once lived
in its own registry under the same name. A kind now declares them together (`m1flow/kinds/<kind>.py`),
and svc_reward registers its scorer under the same name (`svc_reward/verifiers/<kind>.py`);
`missing_parts` names what a declaration lacks. A schema checks what a verifier needs to give a
reward that means something: a gold answer for math, test cases for code, FAIL_TO_PASS tests for
SWE, a reasoning-gym task that exists. The error names the field.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from m1flow.registry import Registry


class SpecError(Exception):
    """A record whose verifier does not fit its kind: `field` names the part, `why` says what is wrong.

    Not a ValueError on purpose: pydantic lets it through unwrapped, so the field survives."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field, self.why = field, why


class NoGold(Exception):
    """This row's gold cannot be checked offline; the message says why."""


def kind_of(kind: str) -> str:
    """The kind's name, the part of `VerifierSpec.kind` before ':' (`logic:sudoku` -> `logic`): what a
    kind is declared and scored under."""
    return kind.split(":", 1)[0]


class Verifier(BaseModel):
    """A task record's verifier: which kind scores it and what that kind reads."""
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(description='"arith", "math", "text", "choice", "logic:<family>", "code", "swe", "genrm", '
                                  '"rg:<task>"')
    gold: str = Field("", description="the gold answer (arith, math, text, choice); a reference answer or "
                                      "solution (others); a list of accepted answers becomes gold + spec.answers")
    spec: dict[str, Any] = Field(default_factory=dict, description="kind-specific structure (docs/tasks.md)")
    payload_uri: str = Field("", description="task store reference (an SWE repository snapshot)")

    @model_validator(mode="before")
    @classmethod
    def _gold_list(cls, data: Any) -> Any:
        """A list of accepted answers (verl's `ground_truth` as a list) for a kind that takes one: the
        first is the gold, all of them `spec.answers`; SpecError for a kind that compares no gold."""
        if isinstance(data, dict) and isinstance(data.get("gold"), (list, tuple)):
            return {**data, **gold_list(str(data.get("kind", "")), list(data["gold"]), data.get("spec"))}
        return data

    @property
    def family(self) -> str:
        """The kind before ':' ("logic:sudoku" -> "logic"): what svc_reward dispatches on."""
        return kind_of(self.kind)


def gold_list(kind: str, golds: list[Any], spec: Any) -> dict[str, Any]:
    """{"gold": the first, "spec": spec with "answers": all of them} for a kind that takes a list of
    accepted answers (its declaration's `answers`); SpecError naming verifier.gold otherwise."""
    name = kind_of(kind)
    takes = [k for k in KINDS.names() if KINDS.get(k).answers]
    if name not in KINDS or not KINDS.get(name).answers:
        raise SpecError("verifier.gold", f"a list of {len(golds)} answers, but kind {kind!r} takes one gold "
                                         f"(lists: {', '.join(takes)})")
    answers = [str(g).strip() for g in golds if g is not None and str(g).strip()]
    if not answers:
        raise SpecError("verifier.gold", "missing: an empty list of answers")
    spec = dict(spec) if isinstance(spec, dict) else ({} if spec in (None, "") else spec)
    if isinstance(spec, dict) and len(answers) > 1:
        spec["answers"] = answers
    return {"gold": answers[0], "spec": spec}


def accepted(gold: str, spec: dict[str, Any] | None) -> list[str]:
    """Every accepted answer of a verifier: the gold, then `spec.answers`, each once."""
    extra = (spec or {}).get("answers") or []
    return list(dict.fromkeys([gold, *(a for a in extra if isinstance(a, str))]))


class KindSchema(BaseModel):
    """What every kind's schema sees: the verifier's gold, spec and payload reference."""
    model_config = ConfigDict(extra="forbid")
    kind: str
    gold: str = ""
    spec: Any = None
    payload_uri: str = ""

    @property
    def suffix(self) -> str:
        return self.kind.partition(":")[2]


class TaskSchema(KindSchema):
    """A kind that names its task after ':' (`logic:<family>`, `rg:<task>`) and again in spec.task:
    the two must agree, and the task must exist (`check_task`)."""
    task_word: ClassVar[str] = "task"

    @model_validator(mode="after")
    def _task_is_the_suffix(self) -> "TaskSchema":
        task = getattr(self.spec, "task", None)
        if task != self.suffix:
            raise SpecError("verifier.spec.task", f"{task!r} is not the kind's {self.task_word} {self.suffix!r}")
        self.check_task(self.suffix)
        return self

    @classmethod
    def check_task(cls, task: str) -> None:
        """SpecError naming the field when `task` does not exist."""


class OpenSpec(BaseModel):
    """A spec that keeps keys its schema does not name (a kind's scorer may read more)."""
    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class Style:
    """One form an answer takes in a response: where the verifier reads it (as its errors name it)
    and how a gold answer is written in it (`writes`, a template of `{answer}` and the kind's fields)."""
    name: str
    reads: str
    writes: str = "{answer}"

    def write(self, answer: str, **fields: str) -> str:
        return self.writes.format(answer=answer, **fields)


GoldWriter = Callable[[Verifier, Style], str]  # the gold in the style; NoGold when it cannot be written
FastCheck = Callable[[str, dict[str, Any]], bool]  # (gold, spec) the schema surely accepts; False: ask it
FromPrompt = Callable[[str, dict[str, Any]], dict[str, Any]]  # (prompt text, spec) -> spec completed from it


@dataclass(frozen=True)
class Kind:
    """Everything the library knows about one verifier kind.

    styles: the answer forms its verifier reads, the first the default; a spec's "style" key picks
    another (math). fast: the prompt source's one-pass check of (gold, spec), for kinds common enough
    to deserve one. needs_suffix: the form of a kind that names its task after ':' ("logic:<family>").
    gold_field: the row's field a gold that does not score names. sandbox: its scorer runs programs
    in svc_sandbox. answers: its gold may be a list of accepted answers (spec.answers). probed: its
    scorer compares an answer with the gold, so `data validate` sends it wrong answers that must not
    score (m1flow/kinds/probe.py). from_prompt: fills spec fields the prompt states (the options of a
    multiple-choice question) when the record is built.
    """
    name: str
    schema: type[KindSchema] | None = None
    gold: GoldWriter | None = None
    styles: tuple[Style, ...] = ()
    fast: FastCheck | None = None
    needs_suffix: str = ""
    gold_field: str = "verifier.gold"
    sandbox: bool = False
    answers: bool = False
    probed: bool = False
    from_prompt: FromPrompt | None = None

    def style(self, name: str | None) -> Style:
        """The style a spec names (None: the default); ValueError naming the known ones."""
        if name is None:
            return self.styles[0]
        for style in self.styles:
            if style.name == name:
                return style
        raise ValueError(f"unknown {self.name} answer style {name!r}; known: {', '.join(self.style_names)}")

    @property
    def style_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.styles)


KINDS: Registry[Kind] = Registry("verifier kind")
PARTS = ("schema", "gold writer", "answer style")  # what every kind declares; a fast path is optional


def declare(kind: Kind) -> Kind:
    """Register a kind's declaration under its name (once)."""
    return KINDS.add(kind.name, kind)


def missing_parts(kind: Kind, scorers: Collection[str] | None = None) -> list[str]:
    """The parts a declaration lacks, by name; with `scorers` (svc_reward's names), its scorer too."""
    found = {"schema": kind.schema is not None, "gold writer": kind.gold is not None,
             "answer style": bool(kind.styles)}
    missing = [part for part in PARTS if not found[part]]
    if scorers is not None and kind.name not in scorers:
        missing.append("scorer")
    return missing


# ---- the schemas' error messages -------------------------------------------------------------
def where(exc: ValidationError, prefix: str) -> tuple[str, str]:
    """(field, why) of a validation error's first problem: "verifier.spec.tests[0].expected_stdout"."""
    first = exc.errors()[0]
    why = first["msg"]
    if first["type"] in ("string_too_short", "missing") and first["loc"][-1:] == ("gold",):
        why = "missing: this kind needs a gold answer"
    return dotted(first["loc"], prefix), why


def dotted(loc: tuple[Any, ...], prefix: str = "") -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in {"str", "list[Message]"} or "[" in str(part):  # union member names
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def unknown(what: str, name: str, known: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; {len(known)} known"
    return f"unknown {what} {name!r}{hint}"
