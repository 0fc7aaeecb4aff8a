"""The schema of each verifier kind, by the kind's prefix (the part before ':').

Why here and not in svc_reward: a row is checked where it is read (the prompt source, `m1flow data
validate`), before it becomes a prompt; the reward service only scores. A schema checks what a
verifier needs to give a reward that means something: a gold answer for math, test cases for code,
FAIL_TO_PASS tests for SWE, a reasoning-gym task that exists. The error names the field.
"""
from __future__ import annotations

import difflib
import functools
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from m1flow.data.record import SpecError, Verifier
from m1flow.registry import Registry

NonEmpty = Annotated[str, Field(min_length=1)]


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


SPECS: Registry[type[KindSchema]] = Registry("verifier kind")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


@SPECS.register("arith")
class ArithSchema(KindSchema):
    gold: Annotated[str, Field(pattern=r"^-?\d+$", description="the integer result")]
    spec: dict[str, Any] = {}


class MathSpec(_Open):
    style: Literal["auto", "boxed", "gsm8k", "math_dapo"] = "auto"


@SPECS.register("math")
class MathSchema(KindSchema):
    gold: NonEmpty
    spec: MathSpec = MathSpec()


class PuzzleSpec(_Open):
    task: NonEmpty
    seed: int
    difficulty: int
    question: NonEmpty
    solution: NonEmpty
    metadata: dict[str, Any]


@SPECS.register("logic")
class LogicSchema(KindSchema):
    spec: PuzzleSpec

    @model_validator(mode="after")
    def _family(self) -> "LogicSchema":
        if self.spec.task != self.suffix:
            raise SpecError("verifier.spec.task", f"{self.spec.task!r} is not the kind's family {self.suffix!r}")
        families = _logic_families()
        if families is not None and self.suffix not in families:
            raise SpecError("verifier.kind", _unknown("logic family", self.suffix, families))
        return self


class StdioTest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stdin: str = ""
    expected_stdout: str


class StdioSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    style: Literal["stdio"] = "stdio"
    language: str = "python"
    tests: Annotated[list[StdioTest], Field(min_length=1)]


class FunctionSpec(BaseModel):
    """HumanEval style: the program, then `test` (defining check), then check(entry_point), must exit 0."""
    model_config = ConfigDict(extra="allow")
    style: Literal["function"]
    language: str = "python"
    test: NonEmpty
    entry_point: NonEmpty
    prompt: str = ""


@SPECS.register("code")
class CodeSchema(KindSchema):
    """gold: a reference solution (optional; without it `validate` checks the schema only)."""
    spec: Annotated[StdioSpec | FunctionSpec, Field(discriminator=None)]

    @model_validator(mode="before")
    @classmethod
    def _style(cls, data: Any) -> Any:  # pick the member by style, so errors name the right fields
        spec = data.get("spec") if isinstance(data, dict) else None
        if isinstance(spec, dict):
            model = FunctionSpec if spec.get("style") == "function" else StdioSpec
            try:
                data = {**data, "spec": model.model_validate(spec)}
            except ValidationError as exc:
                raise SpecError(*_where(exc, "verifier.spec")) from None
        return data


class SweSpec(_Open):
    fail_to_pass: Annotated[list[NonEmpty], Field(min_length=1)]
    pass_to_pass: list[NonEmpty] = []
    test_command: str | None = None
    limits: dict[str, Any] | None = None
    repo_tar: str | None = None  # base64, prompts from before the task store


@SPECS.register("swe")
class SweSchema(KindSchema):
    """gold: the reference patch (optional)."""
    spec: SweSpec

    @model_validator(mode="after")
    def _snapshot(self) -> "SweSchema":
        if not self.payload_uri and not self.spec.repo_tar:
            raise SpecError("verifier.payload_uri", "no repository snapshot: give payload_uri (task store) "
                                                    "or spec.repo_tar")
        return self


class GenrmSpec(_Open):
    candidates: list[str] | None = None


@SPECS.register("genrm")
class GenrmSchema(KindSchema):
    """gold: a reference answer (optional)."""
    spec: GenrmSpec = GenrmSpec()


class RgSpec(_Open):
    task: NonEmpty
    config: dict[str, Any] = {}
    seed: int
    index: Annotated[int, Field(ge=0)]


@SPECS.register("rg")
class RgSchema(KindSchema):
    """A reasoning-gym item by what regenerates it (task, config, seed, index), not the item."""
    spec: RgSpec

    @model_validator(mode="after")
    def _task(self) -> "RgSchema":
        if self.spec.task != self.suffix:
            raise SpecError("verifier.spec.task", f"{self.spec.task!r} is not the kind's task {self.suffix!r}")
        check_rg_task(self.suffix)
        return self


_NEEDS_SUFFIX = {"logic": "logic:<family>", "rg": "rg:<task>"}


def check_verifier(verifier: Verifier) -> None:
    """Raise SpecError naming the field when the verifier does not fit its kind's schema."""
    family, _, suffix = verifier.kind.partition(":")
    if family not in SPECS:
        raise SpecError("verifier.kind", f"unknown verifier kind {verifier.kind!r}; known: {', '.join(SPECS.names())}")
    if family in _NEEDS_SUFFIX and not suffix:
        raise SpecError("verifier.kind", f"{verifier.kind!r} names no task: write {_NEEDS_SUFFIX[family]}")
    try:
        # the fields as they are, not model_dump(): a dump deep-copies the spec only to be validated again
        SPECS.get(family).model_validate({"kind": verifier.kind, "gold": verifier.gold, "spec": verifier.spec,
                                          "payload_uri": verifier.payload_uri})
    except ValidationError as exc:
        raise SpecError(*_where(exc, "verifier")) from None


def _where(exc: ValidationError, prefix: str) -> tuple[str, str]:
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


def _unknown(what: str, name: str, known: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; {len(known)} known"
    return f"unknown {what} {name!r}{hint}"


@functools.cache
def rg_task_names() -> tuple[str, ...]:
    """reasoning-gym's task names (imports the library once: about 1.4 s)."""
    try:
        from m1flow.tasks import rg  # type: ignore[attr-defined]

        return tuple(rg.task_names())
    except ImportError:
        pass
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        raise SpecError("verifier.kind", "rg:<task> needs reasoning-gym: pip install 'm1flow[rg]'") from None
    return tuple(sorted(DATASETS))


def check_rg_task(task: str) -> None:
    names = rg_task_names()
    if task not in names:
        raise SpecError("verifier.spec.task", _unknown("reasoning-gym task", task, names))


def _logic_families() -> tuple[str, ...] | None:
    """The library's logic families (m1flow.tasks.logic), or None before it exists."""
    try:
        from m1flow.tasks import logic  # type: ignore[attr-defined]
    except ImportError:
        return None
    tasks = getattr(logic, "TASKS", None)
    return tuple(tasks) if tasks is not None else None

