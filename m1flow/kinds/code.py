"""`code`: a program run in svc_sandbox on stdin/stdout tests, or HumanEval style with a test suite
that must exit 0; the answer is the last fenced code block. The gold, if any, is a reference solution."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from m1flow.kinds.base import Kind, KindSchema, NoGold, SpecError, Style, Verifier, declare, where

_FENCED = "```{language}\n{answer}\n```"
STYLES = (Style("stdio", reads="a fenced code block", writes=_FENCED),
          Style("function", reads="a fenced code block", writes=_FENCED))


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
    test: Annotated[str, Field(min_length=1)]
    entry_point: Annotated[str, Field(min_length=1)]
    prompt: str = ""


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
                raise SpecError(*where(exc, "verifier.spec")) from None
        return data


def _gold(verifier: Verifier, style: Style) -> str:
    spec, program = verifier.spec, verifier.gold
    if not program.strip():
        raise NoGold("code without a reference solution (verifier.gold)")
    if spec.get("style") == "function" and f"def {spec['entry_point']}" not in program:
        program = spec.get("prompt", "") + program  # HumanEval's canonical solutions are function bodies
    return style.write(program.rstrip(), language=spec.get("language", "python"))


CODE = declare(Kind(name="code", schema=CodeSchema, gold=_gold, styles=STYLES, sandbox=True))
