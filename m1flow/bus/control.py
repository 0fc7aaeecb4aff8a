"""Following `control`: one rule for which commands a service applies, and the follower that keeps it.

Every service that takes commands (svc_source: set_mixture, set_window; svc_rollout: set_window,
pause, resume; svc_reward: recalibrate; svc_learner: set_correction) reads `control` from its beginning with a TopicWatcher, by
assignment, so that every replica sees every command (`policy` may be read beside it: a policy
announcement passes through only when the service's check admits it, m1flow.security.announcements;
a refused one is dropped here, counted by the check, and nothing downstream sees it). A command
applies when

* the service handles it: its kind (Control's `command` oneof) is one of `handles` (a replay may
  handle fewer: a replaying source follows the original run's mixtures, not today's commands);
* it is for this run: its run id is the service's, or empty (a person's, `m1flow control`: every
  run's); the monitor stamps its own run id, so a monitor of another run sharing the broker is ignored;
* it is news: a *setting* (a window, pause or resume, a mixture: the newest one defines the state)
  counts from the whole history, so a restarted replica reaches the state in force; an *action* (a
  recalibration: work done on what the process holds) only when made after this process started,
  since one asked of an earlier process was done by it or is moot. A service that keeps its own
  record of what it applied (svc_source's mixture in its state) reads the history after that command
  (`catch_up(after=...)`).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from google.protobuf.message import Message

from m1flow.bus.watch import TopicWatcher
from m1flow.contracts import events

SETTINGS = frozenset({"set_window", "pause", "resume", "set_mixture", "set_correction"})
ACTIONS = frozenset({"recalibrate", "evaluate"})


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class CommandRule:
    """Which `control` commands one service applies (see the module's docstring)."""
    run_id: str
    handles: frozenset[str]
    started_ms: int = field(default_factory=_now_ms)

    def __post_init__(self) -> None:
        unknown = set(self.handles) - SETTINGS - ACTIONS
        if unknown:
            raise ValueError(f"unknown control command(s) {sorted(unknown)}; known: {sorted(SETTINGS | ACTIONS)}")

    def applies(self, command: events.Control) -> bool:
        kind = command.WhichOneof("command")
        if kind not in self.handles:
            return False
        if command.header.trace.run_id not in ("", self.run_id):
            return False
        return kind in SETTINGS or command.header.created_unix_ms >= self.started_ms


class ControlFollower:
    """A service's view of `control` through its watcher: the commands its rule applies, in order,
    and the policy versions `admits` lets through (all, when none is given), as they come."""

    def __init__(self, watcher: TopicWatcher, rule: CommandRule,
                 admits: Callable[[events.PolicyVersion], bool] | None = None) -> None:
        self.watcher, self.rule, self.admits = watcher, rule, admits

    def poll(self, timeout_ms: int = 0) -> list[Message]:
        """What arrived since the last poll (WatchError: the broker did not answer; poll again)."""
        return self.kept(self.watcher.poll(timeout_ms))

    def catch_up(self, after: str = "") -> list[Message]:
        """The history up to the topics' end (TimeoutError: not reached; try again); with `after`,
        only the commands that came after that one, when the history holds it (every policy
        announcement still: the watcher keeps each topic's own order, not one across topics)."""
        history = self.watcher.catch_up()
        if after:
            commands = [m for m in history if isinstance(m, events.Control)]
            ids = [m.header.message_id for m in commands]
            if after in ids:
                done = {id(m) for m in commands[:ids.index(after) + 1]}
                history = [m for m in history if id(m) not in done]
        return self.kept(history)

    def kept(self, messages: Iterable[Message]) -> list[Message]:
        """The commands the rule applies and the announcements the check admits, in order."""
        return [m for m in messages if self._keeps(m)]

    def _keeps(self, message: Message) -> bool:
        if isinstance(message, events.Control):
            return self.rule.applies(message)
        if isinstance(message, events.PolicyVersion):
            return self.admits is None or self.admits(message)
        return True

    def close(self) -> None:
        self.watcher.close()
