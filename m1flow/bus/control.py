"""Following `control`: one rule for which commands a service applies, and the follower that keeps it.

Every service that takes commands (svc_source: set_mixture, set_window; svc_rollout: set_window,
pause, resume; svc_reward: recalibrate) reads `control` from its beginning with a TopicWatcher, by
assignment, so that every replica sees every command (`policy` may be read beside it: policy
announcements pass through untouched). A command applies when

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
from collections.abc import Iterable
from dataclasses import dataclass, field

from google.protobuf.message import Message

from m1flow.bus.watch import TopicWatcher
from m1flow.contracts import events

SETTINGS = frozenset({"set_window", "pause", "resume", "set_mixture"})
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
    and the other topics' messages (policy versions) as they come."""

    def __init__(self, watcher: TopicWatcher, rule: CommandRule) -> None:
        self.watcher, self.rule = watcher, rule

    def poll(self, timeout_ms: int = 0) -> list[Message]:
        """What arrived since the last poll (WatchError: the broker did not answer; poll again)."""
        return self.kept(self.watcher.poll(timeout_ms))

    def catch_up(self, after: str = "") -> list[Message]:
        """The history up to the topics' end (TimeoutError: not reached; try again); with `after`,
        only what came after that command, when the history holds it."""
        history = self.watcher.catch_up()
        if after:
            ids = [m.header.message_id if isinstance(m, events.Control) else "" for m in history]
            if after in ids:
                history = history[ids.index(after) + 1:]
        return self.kept(history)

    def kept(self, messages: Iterable[Message]) -> list[Message]:
        return [m for m in messages if not isinstance(m, events.Control) or self.rule.applies(m)]

    def close(self) -> None:
        self.watcher.close()
