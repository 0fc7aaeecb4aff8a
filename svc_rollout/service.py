"""svc_rollout: prompts in, one Rollout per completion out, tagged with the policy that sampled it.

Prompts are admitted into the engine as they arrive (each held uncommitted until its group is
out), and the engine is stepped from the service loop, so many groups are in flight at once and
their rollouts leave as each finishes. A new policy is loaded once the groups in flight have
finished (admission stops meanwhile), so a group never mixes versions. Admission also stops while
`control` says pause and while the rollouts run too far ahead of the learner (backpressure).
"""
from __future__ import annotations

import logging
import queue
import time
import uuid
from concurrent.futures import Future

import grpc

from m1flow import chat, engines, store
from m1flow.bus import Context, HandlerBase, Record
from m1flow.bus.topics import CONTROL, POLICY, PROMPTS, ROLLOUTS
from m1flow.bus.clients import ClientError
from m1flow.bus.control import CommandRule, ControlFollower
from m1flow.bus.watch import TopicWatcher
from m1flow.bus.worker import POLL_MS
from m1flow.contracts import events, rpc, rpc_grpc
from m1flow.engines.base import GroupRequest, GroupResult
from m1flow.engines.prompts import prompt_input
from m1flow.policy_follower import PolicyFollower
from m1flow.security.announcements import Guard
from m1flow.runtime.bounds import Cap, enforce
from m1flow.runtime.service import Service
from m1flow.sampling import seed_for
from svc_rollout import metrics
from svc_rollout.backpressure import Backlog, Backpressure
from m1flow.trace.ids import group_id_for
from svc_rollout.config import GenerateCaps, RolloutConfig
from svc_rollout.rollouts import rollouts_for

log = logging.getLogger(__name__)
RPC_PREFIX = "rpc/"
REFRESH_BUSY_S = 0.05  # how often a busy engine reads `policy`/`control` (each step was 10% of its CPU)
HELD_WAIT_MS = 200  # an idle engine held back by backpressure waits this long on `policy` per loop
COMMANDS = frozenset({"set_window", "pause", "resume"})  # the `control` commands a rollout replica applies


class PromptHandler(HandlerBase):
    topics = (PROMPTS,)
    dead_letter_errors = (ValueError,)  # a prompt the engine refuses; an engine failure stops the service

    def __init__(self, service: "RolloutService") -> None:
        self.service = service

    def handle(self, prompt: events.Prompt, record: Record, ctx: Context) -> None:
        self.service.admit(prompt, record)
        ctx.hold(record)

    def tick(self, ctx: Context) -> None:
        self.service.advance(ctx)

    def on_revoked(self, partitions: set[tuple[str, int]]) -> None:
        self.service.forget(partitions)


class RolloutGrpc(rpc_grpc.RolloutServiceServicer):
    """Sampling by hand: a call over its caps is refused before it reaches the engine."""

    def __init__(self, service: "RolloutService", caps: GenerateCaps) -> None:
        self.service = service
        self.caps = caps

    def Generate(self, request: rpc.GenerateRequest, context: grpc.ServicerContext):  # noqa: N802
        if not request.prompt:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "prompt: must not be empty")
        enforce(context, generate_caps(request, self.caps))
        result = self.service.generate_now(request).result(timeout=context.time_remaining())
        for i, sample in enumerate(result.samples):
            yield rpc.GeneratedSample(index=i, text=self.service.engine.decode(sample.tokens),
                                      token_ids=sample.tokens, logprobs=sample.logprobs,
                                      finish_reason=sample.finish_reason, policy_version=result.version)


def generate_caps(request: rpc.GenerateRequest, caps: GenerateCaps) -> list[Cap]:
    """What a Generate call costs, against the service's caps (svc_rollout.config.GenerateCaps)."""
    return [Cap("n", request.n, caps.max_n, "generate.max_n"),
            Cap("max_new_tokens", request.max_new_tokens, caps.max_new_tokens, "generate.max_new_tokens"),
            Cap("prompt", len(request.prompt), caps.max_prompt_chars, "generate.max_prompt_chars")]


class RolloutService(Service, name="rollout", config=RolloutConfig):
    """Prompts admitted into the engine as room allows, the engine stepped from the loop, the groups
    that finish published; `policy` and `control` followed between steps."""

    config: RolloutConfig

    def __init__(self, config: RolloutConfig) -> None:
        super().__init__(config)
        self.engine = engines.build(config)
        self.engine.policies = store.PolicyCache(
            config.store, config.store.cache_dir or config.run_dir / "rollout" / f"policy-cache-{config.replica}")
        self.policy = PolicyFollower(config.policy_retry_s)
        self.window = config.max_new_tokens
        self.paused = False
        self.pending: dict[str, tuple[events.Prompt, Record]] = {}  # group id -> its prompt, held
        self.oneoffs: queue.Queue[tuple[GroupRequest, Future]] = queue.Queue()
        self.waiting: dict[str, Future] = {}
        self.reporter = metrics.Reporter()

    def register(self, server: grpc.Server) -> list[str]:
        rpc_grpc.add_RolloutServiceServicer_to_server(RolloutGrpc(self, self.config.generate), server)
        return ["m1flow.v1.RolloutService"]

    def start(self) -> None:
        cfg = self.config
        watcher = TopicWatcher(cfg.bootstrap, (POLICY, CONTROL), f"rollout-{cfg.replica}-watch",
                               group_id=self.group_id, client=cfg.kafka_client)
        # an announcement the guard refuses never reaches apply(): no backpressure change, no load
        self.control = ControlFollower(watcher, CommandRule(cfg.run_id, COMMANDS), Guard(cfg.security).admits)
        backlog = None if cfg.replaying else Backlog(cfg.bootstrap, cfg.reward_group, cfg.learner_group)
        self.backpressure = Backpressure(backlog, cfg.max_ahead_versions, cfg.learner_batch_groups, cfg.group_size,
                                         margin_sd=cfg.batch_margin_sd)
        if cfg.pinned_policy:  # a replay samples with the version its range was sampled with
            # the process's own configuration names it, not a record: nothing to check
            self.policy.announce(events.PolicyVersion(version=cfg.pinned_policy_version,
                                                      checkpoint_uri=cfg.pinned_policy))
        self._catch_up()
        waited = time.monotonic()
        while self.engine.version < 0 and not self.stop.is_set():
            if time.monotonic() - waited > 30:
                log.warning("still no loadable policy on `policy`; waiting (start the learner or publish one)")
                waited = time.monotonic()
            self.refresh(timeout_ms=500)
        self.stream = self.worker(PromptHandler(self), max_records=cfg.max_inflight_groups)

    def _catch_up(self) -> None:
        """Apply the whole history of `policy` and `control`, however long, before serving."""
        while not self.stop.is_set():
            try:
                self.apply(self.control.catch_up())
                return
            except (TimeoutError, ClientError) as exc:
                log.warning("reading `policy` and `control` to their end failed, retrying: %s", exc)

    # ---- policy and control ----------------------------------------------------------------
    def refresh(self, timeout_ms: int = 0) -> None:
        """Apply new policy versions and control commands."""
        self.apply(self.control.poll(timeout_ms))

    def apply(self, messages: list) -> None:
        """Take the newest announced policy and the control commands, in order (the announcements
        the guard admitted only: ControlFollower); load a due policy once no group is part-way
        decoded (a batch engine's queued groups then take the new one)."""
        for msg in messages:
            if isinstance(msg, events.PolicyVersion):
                if msg.batch_groups:
                    self.backpressure.learner_step(msg.batch_groups, msg.stats, msg.input_offsets)
                if not self.config.pinned_policy:
                    self.policy.announce(msg)
            elif msg.HasField("set_window"):
                self.set_window(msg.set_window.max_new_tokens)
            elif msg.HasField("pause"):
                self.paused = True
            elif msg.HasField("resume"):
                self.paused = False
        if self.engine.decoding() == 0 and self.policy.load_if_due(self.engine):
            self.reporter.reloaded(self.engine.version, self.engine.last_reload_s)

    def set_window(self, window: int) -> None:
        """`control` moves the output window, never past the ceiling this replica was started with."""
        if not 1 <= window <= self.config.max_window:
            log.warning("set_window %s refused: not in [1, %s] (max_window)", window, self.config.max_window)
            return
        self.window = window
        log.info("output window set to %s (new requests)", self.window)

    # ---- groups ----------------------------------------------------------------------------
    def request_for(self, key: str, prompt: chat.PromptInput, n: int, window: int, temperature: float,
                    top_p: float, seed: int) -> GroupRequest:
        """A group request for a text or a conversation; ValueError names the field when the input
        cannot be sampled."""
        if not prompt:
            raise ValueError("prompt: text (or messages) must not be empty")
        cfg = self.config
        if not 1 <= n <= cfg.max_group_size:
            raise ValueError(f"group_size: {n} is not in [1, {cfg.max_group_size}] (max_group_size)")
        if not 1 <= window <= cfg.max_window:
            raise ValueError(f"max_new_tokens: {window} is not in [1, {cfg.max_window}] (max_window)")
        return GroupRequest(key, self.engine.prompt_ids(prompt), n, window, temperature, top_p, seed,
                            cfg.early_stop_run, cfg.early_stop_prob)

    def admit(self, prompt: events.Prompt, record: Record) -> None:
        cfg = self.config
        group_id = group_id_for(prompt.prompt_id, prompt.header.message_id)
        request = self.request_for(group_id, prompt_input(prompt), prompt.group_size or cfg.group_size,
                                   prompt.max_new_tokens or self.window, cfg.temperature, cfg.top_p,
                                   seed_for(group_id, self.engine.version))
        self.engine.submit(request)
        self.pending[group_id] = (prompt, record)

    def generate_now(self, req: rpc.GenerateRequest) -> Future:
        """A one-off group for gRPC: handed to the service loop, which owns the engine."""
        cfg = self.config
        key = f"{RPC_PREFIX}{uuid.uuid4().hex}"
        request = self.request_for(key, req.prompt, req.n or 1, req.max_new_tokens or self.window,
                                   req.temperature or cfg.temperature, req.top_p or cfg.top_p,
                                   req.seed or seed_for(req.prompt, time.time_ns()))
        done: Future = Future()
        self.oneoffs.put((request, done))
        return done

    def advance(self, ctx: Context) -> None:
        """Step the engine for one time slice; publish the groups that finished and release their
        prompts. A slice of several engine steps keeps Kafka's per-cycle work (poll, flush, commit)
        from running between every decoding step."""
        while not self.oneoffs.empty():
            request, done = self.oneoffs.get_nowait()
            self.engine.submit(request)
            self.waiting[request.key] = done
        finished: list[GroupResult] = []
        deadline = time.monotonic() + self.config.engine_slice_s
        while self.engine.in_flight():
            metrics.STEP_SEQUENCES.observe(min(self.engine.sequences_in_flight(), self.engine.capacity))
            finished += self.engine.step()
            room = self.engine.in_flight() < self.config.max_inflight_groups
            if time.monotonic() >= deadline or (finished and room):  # refill the batch promptly
                break
        for result in finished:
            self.reporter.throughput.add(sum(len(s.tokens) for s in result.samples))
            if result.request.key.startswith(RPC_PREFIX):
                self.waiting.pop(result.request.key).set_result(result)
                continue
            prompt, record = self.pending.pop(result.request.key)
            for rollout in rollouts_for(prompt, result, self.engine, self.config.run_id):
                ctx.emit(ROLLOUTS, rollout.group_id, rollout)
            ctx.release([record])
            self.backpressure.produced()
        self.reporter.report(ctx, self.engine, self.backpressure)

    def forget(self, partitions: set[tuple[str, int]]) -> None:
        """Partitions went to another replica, which will sample their prompts: stop ours."""
        gone = {key for key, (_, rec) in self.pending.items() if (rec.topic, rec.partition) in partitions}
        self.engine.abort(gone)
        for key in gone:
            del self.pending[key]

    # ---- admission and metrics -------------------------------------------------------------
    def admission(self) -> tuple[int, str]:
        """How many prompts may enter the engine now, and what holds them back when none may."""
        in_flight = self.engine.in_flight()
        self.backpressure.refresh()
        if self.paused:
            return 0, "paused by control"
        if self.engine.decoding() and self.policy.due(self.engine.version):
            return 0, f"finishing the groups part-way decoded before loading policy v{self.policy.wanted.version}"
        room = self.config.max_inflight_groups - in_flight
        ahead = self.backpressure.room(in_flight)
        if ahead is not None and ahead < max(room, 1):
            return ahead, "" if ahead else "ahead of the learner"
        return room, ""  # room 0: the engine holds max_inflight_groups

    def loop(self) -> None:
        held_by = ""
        refreshed_at = 0.0
        while not self.stop.is_set():
            now = time.monotonic()
            # an engine with groups in flight steps many times a second: it reads `policy` and
            # `control` at most every REFRESH_BUSY_S
            if self.engine.in_flight() == 0 or now - refreshed_at >= REFRESH_BUSY_S:
                self.refresh()
                refreshed_at = now
            room, reason = self.admission()
            if reason != held_by:
                log.info("admission %s (%s groups in flight, %.1f learner steps ahead)",
                         f"held: {reason}" if reason else "open", self.engine.in_flight(),
                         self.backpressure.versions_ahead(self.engine.in_flight()))
                held_by = reason
            metrics.PAUSED.set(0 if room > 0 else 1)
            self.stream.throttle(room <= 0)
            busy = self.engine.in_flight() > 0 or not self.oneoffs.empty()
            held = room <= 0 and not busy
            # an engine with work steps without waiting on Kafka; one held back waits on `policy`
            # instead of `prompts`, so the announcement that opens room is seen when it lands (a
            # 200 ms poll of the paused prompts delayed it by 100 ms a step on average)
            self.stream.set_pace(max_records=max(1, room), poll_ms=0 if busy or held else POLL_MS)
            self.stream.step()
            if held:
                self.refresh(timeout_ms=HELD_WAIT_MS)
                refreshed_at = time.monotonic()

    def shutdown(self) -> None:
        self.stream.close()  # prompts still in flight stay uncommitted and are sampled again after a restart
        self.control.close()
        self.backpressure.close()
