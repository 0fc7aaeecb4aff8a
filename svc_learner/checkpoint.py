"""Learner checkpoints: weights, optimizer, step, policy version, consumed offsets and the ids of
the groups applied (and skipped as having nothing to teach), written atomically (temp dir + rename) with the last K kept.

The offsets inside the checkpoint, not the consumer group's commits, decide where a restarted
learner resumes: weights and offsets change together or not at all, so no batch is applied twice
or skipped.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from m1flow.model import MiniMaxM1ForCausalLM
from m1flow.policy import version_dir, weights_sha256
from m1flow.warmstart import TOKENIZER_FILE

STATE_FILE = "learner_state.json"
OPTIMIZER_FILE = "optimizer.pt"


@dataclass
class LearnerState:
    version: int = 0
    step: int = 0
    offsets: dict[str, int] = field(default_factory=dict)  # "topic/partition" -> next offset
    applied_groups: list[list[str]] = field(default_factory=list)  # per step, the group ids applied
    skipped_groups: list[list[str]] = field(default_factory=list)  # per step, the ids skipped since the last
    samples_dropped_stale: int = 0


def save(root: Path, model: MiniMaxM1ForCausalLM, optimizer: torch.optim.Optimizer | None,
         state: LearnerState, tokenizer_json: str, keep: int = 3, grace_s: float = 60.0) -> tuple[Path, str]:
    """Write checkpoint `v{version}` under root atomically; return its directory and weights checksum."""
    root.mkdir(parents=True, exist_ok=True)
    final = version_dir(root, state.version)
    tmp = root / f".tmp-v{state.version:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    (tmp / TOKENIZER_FILE).write_text(tokenizer_json)
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
    (tmp / STATE_FILE).write_text(json.dumps(asdict(state)))
    for path in tmp.iterdir():
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    _fsync_dir(root)
    rotate(root, keep, grace_s)
    return final, weights_sha256(final)


def rotate(root: Path, keep: int, grace_s: float) -> list[Path]:
    """Remove checkpoints older than the newest `keep`, but only those superseded more than
    `grace_s` ago: a reader that was handed a checkpoint when it was current (a rollout replica
    loading the announced version) has that long to read it before it may vanish."""
    done = sorted(p for p in root.glob("v*") if p.is_dir())
    removed = []
    now = time.time()
    for old, successor in zip(done[:-keep], done[1:]):
        superseded = (successor / STATE_FILE).stat().st_mtime if (successor / STATE_FILE).exists() else now
        if now - superseded >= grace_s:
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old)
    return removed


def latest(root: Path) -> Path | None:
    done = sorted(p for p in root.glob("v*") if (p / STATE_FILE).exists())
    return done[-1] if done else None


def load_state(directory: Path) -> LearnerState:
    return LearnerState(**json.loads((directory / STATE_FILE).read_text()))


def load_optimizer(directory: Path, optimizer: torch.optim.Optimizer) -> None:
    path = directory / OPTIMIZER_FILE
    if path.exists():
        optimizer.load_state_dict(torch.load(path, weights_only=True))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
