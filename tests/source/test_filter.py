"""The online difficulty filter's judgements: band, strikes, partial credit by variance, the window step, state."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from m1flow.contracts import events
from svc_source.filter import EASY, HARD, DifficultyFilter, FilterConfig, WindowStep, pack, unpack, verdict


def group(pid: str, correct=None, rewards=None, incomplete=False) -> events.ScoredGroup:
    samples = ([events.ScoredSample(correct=c, reward=float(c)) for c in correct] if correct is not None
               else [events.ScoredSample(reward=r) for r in rewards])
    return events.ScoredGroup(prompt_id=pid, samples=samples, incomplete=incomplete)


def test_verdicts_use_the_raw_outcome_and_variance_for_partial_credit():
    assert verdict(group("p", [True] * 4), 0.0, 0.9, 1e-4) == (EASY, 1.0)
    assert verdict(group("p", [False] * 4), 0.0, 0.9, 1e-4) == (HARD, 0.0)
    assert verdict(group("p", [True, False, False, False]), 0.0, 0.9, 1e-4) == ("", 0.25)
    assert verdict(group("p", rewards=[0.5, 0.5, 0.5]), 0.0, 0.9, 1e-4)[0] == HARD  # flat: no advantage
    assert verdict(group("p", rewards=[0.9, 1.0, 0.95]), 0.0, 0.9, 1e-4)[0] == ""   # high mean, but it varies


def test_easy_rows_retire_at_once_hard_ones_after_their_strikes():
    f = DifficultyFilter(FilterConfig(enabled=True, hard_strikes=2), {"a": 10})
    f.drew("a/1", "a", 1)
    f.drew("a/2", "a", 2)
    assert f.scored(group("a/1", [True] * 4)) == EASY and f.is_retired("a", 1)
    assert f.scored(group("a/2", [False] * 4)) == "" and not f.is_retired("a", 2)
    assert f.scored(group("a/2", [False] * 4)) == HARD and f.is_retired("a", 2)
    assert f.scored(group("a/9", [True] * 4)) == ""  # not drawn by this source: not its business
    assert f.scored(group("a/1", [True] * 4, incomplete=True)) == ""
    assert f.counts() == {"a": {EASY: 1, HARD: 1}}


def test_an_in_band_group_clears_the_strikes():
    f = DifficultyFilter(FilterConfig(enabled=True, hard_strikes=2), {"a": 10})
    f.drew("a/3", "a", 3)
    f.scored(group("a/3", [False] * 4))
    f.scored(group("a/3", [True, False, False, False]))
    assert f.scored(group("a/3", [False] * 4)) == ""  # one strike again, not two


def test_a_source_with_every_row_retired_is_spent():
    f = DifficultyFilter(FilterConfig(enabled=True), {"a": 2})
    for row in (0, 1):
        f.drew(f"a/{row}", "a", row)
        f.scored(group(f"a/{row}", [True] * 2))
    assert f.spent("a")


def test_the_window_step_readmits_hard_rows_and_tightens_the_easy_bound():
    f = DifficultyFilter(FilterConfig(enabled=True, hard_strikes=1, window_step=WindowStep(easy_above=0.7)), {"a": 10})
    for row, outcome in [(1, [False] * 4), (2, [True, True, True, False]), (3, [True] * 4)]:
        f.drew(f"a/{row}", "a", row)
        f.scored(group(f"a/{row}", outcome))
    assert f.retired["a"] == {1: HARD, 3: EASY}
    assert f.window_stage() == (1, 1)  # row 1 back; row 2 (0.75) now above the easy bound
    assert f.retired["a"] == {2: EASY, 3: EASY}


def test_retired_rows_round_trip_through_a_state_record():
    rows = {0: EASY, 5: HARD, 1_000_000: EASY, 7: HARD}
    assert unpack(pack(rows)) == rows
    f = DifficultyFilter(FilterConfig(enabled=True), {"a": 2_000_000})
    f.retired["a"] = dict(rows)
    f.changed.add("a")
    (name, record), = f.records(force=True)
    g = DifficultyFilter(FilterConfig(enabled=True), {"a": 2_000_000})
    g.restore({"k/retired/a": events.SourceState.FromString(record.SerializeToString())})
    assert name == "a" and g.retired["a"] == rows


def test_bad_bands_are_refused():
    with pytest.raises(ValidationError, match="lo < hi"):
        FilterConfig(band=(0.9, 0.1))
    with pytest.raises(ValidationError, match="gsm"):
        FilterConfig(bands={"gsm": (0.0, 1.5)})
