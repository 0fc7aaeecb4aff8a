"""ScoredGroups for the algorithm tests, as the reward service writes them (schema 2)."""
from __future__ import annotations

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.status import Status


def group(gid: str, rewards: list[float], *, statuses: list[Status] | None = None, version: int = 0,
          versions: list[int] | None = None, window: int = 8, lengths: list[int] | None = None,
          finish: list[int] | None = None, group_size: int | None = None, incomplete: bool = False,
          indices: list[int] | None = None) -> events.ScoredGroup:
    n = len(rewards)
    g = events.ScoredGroup(header=codec.header("reward", group_id=gid, message_id=f"scored:{gid}"),
                           group_id=gid, prompt_id=gid, group_size=n if group_size is None else group_size,
                           incomplete=incomplete)
    for i, reward in enumerate(rewards):
        length = lengths[i] if lengths else 2
        g.samples.add(rollout_id=f"{gid}/{i}", index=indices[i] if indices else i, reward=reward,
                      status=(statuses[i] if statuses else Status.OK), prompt_token_ids=[1, 2],
                      token_ids=list(range(3, 3 + length)), logprobs=[-0.5] * length,
                      policy_version=versions[i] if versions else version, max_new_tokens=window,
                      finish_reason=finish[i] if finish else events.FINISH_REASON_STOP)
    return g
