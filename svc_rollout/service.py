"""svc_rollout: prompts in, one Rollout per completion out, tagged with the policy that sampled it."""
from __future__ import annotations

import logging
import time

import grpc
import torch
from kafka.errors import KafkaError

from m1flow.bus import Context, HandlerBase, Record, codec
from m1flow.bus.topics import CONTROL, POLICY, PROMPTS, ROLLOUTS
from m1flow.bus.watch import TopicWatcher
from m1flow.policy_follower import PolicyFollower
from m1flow.contracts import events, rpc, rpc_grpc
from m1flow.policy import seed_for
from m1flow.runtime import logs
from m1flow.runtime.service import Service
from svc_rollout.config import RolloutConfig
from svc_rollout.engine import FINISH, NativeEngine

log = logging.getLogger(__name__)


class PromptHandler(HandlerBase):
    topics = (PROMPTS,)

    def __init__(self, service: "RolloutService") -> None:
        self.service = service

    def handle(self, prompt: events.Prompt, record: Record, ctx: Context) -> None:
        for rollout in self.service.rollouts_for(prompt):
            ctx.emit(ROLLOUTS, rollout.group_id, rollout)
        self.service.groups_on_version += 1


class RolloutGrpc(rpc_grpc.RolloutServiceServicer):
    def __init__(self, service: "RolloutService") -> None:
        self.service = service

    def Generate(self, request: rpc.GenerateRequest, context: grpc.ServicerContext):  # noqa: N802
        cfg = self.service.config
        version, _, completions = self.service.engine.generate(
            request.prompt, n=request.n or 1, max_new_tokens=request.max_new_tokens or self.service.window,
            temperature=request.temperature or cfg.temperature, top_p=request.top_p or cfg.top_p,
            seed=request.seed or seed_for(request.prompt, time.time_ns()))
        for i, comp in enumerate(completions):
            yield rpc.GeneratedSample(index=i, text=self.service.engine.decode(comp.tokens),
                                      token_ids=comp.tokens, logprobs=comp.logprobs,
                                      finish_reason=FINISH[comp.finish_reason], policy_version=version)


class RolloutService(Service):
    name = "rollout"
    Config = RolloutConfig

    def __init__(self, config: RolloutConfig) -> None:
        super().__init__(config)
        self.config: RolloutConfig = config
        self.engine = NativeEngine()
        self.policy = PolicyFollower(config.policy_retry_s)
        self.window = config.max_new_tokens
        self.paused = False
        self.groups_on_version = 0
        torch.set_num_threads(config.torch_threads)

    def register(self, server: grpc.Server) -> list[str]:
        rpc_grpc.add_RolloutServiceServicer_to_server(RolloutGrpc(self), server)
        return ["m1flow.v1.RolloutService"]

    def start(self) -> None:
        self.watcher = TopicWatcher(self.config.bootstrap, (POLICY, CONTROL), f"rollout-{self.config.replica}-watch")
        if self.config.pinned_policy:  # a replay samples with the version its range was sampled with
            self.policy.announce(events.PolicyVersion(version=self.config.pinned_policy_version,
                                                      checkpoint_uri=self.config.pinned_policy))
        self._catch_up()
        waited = time.monotonic()
        while self.engine.version < 0 and not self.stop.is_set():
            if time.monotonic() - waited > 30:
                log.warning("still no loadable policy on `policy`; waiting (start the learner or publish one)")
                waited = time.monotonic()
            self.refresh(timeout_ms=500)
        self.stream = self.worker(PromptHandler(self), max_records=1)

    def _catch_up(self) -> None:
        """Apply the whole history of `policy` and `control`, however long, before serving."""
        while not self.stop.is_set():
            try:
                self.apply(self.watcher.catch_up())
                return
            except (TimeoutError, KafkaError) as exc:
                log.warning("reading `policy` and `control` to their end failed, retrying: %s", exc)

    def refresh(self, timeout_ms: int = 0) -> None:
        """Apply new policy versions and control commands."""
        self.apply(self.watcher.poll(timeout_ms))

    def apply(self, messages: list) -> None:
        """Take the newest announced policy and the control commands, in order."""
        for msg in messages:
            if isinstance(msg, events.PolicyVersion):
                if not self.config.pinned_policy:
                    self.policy.announce(msg)
            elif msg.HasField("set_window"):
                self.window = msg.set_window.max_new_tokens
                log.info("output window set to %s", self.window)
            elif msg.HasField("pause"):
                self.paused = True
            elif msg.HasField("resume"):
                self.paused = False
        if self.policy.load_if_due(self.engine):
            self.groups_on_version = 0

    def rollouts_for(self, prompt: events.Prompt) -> list[events.Rollout]:
        cfg = self.config
        group_id = f"{prompt.prompt_id}/{prompt.header.message_id[:8]}"
        n = prompt.group_size or cfg.group_size
        window = prompt.max_new_tokens or self.window
        with logs.trace(run_id=prompt.header.trace.run_id, group_id=group_id):
            version, prompt_ids, completions = self.engine.generate(
                prompt.text, n=n, max_new_tokens=window, temperature=cfg.temperature, top_p=cfg.top_p,
                seed=seed_for(group_id, self.engine.version), early_stop_run=cfg.early_stop_run,
                early_stop_prob=cfg.early_stop_prob)
            out = []
            for i, comp in enumerate(completions):
                rollout_id = f"{group_id}/{i}"
                out.append(events.Rollout(
                    header=codec.header("rollout", run_id=prompt.header.trace.run_id or cfg.run_id,
                                        group_id=group_id, rollout_id=rollout_id,
                                        policy_version=version, message_id=f"{rollout_id}@v{version}"),
                    rollout_id=rollout_id, group_id=group_id, prompt_id=prompt.prompt_id, index=i,
                    group_size=n, task_type=prompt.task_type, prompt_text=prompt.text,
                    prompt_token_ids=prompt_ids, token_ids=comp.tokens, logprobs=comp.logprobs,
                    response_text=self.engine.decode(comp.tokens),
                    finish_reason=FINISH[comp.finish_reason], policy_version=version,
                    verifier=prompt.verifier, max_new_tokens=window, engine=self.engine.name))
            log.info("generated group of %s on policy v%s", n, version)
            return out

    def should_wait(self) -> bool:
        """Paused by `control`, or too far ahead of the learner (bounded staleness)."""
        return self.paused or self.groups_on_version >= self.config.max_ahead_groups

    def loop(self) -> None:
        while not self.stop.is_set():
            self.refresh()
            self.stream.throttle(self.should_wait())
            self.stream.step()

    def shutdown(self) -> None:
        self.stream.close()
        self.watcher.close()


