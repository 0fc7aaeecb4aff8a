"""The one rule for which `control` commands a service applies (m1flow.bus.control), and the follower
the source, the rollout and the reward service read `control` through: the commands of the kinds a
service handles, of its run or of none (a person's), settings from the whole history, actions only
from this process's life; a restored service reads the history after the command it names; the
`policy` announcements beside them only when the service's check admits them."""
from __future__ import annotations

import pytest

from m1flow.bus import codec
from m1flow.bus.control import ACTIONS, SETTINGS, CommandRule, ControlFollower
from m1flow.bus.topics import BY_NAME, TopicLayout
from m1flow.contracts import events

STARTED = 1_000_000


def command(kind: str, run_id: str = "", created_ms: int = STARTED + 1, message_id: str | None = None) -> events.Control:
    header = codec.header("test", run_id=run_id, message_id=message_id)
    header.created_unix_ms = created_ms
    msg = events.Control(header=header, reason="test")
    {"set_window": lambda: msg.set_window.SetInParent(), "pause": lambda: msg.pause.SetInParent(),
     "resume": lambda: msg.resume.SetInParent(), "set_mixture": lambda: msg.set_mixture.SetInParent(),
     "recalibrate": lambda: msg.recalibrate.SetInParent()}[kind]()
    assert msg.WhichOneof("command") == kind
    return msg


SOURCE = CommandRule("run-a", frozenset({"set_window", "set_mixture"}), started_ms=STARTED)
ROLLOUT = CommandRule("run-a", frozenset({"set_window", "pause", "resume"}), started_ms=STARTED)
REWARD = CommandRule("run-a", frozenset({"recalibrate"}), started_ms=STARTED)


@pytest.mark.parametrize("rule,kind,applies", [
    (SOURCE, "set_mixture", True), (SOURCE, "set_window", True), (SOURCE, "pause", False),
    (SOURCE, "recalibrate", False), (ROLLOUT, "pause", True), (ROLLOUT, "resume", True),
    (ROLLOUT, "set_mixture", False), (REWARD, "recalibrate", True), (REWARD, "set_window", False),
])
def test_a_service_applies_only_the_kinds_it_handles(rule, kind, applies):
    assert rule.applies(command(kind)) is applies


@pytest.mark.parametrize("run_id,applies", [("run-a", True), ("", True), ("run-b", False)])
def test_a_command_is_for_the_services_run_or_for_every_run_when_it_names_none(run_id, applies):
    for rule, kind in ((SOURCE, "set_mixture"), (ROLLOUT, "pause"), (REWARD, "recalibrate")):
        assert rule.applies(command(kind, run_id=run_id)) is applies, (rule, kind)


def test_settings_count_from_the_whole_history_actions_only_from_this_process():
    before = STARTED - 60_000
    assert ROLLOUT.applies(command("set_window", created_ms=before))  # the window in force, set before a restart
    assert SOURCE.applies(command("set_mixture", created_ms=before))
    assert not REWARD.applies(command("recalibrate", created_ms=before))  # an earlier process's work
    assert REWARD.applies(command("recalibrate", created_ms=STARTED))
    assert SETTINGS.isdisjoint(ACTIONS) and {f.name for f in events.Control.DESCRIPTOR.oneofs_by_name["command"].fields} \
        == SETTINGS | ACTIONS  # every command is one or the other


def test_a_rule_naming_an_unknown_command_is_refused():
    with pytest.raises(ValueError, match="unknown control command"):
        CommandRule("run-a", frozenset({"set_windw"}))


class History:
    """A watcher over a fixed history (TopicWatcher's catch_up and poll): the follower's input."""

    def __init__(self, history: list, later: list) -> None:
        self.history, self.later, self.closed = history, later, False

    def catch_up(self) -> list:
        return list(self.history)

    def poll(self, timeout_ms: int = 0) -> list:
        out, self.later = self.later, []
        return out

    def close(self) -> None:
        self.closed = True


def test_the_follower_keeps_what_its_rule_applies_passes_policies_and_resumes_after_a_named_command():
    policy = events.PolicyVersion(header=codec.header("learner"), version=3, batch_groups=8)
    old_mixture = command("set_mixture", run_id="run-a", message_id="m1")
    in_force = command("set_mixture", message_id="m2")
    other_run = command("set_mixture", run_id="run-b", message_id="m3")
    newer = command("set_window", run_id="run-a", message_id="m4")
    watcher = History([old_mixture, policy, in_force, other_run, newer], [command("pause"), newer])
    follower = ControlFollower(watcher, SOURCE)
    assert follower.catch_up() == [old_mixture, policy, in_force, newer]
    # restored up to m2: the commands after it, and every announcement (its own topic, not ordered against `control`)
    assert follower.catch_up(after="m2") == [policy, newer]
    assert follower.catch_up(after="gone") == [old_mixture, policy, in_force, newer]  # compacted away: all
    assert follower.poll() == [newer]  # the rollout's pause is not the source's
    follower.close()
    assert watcher.closed


def test_the_follower_passes_on_only_the_announcements_its_check_admits():
    """The check runs once per record, before the service sees it: a refused announcement never
    reaches the source's lead or the rollout's backpressure."""
    genuine = events.PolicyVersion(header=codec.header("learner"), version=3, batch_groups=8)
    forged = events.PolicyVersion(header=codec.header("learner"), version=1_000_030, batch_groups=1_000_000)
    asked = []

    def admits(policy: events.PolicyVersion) -> bool:
        asked.append(policy.version)
        return policy.batch_groups < 1000

    pause = command("pause")
    follower = ControlFollower(History([genuine, forged, pause], [forged, genuine]), ROLLOUT, admits)
    assert follower.catch_up() == [genuine, pause]
    assert follower.poll() == [genuine]
    assert asked == [3, 1_000_030, 1_000_030, 3]


@pytest.mark.parametrize("topic", ["policy", "control"])
def test_the_state_topics_stay_one_partition(topic: str):
    """Their records are applied in the broker's order (offsets), which only one partition has."""
    assert TopicLayout(partitions={topic: 1}).apply(BY_NAME[topic]).partitions == 1
    with pytest.raises(ValueError, match=f"topics.partitions.{topic}: must be 1"):
        TopicLayout(partitions={topic: 2})
