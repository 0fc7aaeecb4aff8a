"""The online difficulty filter's judgements: band, strikes, partial credit by variance, the window step, state."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from m1flow.contracts import events
from svc_source.filter import EASY, HARD, DifficultyFilter, FilterConfig, WindowStep, flat, outcomes, pack, unpack


def group(pid: str, correct=None, rewards=None, incomplete=False) -> events.ScoredGroup:
    samples = ([events.ScoredSample(correct=c, reward=float(c)) for c in correct] if correct is not None
               else [events.ScoredSample(reward=r) for r in rewards])
    return events.ScoredGroup(prompt_id=pid, samples=samples, incomplete=incomplete)


def test_a_group_is_counted_by_raw_outcome_and_partial_credit_by_variance():
    assert outcomes(group("p", [True, False, True, True])) == (3, 4)
    assert outcomes(group("p", rewards=[0.5, 0.5])) is None
    assert flat(group("p", rewards=[0.5, 0.5, 0.5]), 1e-4)  # no advantage
    assert not flat(group("p", rewards=[0.9, 1.0, 0.95]), 1e-4)  # high mean, but it varies


def test_easy_rows_retire_after_min_samples_hard_ones_after_hard_samples():
    f = DifficultyFilter(FilterConfig(enabled=True, min_samples=8, hard_samples=12), {"a": 10})
    f.drew("a/1", "a", 1)
    f.drew("a/2", "a", 2)
    assert f.scored(group("a/1", [True] * 4)) == ""  # one group of 4 is too little evidence
    assert f.scored(group("a/1", [True] * 4)) == EASY and f.is_retired("a", 1)
    for _ in range(2):
        assert f.scored(group("a/2", [False] * 4)) == ""
    assert f.scored(group("a/2", [False] * 4)) == HARD and f.is_retired("a", 2)
    assert f.scored(group("a/9", [True] * 4)) == ""  # not drawn by this source: not its business
    assert f.scored(group("a/1", [True] * 4, incomplete=True)) == ""
    assert f.counts() == {"a": {EASY: 1, HARD: 1}}


def test_one_pass_keeps_a_row_in_band_and_old_evidence_fades():
    f = DifficultyFilter(FilterConfig(enabled=True, hard_samples=8, memory_samples=8), {"a": 10})
    f.drew("a/3", "a", 3)
    f.scored(group("a/3", [True, False, False, False]))
    assert f.scored(group("a/3", [False] * 4)) == ""  # 1 of 8: above the band's bottom (0)
    assert f.rate("a", 3) == 1 / 8
    f.scored(group("a/3", [False] * 4))  # 12 samples > memory 8: halved to (0, 6)
    assert f.rate("a", 3) == 0.0 and f.scored(group("a/3", [False] * 4)) == HARD


def test_flat_partial_credit_groups_retire_after_their_strikes():
    f = DifficultyFilter(FilterConfig(enabled=True, hard_strikes=2), {"a": 10})
    f.drew("a/4", "a", 4)
    assert f.scored(group("a/4", rewards=[0.5] * 4)) == ""
    assert f.scored(group("a/4", rewards=[0.2, 0.9, 0.5, 0.5])) == ""  # it varied: strikes cleared
    assert f.scored(group("a/4", rewards=[0.5] * 4)) == ""
    assert f.scored(group("a/4", rewards=[0.5] * 4)) == HARD


def test_a_source_with_every_row_retired_is_spent():
    f = DifficultyFilter(FilterConfig(enabled=True, min_samples=2), {"a": 2})
    for row in (0, 1):
        f.drew(f"a/{row}", "a", row)
        f.scored(group(f"a/{row}", [True] * 2))
    assert f.spent("a")


def test_the_window_step_readmits_hard_rows_and_tightens_the_easy_bound():
    f = DifficultyFilter(FilterConfig(enabled=True, min_samples=4, hard_samples=4,
                                      window_step=WindowStep(easy_above=0.7)), {"a": 10})
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
