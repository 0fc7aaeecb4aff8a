"""The replay comparison's matching (ops/compare.py): records matched by trace id, and exactly the
differences that matter reported for each kind of replay."""
from __future__ import annotations

from m1flow.contracts import events
from m1flow.status import Status
from ops.compare import Step, compare_learner, compare_rollouts, compare_verdicts, detail_shape


def group(gid: str, verdicts: list[tuple], kind: str = "arith") -> events.ScoredGroup:
    """verdicts: (status, correct or None, reward, detail) per sample."""
    g = events.ScoredGroup(group_id=gid, group_size=len(verdicts), verifier_kind=kind)
    for i, (status, correct, reward, detail) in enumerate(verdicts):
        s = g.samples.add(rollout_id=f"{gid}/{i}", index=i, status=status, reward=reward, detail=detail)
        if correct is not None:
            s.correct = correct
    return g


OK, FMT = Status.OK, Status.FORMAT_ERROR


def test_only_the_samples_whose_verdict_changed_are_reported_grouped_by_kind_and_detail():
    original = {"a": group("a", [(OK, True, 1.0, "got 7, want 7"), (OK, False, 0.0, "got 8, want 7")]),
                "b": group("b", [(FMT, None, 0.0, "not a single integer: 'x'"), (OK, False, 0.0, "got 3, want 2")],
                           kind="math")}
    replayed = {"a": group("a", [(OK, True, 1.0, "got 7, want 7"), (OK, True, 1.0, "got 8, want 7 (off by one)")]),
                "b": group("b", [(FMT, None, 0.0, "not a single integer: 'x'"), (OK, True, 1.0, "got 3, want 2 (off by one)")],
                           kind="math")}
    diff = compare_verdicts(original, replayed)
    assert diff.differs and (diff.groups, diff.samples) == (2, 4)
    assert [c.rollout_id for c in diff.flips] == ["a/1", "b/1"]
    assert diff.flips[0].changed == ["correct", "reward", "detail"]
    assert diff.by_kind() == {"arith": 1, "math": 1}
    assert diff.by_detail() == {("arith", "got N, want N", "got N, want N (off by one)"): 1,
                                ("math", "got N, want N", "got N, want N (off by one)"): 1}
    assert "2 verdicts flipped" in diff.lines()[0]


def test_an_identical_replay_differs_in_nothing_and_a_reward_or_detail_change_is_no_flip():
    original = {"a": group("a", [(OK, True, 1.0, "got 7, want 7"), (OK, False, 0.0, "got 8, want 7")])}
    same = {"a": group("a", [(OK, True, 1.0, "got 7, want 7"), (OK, False, 0.0, "got 8, want 7")])}
    assert not compare_verdicts(original, same).differs
    reworded = {"a": group("a", [(OK, True, 0.5, "got 7, want 7"), (OK, False, 0.0, "8 is not 7")])}
    diff = compare_verdicts(original, reworded)
    assert diff.differs and not diff.flips and [c.changed for c in diff.changes] == [["reward"], ["detail"]]


def test_a_status_change_is_a_flip_and_missing_originals_and_samples_are_differences():
    original = {"a": group("a", [(OK, False, 0.0, "got 8, want 7"), (OK, True, 1.0, "got 7, want 7")])}
    replayed = {"a": group("a", [(Status.VERIFIER_TIMEOUT, None, 0.0, "timed out")]),
                "z": group("z", [(OK, True, 1.0, "")])}
    diff = compare_verdicts(original, replayed)
    assert [c.changed for c in diff.flips] == [["status", "correct", "detail"]]
    assert diff.no_original == ["z"] and diff.unmatched_samples == ["a/1"]


def test_detail_shapes_mask_numbers_and_quoted_text():
    assert detail_shape("got -12, want 3.5") == "got N, want N"
    assert detail_shape("not a single integer: '12 apples'") == "not a single integer: '…'"


def rollout(rid: str, tokens: list[int], logprobs: list[float], version: int = 3) -> events.Rollout:
    return events.Rollout(rollout_id=rid, group_id=rid.rsplit("/", 1)[0], token_ids=tokens, logprobs=logprobs,
                          policy_version=version)


def test_rollouts_differ_where_tokens_do_and_log_probs_are_judged_on_the_common_prefix():
    original = {"g/0": rollout("g/0", [1, 2, 3], [-0.1, -0.2, -0.3]),
                "g/1": rollout("g/1", [1, 2, 3], [-0.1, -0.2, -0.3]),
                "g/2": rollout("g/2", [5, 6], [-1.0, -1.0])}
    replayed = {"g/0": rollout("g/0", [1, 2, 3], [-0.1, -0.2, -0.3004]),  # equal within the tolerance
                "g/1": rollout("g/1", [1, 2, 9, 9], [-0.1, -0.2, -2.0, -2.0]),
                "g/2": rollout("g/2", [5, 6], [-1.0, -1.5])}
    diff = compare_rollouts(original, replayed)
    assert diff.samples == 3 and [c.rollout_id for c in diff.changes] == ["g/1", "g/2"]
    tokens, logps = diff.changes
    assert (tokens.tokens_equal, tokens.first_difference, tokens.lengths, tokens.logprobs_agree) == (False, 2, (3, 4), True)
    assert (logps.tokens_equal, logps.logprobs_agree) == (True, False) and abs(logps.logprob_max_diff - 0.5) < 1e-6
    assert not compare_rollouts(original, {"g/0": replayed["g/0"]}).differs


def test_the_first_step_whose_loss_or_weights_differ_is_named():
    original = {0: Step(0, None, "s0"), 1: Step(1, 0.5, "s1"), 2: Step(2, 0.25, "s2"), 3: Step(3, 0.1, None)}
    assert not compare_learner(original, {0: Step(0, None, "s0"), 1: Step(1, 0.5, "s1")}).differs
    diff = compare_learner(original, {0: Step(0, None, "s0"), 1: Step(1, 0.5, "s1"), 2: Step(2, 0.25, "other"),
                                      3: Step(3, 0.2, None)})
    assert (diff.first, diff.reason) == (2, "weights s2 vs other")
    assert [r["weights"] for r in diff.rows] == ["equal", "equal", "DIFFER", "unknown"]
    loss = compare_learner(original, {1: Step(1, 0.5 + 1e-3, "s1")})
    assert loss.first == 1 and loss.reason.startswith("loss")
    assert compare_learner(original, {7: Step(7, 0.1, "x")}).no_original == [7]
