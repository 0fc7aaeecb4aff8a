"""The topic table of docs/architecture.md: names, keys, value types, partitions and retention.

The partition counts here are defaults; TopicLayout (ServiceConfig.topics, `M1FLOW_TOPICS`)
overrides them and sets the replication factor for the topics a service creates.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from google.protobuf.message import Message
from pydantic import BaseModel, Field, field_validator

from m1flow.contracts import events


@dataclass(frozen=True)
class TopicSpec:
    name: str
    value_type: type[Message]
    key: str  # what the record key holds (documentation and the dump/replay tools)
    partitions: int
    compacted: bool = False
    config: dict[str, str] = field(default_factory=dict)

    def renamed(self, name: str) -> "TopicSpec":
        return replace(self, name=name)


PROMPTS = TopicSpec("prompts", events.Prompt, "prompt_id", partitions=4)
ROLLOUTS = TopicSpec("rollouts", events.Rollout, "group_id", partitions=4)
# One partition: the learner (a single consumer) then sees groups in one total order, so its batches
# and therefore its weights are reproducible after a crash and restart.
SCORED = TopicSpec("scored", events.ScoredGroup, "group_id", partitions=1)
# Compacted under one key per announced weights (policy_key), not one key for the topic: see policy_key.
POLICY = TopicSpec("policy", events.PolicyVersion, "v<version>/<sha256>", partitions=1, compacted=True)
CONTROL = TopicSpec("control", events.Control, "command", partitions=1)
METRICS = TopicSpec("metrics", events.Metric, "service", partitions=2)
DLQ = TopicSpec("dlq", events.DeadLetter, "source topic", partitions=1)
# Where svc_source stands in its datasets; compacted, so the newest state per key survives forever.
SOURCE_STATE = TopicSpec("source_state", events.SourceState, "state key (run/group)", partitions=1, compacted=True,
                         config={"segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1"})

# svc_eval's held-out results, one per (run, set, policy version); compacted, so the newest record of
# each key survives and a restarted svc_eval reads back what it has already published.
EVALS = TopicSpec("evals", events.EvalResult, "run/set/v<version>", partitions=1, compacted=True)

ALL_TOPICS: tuple[TopicSpec, ...] = (PROMPTS, ROLLOUTS, SCORED, POLICY, CONTROL, METRICS, DLQ, SOURCE_STATE, EVALS)
BY_NAME: dict[str, TopicSpec] = {spec.name: spec for spec in ALL_TOPICS}
# The state topics every replica applies in order (m1flow.bus.watch): the order is the broker's
# offsets, never a timestamp a sender wrote, so each must stay one partition.
ONE_PARTITION = frozenset({POLICY.name, CONTROL.name})


def policy_key(policy: events.PolicyVersion) -> bytes:
    """The record key of an announcement: its version and the SHA-256 of its weights.

    `policy` is compacted, and compaction keeps the newest record of each key. Under one key for the
    whole topic (as before), a record written last, forged or failing to load, became after compaction
    all a restarting consumer found: the genuine announcements were gone. Under one key per (version,
    weights) a record displaces only the one record of its own key: every other genuine announcement
    survives, and a restarting replica loads the newest one it admits (m1flow.security.announcements)
    and can load (m1flow.policy_follower). A writer of `policy` can still overwrite or delete
    (tombstone) a key it names, the newest genuine one included: the ACLs keep such writers out, the
    learner re-announces its version whenever it starts, and a replica holding weights keeps them
    (docs/security.md). The price: the topic keeps one record (about 1 KB) per learner step.
    """
    return f"v{policy.version}/{policy.sha256}".encode()


class TopicLayout(BaseModel):
    """How topics are created: partitions bound how many replicas of a consumer group share the work
    (the README's table), the replication factor how many brokers hold each partition."""

    partitions: dict[str, int] = Field(default_factory=dict,
                                       description="partitions per topic name, over the table's defaults")
    replication_factor: int = Field(1, ge=1, description="copies of each partition (1 on a single broker)")

    @field_validator("partitions")
    @classmethod
    def _known_topics(cls, value: dict[str, int]) -> dict[str, int]:
        for name, count in value.items():
            if name not in BY_NAME:
                raise ValueError(f"topics.partitions: unknown topic {name!r}; known: {', '.join(BY_NAME)}")
            if count < 1:
                raise ValueError(f"topics.partitions.{name}: must be at least 1, got {count}")
            if name in ONE_PARTITION and count != 1:
                raise ValueError(f"topics.partitions.{name}: must be 1, got {count} (its records are applied "
                                 "in the broker's order, which only one partition has)")
        return value

    def apply(self, spec: TopicSpec) -> TopicSpec:
        """The spec with this layout's partition count ('scored.replay' follows 'scored')."""
        count = self.partitions.get(live_topic(spec.name))
        return spec if count is None else replace(spec, partitions=count)


def live_topic(name: str) -> str:
    """The live topic a replay's copy belongs to ('scored.replay' -> 'scored'); a live name is its own."""
    return name.split(".", 1)[0]


def suffixed(name: str, suffix: str) -> str:
    """Where a service with output_suffix writes `name`: its '<topic>.<suffix>' copy (no suffix: itself)."""
    return f"{name}.{suffix}" if suffix else name


def spec(name: str) -> TopicSpec:
    """Look a topic up by name ('scored.replay' is a copy of 'scored'), with a clear error for a typo."""
    try:
        return BY_NAME[live_topic(name)]
    except KeyError:
        raise KeyError(f"unknown topic {name!r}; known: {', '.join(BY_NAME)}") from None
