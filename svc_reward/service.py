"""svc_reward: rollouts in, one ScoredGroup per complete (or timed-out) group out.

Scoring runs in a thread pool so a slow verifier (a sandboxed test run) never stalls other groups;
a group's rollout records stay uncommitted until its ScoredGroup is acknowledged. While groups score,
the loop waits on them rather than on Kafka, so a group is emitted as it is scored: waiting on a poll
instead held a scored group until the next rollout arrived or the poll ran out (200 ms), and the
learner waited on it every version (bench/learning.py). Every replica
also follows `control` and, on a recalibrate command, refits the GenRM length correction and
reports the length coefficient before and after it on `metrics`.
"""
from __future__ import annotations

import logging
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import grpc
from prometheus_client import Counter

from m1flow.bus import Context, Record
from m1flow.bus.topics import CONTROL, ROLLOUTS, SCORED
from m1flow.bus.clients import ClientError
from m1flow.bus.worker import POLL_MS
from m1flow.bus.control import CommandRule, ControlFollower
from m1flow.bus.watch import TopicWatcher
from m1flow.contracts import events, rpc, rpc_grpc
from m1flow.kinds import KINDS, kind_of
from m1flow.runtime.bounds import Cap, enforce
from m1flow.runtime.service import Service
from svc_reward.config import RewardConfig, ScoreCaps
from svc_reward.groups import GroupBuffer, PendingGroup, score_group, verdict_fields
from svc_reward.scorers import ScorerRegistry

log = logging.getLogger(__name__)
GROUPS = Counter("m1flow_reward_groups_total", "scored groups", ["outcome"])


class Recalibrations:
    """Applies the `control` commands that concern rewards (recalibrate), as they arrive.

    A recalibration is an action (m1flow.bus.control): one asked of an earlier process is not redone,
    since the calibration it asked for was fitted on verdicts that process held in memory, which are
    gone; the monitor asks again when the length bias comes back.
    """

    def __init__(self, control: ControlFollower, registry: ScorerRegistry, replica: int) -> None:
        self.control = control
        self.registry = registry
        self.labels = {"replica": str(replica)}
        self.recalibrations = 0

    def apply(self, ctx: Context) -> None:
        try:
            commands = self.control.poll()
        except ClientError as exc:  # a broker hiccup must not stop scoring; the next tick reads on
            log.warning("reading control failed, will retry: %s", exc)
            return
        for command in commands:
            self.recalibrate(ctx, command.recalibrate.reason or command.reason)

    def recalibrate(self, ctx: Context, reason: str) -> None:
        if not self.registry.config.genrm.judge:
            log.info("recalibrate (%s) ignored: no GenRM judge configured", reason)
            return
        try:
            genrm = self.registry.scorer("genrm")  # the kind's one scorer, made now if no group made it
            fit = genrm.recalibrate()
        except ValueError as exc:  # too few or uniform verdicts (or no judge here): keep the current correction
            log.warning("recalibrate (%s) skipped: %s", reason, exc)
            ctx.metric("genrm/recalibrate_skipped", 1.0, step=self.recalibrations, **self.labels)
            return
        self.recalibrations += 1
        log.info("GenRM recalibrated (%s): length coefficient %.3f -> %.3f on %s verdicts, %d stage(s)",
                 reason, fit.before, fit.after, fit.records, fit.stages)
        for name, value in (("length_coef_before", fit.before), ("length_coef_after", fit.after),
                            ("calibration_stages", fit.stages),
                            ("raw_win_rate", fit.raw_win_rate), ("lc_win_rate", fit.lc_win_rate),
                            ("calibration_records", fit.records), ("flip_rate", genrm.flip_rate)):
            ctx.metric(f"genrm/{name}", value, step=self.recalibrations, **self.labels)

    def close(self) -> None:
        self.control.close()


class GroupHandler:
    topics = (ROLLOUTS,)

    def __init__(self, registry: ScorerRegistry, cfg: RewardConfig,
                 control: Recalibrations | None = None) -> None:
        self.registry = registry
        self.cfg = cfg
        self.control = control
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
        self.running[self.pool.submit(score_group, group, self.registry)] = group

    def tick(self, ctx: Context) -> None:
        if self.control is not None:
            self.control.apply(ctx)
        for group in self.buffer.expired(self.cfg.group_timeout_s):
            log.warning("group %s timed out with %s/%s rollouts", group.group_id,
                        len(group.rollouts), group.group_size)
            self._submit(group)
        if self.running:  # the loop polls Kafka without waiting meanwhile (RewardService.loop)
            wait(self.running, timeout=self.cfg.scoring_wait_ms / 1000, return_when=FIRST_COMPLETED)
        for future in [f for f in self.running if f.done()]:
            group = self.running.pop(future)
            scored = future.result()
            ctx.emit(SCORED, scored.group_id, scored)
            ctx.release(group.records)
            GROUPS.labels("incomplete" if scored.incomplete else "complete").inc()

    def drain(self, ctx: Context) -> None:
        """Finish the scoring already started (shutdown); groups still collecting are handed back."""
        wait(list(self.running))
        self.tick(ctx)
        self.pool.shutdown()

    def on_revoked(self, partitions: set[tuple[str, int]]) -> None:
        self.buffer.drop_partitions(partitions)


class RewardGrpc(rpc_grpc.RewardServiceServicer):
    """One answer scored by hand. Never a kind that runs programs: the sandbox would run the caller's
    program as `reward`, the one principal the sandbox answers; only the pipeline (`rollouts`, whose
    writers the ACLs name) has programs run."""

    def __init__(self, registry: ScorerRegistry, caps: ScoreCaps | None = None) -> None:
        self.registry = registry
        self.caps = caps or ScoreCaps()

    def Score(self, request: rpc.ScoreRequest, context: grpc.ServicerContext) -> rpc.ScoreReply:  # noqa: N802
        refusal = runs_programs(request.verifier.kind)
        if refusal:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal)
        verifier = request.verifier
        enforce(context, [Cap("response", len(request.response), self.caps.max_response_chars,
                              "score.max_response_chars"),
                          Cap("verifier.spec_json", len(verifier.spec_json) + len(verifier.gold),
                              self.caps.max_spec_chars, "score.max_spec_chars")])
        return rpc.ScoreReply(**verdict_fields(self.registry.score(request.response, request.verifier)))


def runs_programs(kind: str) -> str:
    """Why Score over gRPC refuses `kind` ('' when it does not): it runs in svc_sandbox."""
    name = kind_of(kind)
    if name in KINDS and KINDS.get(name).sandbox:
        return (f"verifier kind {kind!r} runs programs in svc_sandbox: only the pipeline (`rollouts`) has them "
                "scored, never a Score call")
    return ""


class RewardService(Service, name="reward", config=RewardConfig):
    """Groups from `rollouts` scored into `scored`, the Score RPC, and (live runs only) `control`
    recalibrations of the GenRM judge."""

    config: RewardConfig

    def __init__(self, config: RewardConfig) -> None:
        super().__init__(config)
        self.registry = ScorerRegistry.from_config(config)

    def register(self, server: grpc.Server) -> list[str]:
        rpc_grpc.add_RewardServiceServicer_to_server(RewardGrpc(self.registry, self.config.score), server)
        return ["m1flow.v1.RewardService"]

    def start(self) -> None:
        control = None
        if not self.config.replaying:  # a replay re-scores with the settings it starts with
            cfg = self.config
            watcher = TopicWatcher(cfg.bootstrap, (CONTROL,), f"reward-{cfg.replica}-watch",
                                   group_id=self.group_id, client=cfg.kafka_client)
            follower = ControlFollower(watcher, CommandRule(cfg.run_id, frozenset({"recalibrate"})))
            control = Recalibrations(follower, self.registry, cfg.replica)
        self.handler = GroupHandler(self.registry, self.config, control)
        self.stream = self.worker(self.handler)

    def loop(self) -> None:
        self.stream.run(self.stop, before_step=self._pace)

    def _pace(self) -> None:
        """No waiting on Kafka while groups score: the handler's tick waits on them instead, up to
        `scoring_wait_ms`."""
        self.stream.set_pace(poll_ms=0 if self.handler.running else POLL_MS)

    def shutdown(self) -> None:
        self.handler.drain(self.stream.ctx)
        self.stream.close()
        self.registry.close()
        if self.handler.control is not None:
            self.handler.control.close()
