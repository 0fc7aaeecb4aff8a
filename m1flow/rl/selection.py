"""Which scored samples and groups the learner trains on, and with what advantages.

A group is first checked for completeness (`check_group`): a record cut short must never be
trained as if whole. Then each sample is usable or not: an infrastructure failure (a `Status` from
16 up) says nothing about the policy, a stale sample (more than `max_staleness` policy versions
behind the version being trained) comes from a policy too far away, a sample with no tokens has
nothing to train. The usable rewards are shaped and turned into advantages; a group with fewer
than two usable samples, or (DAPO's dynamic sampling) whose shaped rewards are all equal, teaches
nothing and is skipped before any tensor is built.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from m1flow.contracts import events
from m1flow.rl.advantages import advantages
from m1flow.rl.legacy import rewards_are_shaped
from m1flow.rl.shaping import ShapingConfig, shaped_reward
from m1flow.status import Status, status_of

EQUAL_TOL = 1e-9

# Why a group was skipped (the label of the learner's skip counters).
TOO_FEW_USABLE = "too_few_usable"
ALL_EQUAL = "all_rewards_equal"

# What the learner says on `metrics` about each group, so a group's fate can be read back from the
# topics (`m1flow trace`): trained in the step that made version `step` (value: samples trained), or
# skipped while `step` was current (value: the running count of that reason, label `reason`). Both
# name the group and the samples selection left out ("stale=2,infra_failure=1").
GROUP_TRAINED = "learner/group_trained"
GROUP_SKIPPED = "learner/groups_skipped"
GROUP_LABEL, LEFT_OUT_LABEL = "group", "left_out"


def left_out_label(counts: dict[str, int]) -> str:
    """A group's left-out samples by reason, as one label value ("" when none)."""
    return ",".join(f"{reason}={n}" for reason, n in sorted(counts.items()) if n)


def parse_left_out(label: str) -> dict[str, int]:
    """left_out_label read back."""
    return {reason: int(n) for reason, _, n in (part.partition("=") for part in label.split(",") if part)}


@dataclass(frozen=True)
class Selected:
    """A group the learner trains on: which of its samples, their shaped rewards and advantages."""

    group: events.ScoredGroup
    samples: tuple[int, ...]  # indices into group.samples
    rewards: tuple[float, ...]
    advantages: tuple[float, ...]
    counts: dict[str, int] = field(default_factory=dict)  # samples left out, by reason

    @property
    def group_id(self) -> str:
        return self.group.group_id


@dataclass(frozen=True)
class Skipped:
    """A group the learner does not train on, and why."""

    group: events.ScoredGroup
    reason: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def group_id(self) -> str:
        return self.group.group_id


def check_group(group: events.ScoredGroup) -> None:
    """Raise ValueError, naming the field, when a group is not whole and well formed.

    Indices must be unique and below group_size; there must be group_size samples unless the
    reward service marked the group incomplete (scored after its timeout).
    """
    if not group.group_id:
        raise ValueError("scored group without a group_id")
    if group.group_size < 1:
        raise ValueError(f"group {group.group_id}: group_size is {group.group_size}")
    indices = [s.index for s in group.samples]
    if len(set(indices)) != len(indices):
        raise ValueError(f"group {group.group_id}: duplicate sample index in {sorted(indices)}")
    if any(i >= group.group_size for i in indices):
        raise ValueError(f"group {group.group_id}: sample index {max(indices)} >= group_size {group.group_size}")
    if len(indices) != group.group_size and not group.incomplete:
        raise ValueError(f"group {group.group_id}: {len(indices)} of group_size {group.group_size} samples "
                         "and not marked incomplete (a truncated record?)")
    if not indices:
        raise ValueError(f"group {group.group_id}: no samples")
    for s in group.samples:
        if len(s.logprobs) != len(s.token_ids):
            raise ValueError(f"sample {s.rollout_id}: {len(s.token_ids)} token_ids but {len(s.logprobs)} logprobs")
        if not s.prompt_token_ids:
            raise ValueError(f"sample {s.rollout_id}: empty prompt_token_ids")
        if status_of(s) is Status.UNSPECIFIED:
            raise ValueError(f"sample {s.rollout_id}: status is unspecified")


def unusable_reason(sample: events.ScoredSample, current_version: int, max_staleness: int) -> str | None:
    """Why a sample cannot be trained on, or None."""
    if status_of(sample).is_infra_failure:
        return "infra_failure"
    if current_version - sample.policy_version > max_staleness:
        return "stale"
    if not sample.token_ids:
        return "empty"
    return None


def nothing_to_learn(rewards: Sequence[float]) -> bool:
    """The one test of "a group with nothing to learn", on the group's shaped, usable rewards.

    Under two samples there is no baseline; equal rewards (within EQUAL_TOL, as shaping adds floats)
    give every sample a zero advantage (DAPO's dynamic sampling drops such groups).
    """
    return len(rewards) < 2 or max(rewards) - min(rewards) <= EQUAL_TOL


def select_group(group: events.ScoredGroup, current_version: int, *, estimator: str = "grpo",
                 max_staleness: int = 2, dynamic_sampling: bool = True,
                 shaping: ShapingConfig = ShapingConfig()) -> Selected | Skipped:
    """Select a checked group's usable samples and estimate their advantages, or say why not."""
    kept: list[int] = []
    counts: dict[str, int] = {}
    for i, s in enumerate(group.samples):
        reason = unusable_reason(s, current_version, max_staleness)
        if reason is None:
            kept.append(i)
        else:
            counts[reason] = counts.get(reason, 0) + 1
    if len(kept) < 2:
        return Skipped(group, TOO_FEW_USABLE, counts)
    samples = [group.samples[i] for i in kept]
    if rewards_are_shaped(group):
        rewards = [s.reward for s in samples]
    else:
        rewards = [shaped_reward(s, status_of(s), shaping) for s in samples]
    if dynamic_sampling and nothing_to_learn(rewards):
        return Skipped(group, ALL_EQUAL, counts)
    return Selected(group, tuple(kept), tuple(rewards), tuple(advantages(estimator, rewards)), counts)
