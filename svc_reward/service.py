"""svc_reward: rollouts in, one ScoredGroup per complete (or timed-out) group out.

Scoring runs in a thread pool so a slow verifier (a sandboxed test run) never stalls other groups;
a group's rollout records stay uncommitted until its ScoredGroup is acknowledged.
"""
from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor, wait

import grpc
from prometheus_client import Counter

from m1flow.bus import Context, Record
from m1flow.bus.topics import ROLLOUTS, SCORED
from m1flow.contracts import events, rpc, rpc_grpc
from m1flow.runtime.service import Service
from svc_reward.config import RewardConfig
from svc_reward.groups import GroupBuffer, PendingGroup, score_group
from svc_reward.scorers import ScorerRegistry

log = logging.getLogger(__name__)
GROUPS = Counter("m1flow_reward_groups_total", "scored groups", ["outcome"])


class GroupHandler:
    topics = (ROLLOUTS,)

    def __init__(self, registry: ScorerRegistry, cfg: RewardConfig) -> None:
        self.registry = registry
        self.cfg = cfg
        self.buffer = GroupBuffer()
        self.pool = ThreadPoolExecutor(cfg.scoring_threads, thread_name_prefix="score")
        self.running: dict[Future, PendingGroup] = {}

    def handle(self, rollout: events.Rollout, record: Record, ctx: Context) -> None:
        group, new = self.buffer.add(rollout, record)
        if not new and group is None:
            return  # duplicate or late: its outputs already exist or will
        ctx.hold(record)
        if group is not None:
            self._submit(group)

    def _submit(self, group: PendingGroup) -> None:
        self.running[self.pool.submit(score_group, group, self.registry, self.cfg)] = group

    def tick(self, ctx: Context) -> None:
        for group in self.buffer.expired(self.cfg.group_timeout_s):
            log.warning("group %s timed out with %s/%s rollouts", group.group_id,
                        len(group.rollouts), group.group_size)
            self._submit(group)
        for future in [f for f in self.running if f.done()]:
            group = self.running.pop(future)
            scored = future.result()
            ctx.emit(SCORED, scored.group_id, scored)
            ctx.release(group.records)
            GROUPS.labels("dropped" if scored.dropped else "kept").inc()

    def drain(self, ctx: Context) -> None:
        """Finish the scoring already started (shutdown); groups still collecting are handed back."""
        wait(list(self.running))
        self.tick(ctx)
        self.pool.shutdown()

    def on_revoked(self, partitions: set[tuple[str, int]]) -> None:
        self.buffer.drop_partitions(partitions)


class RewardGrpc(rpc_grpc.RewardServiceServicer):
    def __init__(self, registry: ScorerRegistry) -> None:
        self.registry = registry

    def Score(self, request: rpc.ScoreRequest, context: grpc.ServicerContext) -> rpc.ScoreReply:  # noqa: N802
        res = self.registry.score(request.response, request.verifier)
        reply = rpc.ScoreReply(reward=res.reward, status=res.status.value, detail=res.detail,
                               parts=events.RewardParts(correctness=res.parts.correctness,
                                                        format=res.parts.format,
                                                        length_penalty=res.parts.length_penalty,
                                                        genrm=res.parts.genrm))
        if res.correct is not None:
            reply.correct = res.correct
        return reply


class RewardService(Service):
    name = "reward"
    Config = RewardConfig

    def __init__(self, config: RewardConfig) -> None:
        super().__init__(config)
        self.config: RewardConfig = config
        self.registry = ScorerRegistry(config.sandbox_address)

    def register(self, server: grpc.Server) -> list[str]:
        rpc_grpc.add_RewardServiceServicer_to_server(RewardGrpc(self.registry), server)
        return ["m1flow.v1.RewardService"]

    def start(self) -> None:
        self.handler = GroupHandler(self.registry, self.config)
        self.stream = self.worker(self.handler)

    def shutdown(self) -> None:
        self.handler.drain(self.stream.ctx)
        self.stream.close()
