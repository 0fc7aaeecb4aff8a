"""The task record: one per row of any dataset or generator, and the errors that name a bad row.

Why one record: every source (a verl parquet, a JSONL, a HF directory, a generator) ends as the same
`TaskRecord`, so the prompt source, `m1flow data validate` and the tests turn rows into prompts one
way (`to_prompt`). A record is checked when it is built: its verifier kind must be known and its
spec must match that kind's schema (m1flow/kinds/), so a missing gold fails at the row that
lacks it, never as a silently wrong reward later.
"""
from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.kinds import SpecError, Verifier, check_verifier, fill_from_prompt

__all__ = ["Message", "RowError", "SpecError", "TaskRecord", "Verifier"]  # SpecError, Verifier: m1flow.kinds's


class RowError(Exception):
    """A bad row: which file, which row (counted from 0), which field and why."""

    def __init__(self, path: str, row: int, field: str, why: str) -> None:
        super().__init__(f"{path}:{row}: {field}: {why}")
        self.path, self.row, self.field, self.why = str(path), row, field, why

    def __reduce__(self):  # picklable, for worker processes
        return RowError, (self.path, self.row, self.field, self.why)


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str


class TaskRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(description='unique within the source; the prompt id is f"{source}/{id}"')
    source: str = Field(description='dataset or generator name, e.g. "gsm8k", "humaneval", "rg:leg_counting"')
    domain: Literal["reasoning", "general"] = "reasoning"
    prompt: str | list[Message]
    verifier: Verifier
    difficulty: float | None = None
    license: str = ""

    @model_validator(mode="after")
    def _check(self) -> "TaskRecord":
        if isinstance(self.prompt, list) and not any(m.role == "user" for m in self.prompt):
            raise SpecError("prompt", "the chat messages hold no user turn")
        if not self.prompt:
            raise SpecError("prompt", "empty")
        fill_from_prompt(self.verifier, self.instructions)
        check_verifier(self.verifier)
        return self

    @property
    def instructions(self) -> str:
        """Every system and user turn, in order: where a prompt states its options and the form it asks
        the answer in."""
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n".join(m.content for m in self.prompt if m.role != "assistant")

    @property
    def text(self) -> str:
        """The user turn: the prompt itself, or the last user message of a chat prompt."""
        if isinstance(self.prompt, str):
            return self.prompt
        return next(m.content for m in reversed(self.prompt) if m.role == "user")

    def to_prompt(self, group_size: int, run_id: str = "local", prompt_id: str | None = None,
                  header: events.Header | None = None) -> events.Prompt:
        """The `Prompt` published on `prompts`: spec as sorted JSON, task type = the kind before ':'.
        header: one built for a whole batch (the source stamps each prompt's id after), instead of
        a fresh one (a uuid4 and a clock read) per record."""
        messages = [events.ChatMessage(role=m.role, content=m.content) for m in self.prompt] \
            if isinstance(self.prompt, list) else []
        verifier = self.verifier
        spec = events.VerifierSpec(kind=verifier.kind, gold=verifier.gold,
                                   spec_json=json.dumps(verifier.spec, sort_keys=True) if verifier.spec else "{}",
                                   payload_uri=verifier.payload_uri)
        return events.Prompt(header=header if header is not None else codec.header("source", run_id=run_id),
                             prompt_id=prompt_id or f"{self.source}/{self.id}", task_type=self.verifier.family,
                             text=self.text, verifier=spec, group_size=group_size, source=self.source,
                             domain=self.domain, messages=messages)

