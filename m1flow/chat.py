"""The conversation format policies are trained and sampled in: a chat template with a reasoning
section, as the report's models use (`<think>` reasoning `</think>` then the answer).

The generation prompt opens the reasoning section, so a response reads
"reasoning</think>\\nanswer<|im_end|>". `<think>` and `</think>` are ordinary added tokens (not
special), so they survive decoding and a verifier can tell the reasoning from the answer.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

THINK_START, THINK_END = "<think>", "</think>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
PAD = "<|endoftext|>"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['role'] == 'assistant' %}<think>\n"
    "{% if message['reasoning_content'] is defined %}{{ message['reasoning_content'] }}{% endif %}"
    "</think>\n{% endif %}"
    "{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def response_text(answer: str, reasoning: str = "") -> str:
    """What a policy writes after the generation prompt (end-of-turn token not included)."""
    return f"{reasoning}{THINK_END}\n{answer}"


def after_reasoning(response: str) -> str:
    """The part of a response after the last </think>; the whole response when there is none."""
    cut = response.rfind(THINK_END)
    return response if cut < 0 else response[cut + len(THINK_END):]


Message = Mapping[str, str]  # {"role": ..., "content": ...}, as HF chat templates take it
PromptInput = str | Sequence[Message]


def conversation(messages: Iterable[Any]) -> list[dict[str, str]]:
    """A dataset's chat prompt (`events.ChatMessage`s or role/content mappings) as template input.

    Raises ValueError naming the turn when a role is missing or no turn has content."""
    turns = []
    for i, m in enumerate(messages):
        role, content = (m["role"], m["content"]) if isinstance(m, Mapping) else (m.role, m.content)
        if not role:
            raise ValueError(f"messages[{i}].role: must not be empty")
        turns.append({"role": role, "content": content})
    if not any(t["content"] for t in turns):
        raise ValueError("messages: no turn has content")
    return turns


def prompt_ids(tokenizer: Any, prompt: PromptInput) -> list[int]:
    """Token ids of a prompt followed by the generation prompt, in the tokenizer's own chat template
    (any HF model's). A text is one user turn; a conversation (system, user, ...) is rendered whole.
    Without a template: the turns' contents, a blank line apart, after the bos token."""
    turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else conversation(prompt)
    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        return list(tokenizer.encode(rendered, add_special_tokens=False))
    text = "\n\n".join(t["content"] for t in turns if t["content"])
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    bos = getattr(tokenizer, "bos_token_id", None)
    return [bos, *ids] if bos is not None else ids
