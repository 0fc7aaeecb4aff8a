"""svc_learner: scored groups in, CISPO steps, checkpoints out, new versions announced on `policy`."""
from __future__ import annotations

import logging
import threading

import grpc
import torch

from m1flow.bus import Context, HandlerBase, Record, codec
from m1flow.bus.topics import POLICY, SCORED, POLICY_KEY
from m1flow.contracts import events, rpc, rpc_grpc
from m1flow.model import MiniMaxM1ForCausalLM
from m1flow.policy import uri_for
from m1flow.runtime.service import Service
from m1flow.warmstart import TOKENIZER_FILE
from svc_learner import checkpoint
from svc_learner.batching import group_stats, to_batch
from svc_learner.config import LearnerServiceConfig
from svc_learner.optim import make_optimizer
from svc_learner.distributed import init_distributed, leave, share, train_on_batch_distributed, wrap_model
from svc_learner.update import Ranks

log = logging.getLogger(__name__)


class Trainer:
    """The learner's state: model, optimizer, progress; one `step()` per batch of groups."""

    def __init__(self, cfg: LearnerServiceConfig, ranks: Ranks = Ranks()) -> None:
        self.cfg = cfg
        self.ranks = ranks
        self.root = cfg.run_dir / "learner" / "checkpoints"
        torch.manual_seed(cfg.seed)
        found = checkpoint.latest(self.root)
        source = found or cfg.init_checkpoint
        if source is None:
            raise RuntimeError("no learner checkpoint and no --init-checkpoint to start from")
        self.model = MiniMaxM1ForCausalLM.from_pretrained(source)
        self.model.train()
        self.tokenizer_json = (source / TOKENIZER_FILE).read_text()  # kept: old checkpoints rotate away
        self.optimizer = make_optimizer(self.model.parameters(), cfg.train.lr, cfg.train.weight_decay, cfg.train.adam_eps)
        self.scorer = wrap_model(self.model, cfg.train, ranks)  # DDP under torchrun
        if found is not None:
            self.state = checkpoint.load_state(found)
            checkpoint.load_optimizer(found, self.optimizer)
            log.info("resumed from %s (version %s, offsets %s)", found, self.state.version, self.state.offsets)
        else:
            self.state = checkpoint.LearnerState()
        if ranks.rank == 0:  # only rank 0 writes and announces checkpoints
            self.current_dir, self.sha = (found, checkpoint.weights_sha256(found)) if found else self._save()
        self.applied = {gid for step in self.state.applied_groups for gid in step}
        self.last_stats: dict[str, float] = {}
        self.lock = threading.Lock()

    def _save(self):
        return checkpoint.save(self.root, self.model, self.optimizer, self.state, self.tokenizer_json,
                               keep=self.cfg.keep_checkpoints, grace_s=self.cfg.checkpoint_grace_s)

    def update(self, groups: list[events.ScoredGroup], version: int) -> dict[str, float]:
        """The optimizer steps on one batch; every rank runs it on the same groups."""
        batch = to_batch(groups, pad_id=self.model.config.pad_token_id or 0)
        if batch is None:
            return {}
        return train_on_batch_distributed(self.scorer, self.optimizer, batch, self.cfg.train, version, self.ranks)

    def step(self, groups: list[events.ScoredGroup], offsets: dict[str, int]) -> dict[str, float]:
        """Train on one batch, then advance version and offsets together in one checkpoint (rank 0)."""
        if self.ranks.world > 1:
            broadcast_batch(groups, self.state.version)
        stats = {**group_stats(groups), **self.update(groups, self.state.version)}
        with self.lock:
            self.state.version += 1
            self.state.step += 1
            self.state.offsets = offsets
            self.state.applied_groups.append([g.group_id for g in groups])
            self.state.samples_dropped_stale += int(stats.get("dropped_stale", 0))
            self.current_dir, self.sha = self._save()
            self.applied.update(g.group_id for g in groups)
            self.last_stats = stats
        return stats

    def announcement(self, run_id: str) -> events.PolicyVersion:
        return events.PolicyVersion(
            header=codec.header("learner", run_id=run_id, policy_version=self.state.version,
                                message_id=f"policy:{self.state.version}:{self.sha[:12]}"),
            version=self.state.version, checkpoint_uri=uri_for(self.current_dir), sha256=self.sha,
            step=self.state.step, stats={k: float(v) for k, v in self.last_stats.items()})


def validate(group: events.ScoredGroup) -> None:
    """Reject a group the learner could not train on before it enters a batch."""
    if not group.group_id:
        raise ValueError("scored group without a group_id")
    for s in group.samples:
        if len(s.logprobs) != len(s.token_ids):
            raise ValueError(f"sample {s.rollout_id}: {len(s.token_ids)} tokens but {len(s.logprobs)} log-probs")
        if not s.prompt_token_ids:
            raise ValueError(f"sample {s.rollout_id}: empty prompt")


def broadcast_batch(groups: list[events.ScoredGroup] | None, version: int = 0) -> None:
    """Rank 0 hands the batch (or None: stop) to the other torchrun ranks."""
    share(None if groups is None else ([g.SerializeToString() for g in groups], version))


def receive_batch() -> tuple[list[events.ScoredGroup], int] | None:
    """What broadcast_batch sent: (groups, policy version), or None when rank 0 stops."""
    payload = share()
    if payload is None:
        return None
    blobs, version = payload
    return [events.ScoredGroup.FromString(blob) for blob in blobs], version


def follow(cfg: LearnerServiceConfig, ranks: Ranks) -> None:
    """Ranks > 0 under torchrun: no Kafka, no ports; train on what rank 0 broadcasts until told to stop."""
    trainer = Trainer(cfg, ranks)
    while (batch := receive_batch()) is not None:
        trainer.update(*batch)
    leave()
    log.info("rank %s done", ranks.rank)


class ScoredHandler(HandlerBase):
    topics = (SCORED,)
    dead_letter_errors = (ValueError,)  # a malformed group; a failing step or disk stops the service


    def __init__(self, service: "LearnerService") -> None:
        self.service = service
        self.buffer: list[tuple[events.ScoredGroup, Record]] = []

    def handle(self, group: events.ScoredGroup, record: Record, ctx: Context) -> None:
        trainer = self.service.trainer
        if group.group_id in trainer.applied or any(g.group_id == group.group_id for g, _ in self.buffer):
            return  # the reward service may score a group twice after a crash: apply it once
        validate(group)
        ctx.hold(record)
        self.buffer.append((group, record))
        if len(self.buffer) >= self.service.config.batch_groups:
            self.train(ctx)

    def train(self, ctx: Context) -> None:
        groups = [g for g, _ in self.buffer]
        ctx.release([r for _, r in self.buffer])
        offsets = {f"{t}/{p}": off for (t, p), off in self.service.stream.tracker.committable().items()}
        self.buffer = []
        stats = self.service.trainer.step(groups, offsets)
        version = self.service.trainer.state.version
        ctx.emit(POLICY, POLICY_KEY, self.service.trainer.announcement(self.service.config.run_id))
        for name, value in stats.items():
            ctx.metric(f"learner/{name}", value, step=version)
        log.info("step %s: %s", version, {k: round(v, 4) for k, v in stats.items()})


class LearnerGrpc(rpc_grpc.LearnerServiceServicer):
    def __init__(self, service: "LearnerService") -> None:
        self.service = service

    def Status(self, request: rpc.LearnerStatusRequest, context: grpc.ServicerContext) -> rpc.LearnerStatus:  # noqa: N802
        trainer = self.service.trainer
        with trainer.lock:
            return rpc.LearnerStatus(
                policy_version=trainer.state.version, step=trainer.state.step,
                groups_applied=len(trainer.applied), samples_dropped_stale=trainer.state.samples_dropped_stale,
                checkpoint_uri=uri_for(trainer.current_dir),
                last_stats={k: float(v) for k, v in trainer.last_stats.items()})


class LearnerService(Service):
    name = "learner"
    Config = LearnerServiceConfig

    def __init__(self, config: LearnerServiceConfig) -> None:
        super().__init__(config)
        self.config: LearnerServiceConfig = config
        torch.set_num_threads(config.torch_threads)
        self.ranks = init_distributed()
        self.trainer = Trainer(config, self.ranks)

    def register(self, server: grpc.Server) -> list[str]:
        rpc_grpc.add_LearnerServiceServicer_to_server(LearnerGrpc(self), server)
        return ["m1flow.v1.LearnerService"]

    def start(self) -> None:
        self.stream = self.worker(ScoredHandler(self), start_offsets=self.trainer.state.offsets, max_records=16)
        self.stream.producer.send(POLICY, POLICY_KEY, self.trainer.announcement(self.config.run_id))
        self.stream.producer.flush()

    def shutdown(self) -> None:
        self.stream.close()  # buffered groups stay uncommitted and are re-read on restart
        if self.ranks.world > 1:
            broadcast_batch(None)
            leave()
