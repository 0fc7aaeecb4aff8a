"""A `Prompt` as an engine takes it and as a verifier reads it: the one conversion svc_rollout and
svc_eval share, so a held-out prompt is tokenized exactly as a training prompt is."""
from __future__ import annotations

from m1flow import chat
from m1flow.contracts import events


def prompt_input(prompt: events.Prompt) -> chat.PromptInput:
    """What the engine tokenizes: the whole conversation when the prompt carries one, else its text."""
    return chat.conversation(prompt.messages) if prompt.messages else prompt.text


def prompt_text(prompt: events.Prompt) -> str:
    """The Rollout's prompt_text (what verifiers and judges read): the text, else the last user turn."""
    if prompt.text or not prompt.messages:
        return prompt.text
    users = [m.content for m in prompt.messages if m.role == "user"]
    return users[-1] if users else prompt.messages[-1].content
