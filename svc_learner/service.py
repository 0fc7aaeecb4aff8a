"""svc_learner: scored groups in, policy versions out.

One straight walk per batch: select (m1flow.rl, as each group arrives: a group with nothing to
teach is counted and skipped, so the batch fills with trainable ones), build the batch, update,
checkpoint (Trainer.step), publish on `policy`. A batch trains when it holds `batch_groups` groups,
or with fewer once the input has been idle and caught up for `batch_timeout_s`; while input keeps
arriving, batches are a function of the order of `scored` alone, so a restarted learner repeats them.
"""
from __future__ import annotations

import logging
import time
from collections import Counter

import grpc
import torch
from prometheus_client import Counter as PromCounter

from m1flow.accounting import SourceKindLabels
from m1flow.bus import Context, HandlerBase, Record
from m1flow.bus.clients import ClientError
from m1flow.bus.control import CommandRule, ControlFollower
from m1flow.bus.topics import CONTROL, POLICY, SCORED, policy_key
from m1flow.bus.watch import TopicWatcher
from m1flow.contracts import events, rpc, rpc_grpc
from m1flow.rl.filling import BatchFiller
from m1flow.rl.selection import (GROUP_LABEL, GROUP_SKIPPED, GROUP_TRAINED, LEFT_OUT_LABEL, Skipped,
                                 left_out_label)
from m1flow.runtime.service import Service
from svc_learner.config import LearnerServiceConfig
from svc_learner.distributed import broadcast_batch, init_distributed, leave
from svc_learner.source_stats import source_metrics
from svc_learner.steering import COMMANDS, CorrectionSteering
from svc_learner.trainer import Trainer

log = logging.getLogger(__name__)
SKIPPED = PromCounter("m1flow_learner_groups_skipped_total", "scored groups not trained on", ["reason"])
LAG_CHECK_S = 1.0  # at most one end-offset request per second while waiting to flush


class ScoredHandler(HandlerBase):
    topics = (SCORED,)
    dead_letter_errors = (ValueError,)  # a malformed or cut-short group; a failing step or disk stops the service

    def __init__(self, service: LearnerService) -> None:
        self.service = service
        self.filler = BatchFiller(service.config.algorithm, service.config.batch_groups)
        self.records: list[Record] = []
        self.skipped: Counter[str] = Counter()
        self.skipped_since_step: list[Skipped] = []
        self.source_labels = SourceKindLabels()
        self.last_input = time.monotonic()
        self.next_lag_check = 0.0
        self.step_ended = time.monotonic()  # learner/wait_s: from here to the next full batch
        self.first_offer: float | None = None  # learner/wait_first_s: from step_ended to the next group

    def handle(self, group: events.ScoredGroup, record: Record, ctx: Context) -> None:
        self.last_input = time.monotonic()
        if self.first_offer is None:
            self.first_offer = self.last_input
        trainer = self.service.trainer
        if group.group_id in trainer.applied or self.filler.holds(group.group_id):
            return  # the reward service may score a group twice after a crash: apply it once
        outcome = self.filler.offer(group, trainer.state.version)
        if isinstance(outcome, Skipped):
            self._count_skip(outcome, ctx)
            return
        ctx.hold(record)
        self.records.append(record)
        if self.filler.full:
            self.train(ctx)

    def _count_skip(self, skipped: Skipped, ctx: Context) -> None:
        self.skipped[skipped.reason] += 1
        self.skipped_since_step.append(skipped)
        SKIPPED.labels(skipped.reason).inc()
        ctx.metric(GROUP_SKIPPED, self.skipped[skipped.reason], step=self.service.trainer.state.version,
                   reason=skipped.reason,
                   **{GROUP_LABEL: skipped.group_id, LEFT_OUT_LABEL: left_out_label(skipped.counts)})
        log.debug("skipped group %s: %s %s", skipped.group_id, skipped.reason, skipped.counts)

    def tick(self, ctx: Context) -> None:
        if self.filler.pending and self._idle_and_caught_up(ctx):
            log.info("input idle for %.0fs: training on %s of %s groups", self.service.config.batch_timeout_s,
                     len(self.filler.pending), self.filler.batch_groups)
            self.train(ctx)

    def _idle_and_caught_up(self, ctx: Context) -> bool:
        now = time.monotonic()
        if now - self.last_input < self.service.config.batch_timeout_s or now < self.next_lag_check:
            return False
        self.next_lag_check = now + LAG_CHECK_S
        try:
            return ctx.lag() == 0
        except ClientError as exc:  # broker away: we cannot know we are caught up, so wait
            log.warning("cannot read end offsets, not flushing yet: %s", exc)
            return False

    def train(self, ctx: Context) -> None:
        """Build the batch, update, checkpoint (one Trainer.step), then publish the version."""
        selected = self.filler.take()
        ctx.release(self.records)
        self.records = []
        offsets = ctx.committable()
        trainer = self.service.trainer
        if self.service.steering is not None:
            self.service.steering.poll()
        started = time.monotonic()
        try:
            stats = trainer.step(selected, offsets, self.skipped_since_step)
        except ValueError as exc:  # a failed step is ours, never the message's: stop, don't dead-letter
            raise RuntimeError(f"learner step failed: {exc}") from exc
        # where a step's time goes: waiting for its batch (the pipeline upstream) or the step itself;
        # wait_first_s, till its first group (the rest: groups too few or skipped)
        ended = time.monotonic()
        stats.note(wait_s=started - self.step_ended, step_s=ended - started,
                   wait_first_s=(self.first_offer or started) - self.step_ended)
        self.step_ended, self.first_offer = ended, None
        per_source = source_metrics(selected, self.skipped_since_step, self.source_labels, stats.rows, stats.corrected)
        self.skipped_since_step = []
        version = trainer.state.version
        announcement = trainer.announcement(self.service.config.run_id)
        ctx.emit(POLICY, policy_key(announcement), announcement)
        for name, value in stats.items():
            ctx.metric(f"learner/{name}", value, step=version)
        for m in per_source:
            ctx.metric(m.name, m.value, step=version, **m.labels)
        for sel in selected:  # which groups made this version (m1flow trace reads them back)
            ctx.metric(GROUP_TRAINED, len(sel.samples), step=version,
                       **{GROUP_LABEL: sel.group_id, LEFT_OUT_LABEL: left_out_label(sel.counts)})
        log.info("step %s: %s", version, {k: round(v, 4) for k, v in stats.items()})


class LearnerGrpc(rpc_grpc.LearnerServiceServicer):
    def __init__(self, service: LearnerService) -> None:
        self.service = service

    def Status(self, request: rpc.LearnerStatusRequest, context: grpc.ServicerContext) -> rpc.LearnerStatus:  # noqa: N802
        trainer = self.service.trainer
        with trainer.lock:
            return rpc.LearnerStatus(
                policy_version=trainer.state.version, step=trainer.state.step,
                groups_applied=len(trainer.applied), samples_dropped_stale=trainer.state.samples_dropped_stale,
                checkpoint_uri=trainer.current_uri,
                last_stats={k: float(v) for k, v in trainer.last_stats.items()})


class LearnerService(Service, name="learner", config=LearnerServiceConfig):
    """Rank 0 of the learner: reads `scored`, trains (with the other torchrun ranks), writes `policy`."""

    config: LearnerServiceConfig

    def __init__(self, config: LearnerServiceConfig) -> None:
        super().__init__(config)
        torch.set_num_threads(config.torch_threads)
        self.ranks = init_distributed()
        if 2 * config.batch_groups < self.ranks.world:  # a group trains at least two samples
            raise ValueError(f"batch_groups {config.batch_groups} cannot feed {self.ranks.world} ranks")
        self.trainer = Trainer(config, self.ranks)
        self.steering: CorrectionSteering | None = None

    def register(self, server: grpc.Server) -> list[str]:
        rpc_grpc.add_LearnerServiceServicer_to_server(LearnerGrpc(self), server)
        return ["m1flow.v1.LearnerService"]

    def start(self) -> None:
        self.steering = self._steering()
        # its checkpoint holds the offsets it resumes from: its commits are for the lag readers, unwaited
        self.stream = self.worker(ScoredHandler(self), start_offsets=self.trainer.start_offsets(self.config.replaying),
                                  max_records=16, commit_wait=False)
        announcement = self.trainer.announcement(self.config.run_id)  # again: compaction may have lost it
        self.stream.producer.send(POLICY, policy_key(announcement), announcement)
        self.stream.producer.flush()

    def _steering(self) -> CorrectionSteering | None:
        """Follow the monitor's set_correction where a correction is configured, in a live run."""
        cfg = self.config
        if not cfg.algorithm.correction.active or cfg.replaying:
            return None
        watcher = TopicWatcher(cfg.bootstrap, (CONTROL,), f"learner-{cfg.replica}-watch", group_id=self.group_id,
                               client=cfg.kafka_client)
        steering = CorrectionSteering(ControlFollower(watcher, CommandRule(cfg.run_id, COMMANDS)), self.trainer)
        while not self.stop.is_set():  # the scale in force before the first step
            try:
                steering.catch_up()
                return steering
            except (TimeoutError, ClientError) as exc:
                log.warning("reading `control` to its end failed, retrying: %s", exc)
        return steering

    def shutdown(self) -> None:
        self.stream.close()  # buffered groups stay uncommitted and are re-read on restart
        if self.steering is not None:
            self.steering.close()
        if self.ranks.world > 1:
            broadcast_batch(None)
            leave()
