"""What a learner or rollout replay starts from, so it reproduces its range and leaves the live run alone.

* learner: its own checkpoint directory (run_dir/replays/<group>/learner), never the live one, and
  as its start the live learner's checkpoint of the first policy version, among those that produced
  the range's groups, that still exists (its weights, optimizer and version; not its offsets).
* rollout: the policy version the range's original rollouts carried, pinned (no `policy` following);
  refused with the reason when that checkpoint no longer exists.

An explicit --init-checkpoint (learner) or --pinned-policy (rollout) among the service's arguments
takes precedence over the choice made here.
"""
from __future__ import annotations

from pathlib import Path

from m1flow.checkpoint import LEARNER_CHECKPOINTS, has_weights, version_dir
from ops.topics_io import read_range

REPLAYS = "replays"


class ReplayError(RuntimeError):
    """A replay that cannot be set up as asked; the message says why and what to pass instead."""


def replay_args(service: str, bootstrap: str, run_dir: Path, topic: str, group: str, start: str,
                end: str | None, service_args: list[str]) -> list[str]:
    """Extra arguments for the replaying service (none for services without a policy)."""
    if service == "learner":
        return learner_args(bootstrap, run_dir, topic, group, start, end, service_args)
    if service == "rollout":
        return rollout_args(bootstrap, run_dir, topic, start, end, service_args)
    return []


def _existing(run_dir: Path, version: int) -> Path | None:
    path = version_dir(run_dir / LEARNER_CHECKPOINTS, version)
    return path if has_weights(path) else None


def _available(run_dir: Path) -> str:
    found = sorted(p.name for p in (run_dir / LEARNER_CHECKPOINTS).glob("v*") if has_weights(p))
    return ", ".join(found) or "none"


def learner_args(bootstrap: str, run_dir: Path, topic: str, group: str, start: str, end: str | None,
                 service_args: list[str]) -> list[str]:
    if topic.split(".", 1)[0] != "scored":
        raise ReplayError(f"the learner replays `scored`, not {topic!r}")
    args = ["--checkpoint-dir", str(run_dir / REPLAYS / group / "learner")]
    if "--init-checkpoint" in service_args:
        return args
    versions: list[int] = []
    for entry in read_range(bootstrap, topic, start, end):
        samples = entry.get("value", {}).get("samples", [])
        version = max((int(s.get("policy_version", 0)) for s in samples), default=None)
        if version is not None and version not in versions:
            versions.append(version)
    if not versions:
        raise ReplayError(f"{topic} {start}..{end or 'end'} holds no scored group to replay")
    for version in versions:
        if (found := _existing(run_dir, version)) is not None:
            if version != versions[0]:
                print(f"note: the checkpoint of v{versions[0]} is gone; starting from v{version}")
            return [*args, "--init-checkpoint", str(found)]
    raise ReplayError(
        f"no checkpoint of the policy versions that produced this range ({_versions(versions)}) is left under "
        f"{run_dir / LEARNER_CHECKPOINTS} (available: {_available(run_dir)}); pass --init-checkpoint DIR")


def rollout_args(bootstrap: str, run_dir: Path, topic: str, start: str, end: str | None,
                 service_args: list[str]) -> list[str]:
    if topic.split(".", 1)[0] != "prompts":
        raise ReplayError(f"the rollout service replays `prompts`, not {topic!r}")
    if "--pinned-policy" in service_args:
        return []
    prompts = [e["value"]["prompt_id"] for e in read_range(bootstrap, topic, start, end) if "value" in e]
    if not prompts:
        raise ReplayError(f"{topic} {start}..{end or 'end'} holds no prompt to replay")
    wanted, carried = set(prompts), {}
    for entry in read_range(bootstrap, "rollouts"):
        value = entry.get("value", {})
        if value.get("prompt_id") in wanted:
            carried.setdefault(value["prompt_id"], int(value.get("policy_version", 0)))
    first = next((carried[p] for p in prompts if p in carried), None)
    if first is None:
        raise ReplayError("no original rollouts of these prompts on `rollouts` to take the policy version from; "
                          "pass --pinned-policy URI --pinned-policy-version N")
    if len(set(carried.values())) > 1:
        print(f"note: the original rollouts span policy versions {_versions(sorted(set(carried.values())))}; "
              f"the replay samples all of them with v{first}, the first prompt's")
    found = _existing(run_dir, first)
    if found is None:
        raise ReplayError(
            f"policy v{first}, which sampled the original rollouts of this range, no longer exists under "
            f"{run_dir / LEARNER_CHECKPOINTS} (available: {_available(run_dir)}; the learner keeps "
            "--keep-checkpoints of them); pass --pinned-policy URI --pinned-policy-version N to use another")
    return ["--pinned-policy", found.resolve().as_uri(), "--pinned-policy-version", str(first)]


def _versions(versions: list[int]) -> str:
    return ", ".join(f"v{v}" for v in versions)
