"""How the records of one sample name each other, in one place (the rollout service writes these
ids, the trace reads them back): a group is a prompt message's G completions, `<prompt id>/<the
first 8 characters of the prompt's message id>`; a rollout is `<group id>/<index>`. Prompt ids
contain '/' themselves (`gsm8k/123`), so an id alone can be read more than one way: `readings`
lists them, most specific first, and the trace keeps the first one the topics confirm."""
from __future__ import annotations

from dataclasses import dataclass

TAG_LEN = 8


def group_id_for(prompt_id: str, message_id: str) -> str:
    """The group id a prompt's rollouts (and its ScoredGroup) carry: the prompt id and the prompt
    message's id, so one prompt published twice under two message ids makes two groups."""
    return f"{prompt_id}/{message_id[:TAG_LEN]}"


def rollout_id_for(group_id: str, index: int) -> str:
    return f"{group_id}/{index}"


@dataclass(frozen=True)
class Reading:
    """One way to read an id: the prompt it names, the message tag of its group (a group or rollout
    id), and the sample index (a rollout id)."""

    kind: str  # "rollout", "group" or "prompt"
    prompt_id: str
    tag: str | None = None
    index: int | None = None

    @property
    def group_id(self) -> str | None:
        return f"{self.prompt_id}/{self.tag}" if self.tag is not None else None


def readings(text: str) -> list[Reading]:
    """Every reading of `text` the id formats allow, most specific first (rollout, group, prompt)."""
    out: list[Reading] = []
    parts = text.split("/")
    if len(parts) >= 3 and parts[-1].isdigit() and len(parts[-2]) == TAG_LEN and parts[-3]:
        out.append(Reading("rollout", "/".join(parts[:-2]), parts[-2], int(parts[-1])))
    if len(parts) >= 2 and len(parts[-1]) == TAG_LEN and parts[-2]:
        out.append(Reading("group", "/".join(parts[:-1]), parts[-1]))
    if text:
        out.append(Reading("prompt", text))
    return out
