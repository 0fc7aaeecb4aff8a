"""Chat prompts: a dataset's whole conversation (system, user, ...) is tokenized in the policy's chat
template by the one `chat.prompt_ids`, which every engine goes through; a text stays one user turn."""
from __future__ import annotations

import pytest

from m1flow import chat
from m1flow.contracts import events
from m1flow.tokenizer import build_tokenizer
from m1flow.engines.base import Engine
from m1flow.engines.hf import HFEngine
from m1flow.engines.native import NativeEngine
from m1flow.engines.vllm_engine import VllmEngine
from m1flow.engines.prompts import prompt_input, prompt_text

SYSTEM = "Answer with a number."
CONVERSATION = [events.ChatMessage(role="system", content=SYSTEM), events.ChatMessage(role="user", content="12+7=")]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_a_system_and_user_conversation_renders_whole_in_the_template(tok):
    ids = chat.prompt_ids(tok, chat.conversation(CONVERSATION))
    assert tok.decode(ids) == (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n12+7=<|im_end|>\n"
                               "<|im_start|>assistant\n<think>\n")
    # a text is the same as a conversation of one user turn
    assert chat.prompt_ids(tok, "12+7=") == chat.prompt_ids(tok, [{"role": "user", "content": "12+7="}])
    assert chat.prompt_ids(tok, "12+7=") != ids


def test_without_a_template_the_turns_follow_the_bos_token(tok):
    class Plain:
        chat_template = None
        bos_token_id = 7

        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

    ids = chat.prompt_ids(Plain(), [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    assert ids == [7, ord("S"), ord("\n"), ord("\n"), ord("U")]


def test_a_bad_conversation_is_refused_naming_the_turn():
    with pytest.raises(ValueError, match=r"messages\[1\]\.role"):
        chat.conversation([events.ChatMessage(role="system", content="S"), events.ChatMessage(content="U")])
    with pytest.raises(ValueError, match="no turn has content"):
        chat.conversation([events.ChatMessage(role="user")])


def test_every_engine_tokenizes_prompts_through_the_one_chat_home(tok):
    for engine_class in (NativeEngine, HFEngine, VllmEngine):
        assert engine_class.prompt_ids is Engine.prompt_ids  # no engine renders prompts its own way
    engine = NativeEngine(batch_groups=1, group_size=1)
    engine.tokenizer = tok
    assert engine.prompt_ids(chat.conversation(CONVERSATION)) == chat.prompt_ids(tok, chat.conversation(CONVERSATION))


def test_a_prompt_with_messages_is_sampled_from_the_whole_conversation():
    chat_prompt = events.Prompt(prompt_id="p", text="", messages=CONVERSATION)
    assert prompt_input(chat_prompt) == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "12+7="}]
    assert prompt_text(chat_prompt) == "12+7="  # what verifiers and judges read: the last user turn
    both = events.Prompt(prompt_id="q", text="12+7=", messages=CONVERSATION)
    assert prompt_text(both) == "12+7=" and prompt_input(both) == prompt_input(chat_prompt)
    plain = events.Prompt(prompt_id="r", text="3+4=")
    assert prompt_input(plain) == "3+4=" and prompt_text(plain) == "3+4="
