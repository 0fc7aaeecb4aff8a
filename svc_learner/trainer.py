"""The learner's state (model, optimizer, version, offsets) and the one entry point for training a
batch: `Trainer.step(selected, offsets)` builds the batch, runs the updates and writes the checkpoint.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from m1flow import checkpoint, store
from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.rl.selection import Selected, Skipped
from m1flow.security.announcements import sign
from svc_learner.batching import Batch, batch_stats, samples_of, to_batch
from svc_learner.config import LearnerServiceConfig
from svc_learner.distributed import broadcast_batch, leave, receive_batch, wrap_model
from svc_learner.drift import drift_limit, drift_warning
from svc_learner.optim import make_optimizer
from svc_learner.placement import load_trainable
from svc_learner.routing_replay import replay_experts, routing_shape
from svc_learner.step_stats import StepStats
from svc_learner.update import Ranks, run_updates

log = logging.getLogger(__name__)


class Trainer:
    """Model, optimizer and progress; one `step()` per batch of selected groups."""

    def __init__(self, cfg: LearnerServiceConfig, ranks: Ranks = Ranks()) -> None:
        self.cfg = cfg
        self.ranks = ranks
        self.root = cfg.checkpoint_root()  # local: the checkpoints, or (s3) their staging copy
        self.store = cfg.checkpoint_store()
        self.correction_scale = 1.0  # the monitor's `set_correction` (m1flow.rl.correction)
        self.loss_spec = cfg.algorithm.loss()
        self.drift_limit = drift_limit(self.loss_spec.name, cfg.train.drift_limit)
        torch.manual_seed(cfg.seed)
        found = self.store.latest()  # on s3: downloaded into staging, optimizer and state with it
        self.resumed = found.directory if found is not None else None
        source = self.resumed or cfg.init_checkpoint
        if source is None:
            raise RuntimeError(f"no learner checkpoint in {self.store.root} and no --init-checkpoint to start from")
        # any causal LM directory (m1flow.lm), on its device (the local GPU under torchrun) before DDP
        self.model = load_trainable(source, cfg.device, cfg.train.dtype)
        self.tokenizer = checkpoint.load_tokenizer(source)  # kept: old checkpoints rotate away
        train = cfg.train
        if train.fsdp and ranks.world > 1:
            raise ValueError("train.fsdp: the learner cannot write checkpoints from sharded parameters and "
                             "optimizer state yet; use DDP (fsdp: false) for the service")
        self.routing = routing_shape(self.model) if train.routing_replay else None  # R3
        self.scorer = wrap_model(self.model, train, ranks)  # DDP under torchrun
        self.optimizer = make_optimizer(self.model.parameters(), train.lr, train.weight_decay, train.adam_eps)
        self.state = self._initial_state(source)
        if ranks.rank == 0:  # only rank 0 writes and announces checkpoints
            self.current, self.sha = ((found, checkpoint.weights_sha256(found.directory))
                                      if found is not None else self._save())
        self.applied = {gid for step in self.state.applied_groups for gid in step}
        self.last_stats: dict[str, float] = {}
        self.lock = threading.Lock()

    def _initial_state(self, source: Path) -> checkpoint.LearnerState:
        """Our own checkpoint: everything. A learner checkpoint given as init (a replay's start): its
        version, step and optimizer, but not its offsets or applied groups. A bare policy: version 0."""
        if (source / checkpoint.STATE_FILE).exists():
            checkpoint.load_optimizer(source, self.optimizer)
            state = checkpoint.load_state(source)
            if self.resumed:
                log.info("resumed from %s (version %s, offsets %s)", source, state.version, state.offsets)
                return state
            log.info("starting from learner checkpoint %s at version %s", source, state.version)
            return checkpoint.LearnerState(version=state.version, step=state.step)
        return checkpoint.LearnerState()

    def start_offsets(self, replay: bool) -> dict[str, int] | None:
        """Where to read `scored` from: our checkpoint's offsets; a fresh replay: its consumer group's
        start (None); a fresh learner: the beginning ({})."""
        if self.resumed:
            return self.state.offsets
        return None if replay else {}

    @property
    def current_dir(self) -> Path:
        """The local copy of the current version (the checkpoint itself on a file:// root)."""
        return self.current.directory

    @property
    def current_uri(self) -> str:
        """What `policy` announces for the current version: file:///... or s3://bucket/prefix/v..."""
        return self.current.uri

    def _save(self) -> tuple[store.Stored, str]:
        return self.store.save(self.model, self.tokenizer, self.optimizer, self.state,
                               keep=self.cfg.keep_checkpoints, grace_s=self.cfg.checkpoint_grace_s)

    def set_correction(self, scale: float) -> None:
        """Scale the mismatch correction's configured bounds (1: as configured; < 1: tighter)."""
        self.loss_spec = self.cfg.algorithm.loss(scale)
        self.correction_scale = scale

    def update(self, batch: Batch, stats: StepStats | None = None) -> dict[str, float]:
        """The optimizer steps on one batch; every rank runs it on the same batch."""
        return run_updates(self.scorer, self.optimizer, batch, self.cfg.train, self.loss_spec, self.ranks, stats,
                           version=self.state.version)

    def step(self, selected: Sequence[Selected], offsets: dict[str, int],
             skipped: Sequence[Skipped] = ()) -> StepStats:
        """Build the batch, train on it, then advance version and offsets together in one checkpoint
        (with the groups skipped since the last step: consumed, and accounted for).

        Raises RuntimeError when no update ran: a version is never published without training.
        """
        batch = to_batch(selected, pad_id=self.model.config.pad_token_id or 0)
        replay: dict[str, float] = {}
        if self.routing is not None:
            batch.routed_experts, replay = replay_experts(samples_of(selected), batch.input_ids.shape[1], self.routing)
        if self.ranks.world > 1:
            broadcast_batch(batch)
        stats = StepStats()
        stats.note(**replay)  # on `metrics` as learner/routing_{replayed, refused, missing}
        started = time.monotonic()
        self.update(batch, stats)
        updated = time.monotonic()
        if not stats.get("updates"):
            raise RuntimeError(f"a batch of {len(batch)} samples gave no update over {self.ranks.world} ranks")
        # records of `scored` this step consumed (trained, skipped, duplicates): the rollout's step size
        read = sum(max(0, off - self.state.offsets.get(key, 0)) for key, off in offsets.items())
        consumed = float(max(read, len(selected) + len(skipped)))
        stats.note(batch_stats(selected), groups_consumed=consumed)
        warning = drift_warning(stats, self.loss_spec.name, self.drift_limit)
        if warning:
            log.warning("step %s: %s", self.state.version + 1, warning)
        stats.note(drift_warning=float(warning is not None))  # on `metrics` as learner/drift_warning
        if self.loss_spec.correction is not None:  # the bounds in force, beside the shares they produced
            stats.note({f"correction_{k}": v for k, v in self.loss_spec.correction.in_force().items()},
                       correction_scale=self.correction_scale)
        with self.lock:
            self.state.version += 1
            self.state.step += 1
            self.state.offsets = offsets
            self.state.applied_groups.append([s.group_id for s in selected])
            self.state.skipped_groups.append([s.group_id for s in skipped])
            self.state.samples_dropped_stale += sum(s.counts.get("stale", 0) for s in (*selected, *skipped))
            self.current, self.sha = self._save()
            stats.note(update_s=updated - started, save_s=time.monotonic() - updated)  # where a step's time goes
            self.applied.update(s.group_id for s in selected)
            self.last_stats = stats.values  # the same dict: the service's timing notes land in it too
        return stats

    def announcement(self, run_id: str) -> events.PolicyVersion:
        """The current version's `policy` record, signed when the learner holds a signing key."""
        policy = events.PolicyVersion(
            header=codec.header("learner", run_id=run_id, policy_version=self.state.version,
                                message_id=f"policy:{self.state.version}:{self.sha[:12]}"),
            version=self.state.version, checkpoint_uri=self.current_uri, sha256=self.sha,
            step=self.state.step, stats={k: float(v) for k, v in self.last_stats.items()},
            batch_groups=self.cfg.batch_groups, input_offsets=self.state.offsets)
        key = self.cfg.security.policy_signing_key
        return sign(policy, key) if key is not None else policy


def follow(cfg: LearnerServiceConfig, ranks: Ranks) -> None:
    """Ranks > 0 under torchrun: no Kafka, no ports; train on what rank 0 broadcasts until told to stop."""
    trainer = Trainer(cfg, ranks)
    while (batch := receive_batch()) is not None:
        trainer.update(batch)
        trainer.state.version += 1  # as rank 0's step does: the next batch trains from the next version
    leave()
    log.info("rank %s done", ranks.rank)
