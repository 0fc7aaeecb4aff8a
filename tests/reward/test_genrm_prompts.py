"""Verdict parsing: what a judge may write, and what must be a judge error rather than a verdict."""
import pytest

from svc_reward.genrm.prompts import (END_A, END_B, START_A, START_B, Verdict, VerdictParseError,
                                      parse_verdict, render, render_plain)

READABLE = [
    ("Both are fine but A is exact. [[A]]", Verdict.FIRST),
    ("[[B]]", Verdict.SECOND),
    ("Equally good.\n[[TIE]]", Verdict.TIE),
    ("[[C]]", Verdict.TIE),  # MT-Bench's tie mark
    ("[[ a ]]", Verdict.FIRST),
    ("I must answer [[A]], [[B]] or [[TIE]]. After checking: [[B]]", Verdict.SECOND),
    ("<think>first thought [[A]]</think>Final: [[B]]", Verdict.SECOND),
    ("Verdict: B", Verdict.SECOND),
    ("analysis...\n**Final verdict: A**", Verdict.FIRST),
    ("Score: -1", Verdict.SECOND),
    ("score = +1", Verdict.FIRST),
    ("Preference: 0", Verdict.TIE),
    ("Verdict: TIE", Verdict.TIE),
]

UNREADABLE = [
    "",
    "Response A is better.",
    "Score: 7",  # a rating, not a pairwise verdict
    "<think>[[A]] looks right but let me check",  # cut off while thinking
    "<think>[[A]]</think> I cannot decide.",
    "[A]",
]


@pytest.mark.parametrize("text,verdict", READABLE)
def test_readable_verdicts(text, verdict):
    assert parse_verdict(text) is verdict


@pytest.mark.parametrize("text", UNREADABLE)
def test_unreadable_reply_is_an_error_not_a_verdict(text):
    with pytest.raises(VerdictParseError):
        parse_verdict(text)


def test_render_shows_first_as_a_and_second_as_b():
    messages = render("What is 2+2?", "four", "five")
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert "What is 2+2?" in user
    assert user.index(START_A) < user.index("four") < user.index(END_A)
    assert user.index(START_B) < user.index("five") < user.index(END_B)
    assert user.index(END_A) < user.index(START_B)
    for mark in ("[[A]]", "[[B]]", "[[TIE]]"):
        assert mark in messages[0]["content"]


def test_render_plain_keeps_every_message_and_ends_on_the_assistant_turn():
    text = render_plain(render("q", "x", "y"))
    assert text.startswith("System: ") and "\n\nUser: " in text and text.endswith("Assistant:")
