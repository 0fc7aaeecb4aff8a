"""The task record, one per row whatever the file format.

Placeholder written on wt/rgcode against the shared data API until wt/data lands: the integrator
keeps wt/data's version of this file (same names and signatures).
"""
from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field

from m1flow.bus import codec
from m1flow.contracts import events


class Verifier(BaseModel):
    kind: str
    gold: str = ""
    spec: dict[str, Any] = Field(default_factory=dict)
    payload_uri: str = ""


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class TaskRecord(BaseModel):
    id: str
    source: str
    domain: Literal["reasoning", "general"] = "reasoning"
    prompt: str | list[Message]
    verifier: Verifier
    difficulty: float | None = None
    license: str = ""

    def to_prompt(self, group_size: int, run_id: str = "local", prompt_id: str | None = None) -> events.Prompt:
        messages = [] if isinstance(self.prompt, str) else self.prompt
        text = self.prompt if isinstance(self.prompt, str) else next(
            (m.content for m in reversed(messages) if m.role == "user"), "")
        spec = events.VerifierSpec(kind=self.verifier.kind, gold=self.verifier.gold,
                                   spec_json=json.dumps(self.verifier.spec, sort_keys=True) if self.verifier.spec else "",
                                   payload_uri=self.verifier.payload_uri)
        return events.Prompt(header=codec.header("source", run_id=run_id),
                             prompt_id=prompt_id or f"{self.source}/{self.id}",
                             task_type=self.verifier.kind.split(":", 1)[0], text=text, verifier=spec,
                             group_size=group_size, source=self.source, domain=self.domain,
                             messages=[events.ChatMessage(role=m.role, content=m.content) for m in messages])
