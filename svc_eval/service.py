"""svc_eval: held-out sets sampled with exactly the announced policy versions, pass@k on `evals`.

The stage follows `policy` and `control` as a consumer group (records of another run id, on a shared
broker, are not its run's). A version v with v % every_versions == 0, and any version an `evaluate`
command names, becomes a job that holds its record: the
announcement is checked as svc_rollout checks it (checkpoint roots and the learner's signature), the
checkpoint is loaded through m1flow.store with its SHA-256 checked, each set is sampled by the
rollout engines (m1flow.engines, the same request a training prompt makes: chat template, sampling
settings, repetition truncation) with a seed per (set, prompt), and scored by svc_reward's
verifiers in this process (svc_reward.client.LocalScorer, the kinds registry svc_reward scores
with). Each (set, version) is published as one EvalResult keyed `<run>/<set>/v<version>`; the job's
record is released once all its sets are out, so its offset is committed only after the broker
acknowledged them (the worker flushes, then commits). On start the stage reads `evals` back and
skips every (set, version) already there: a kill -9 mid-version redoes only the sets not yet
published, and they come out the same (same seeds, same batches).

A version that cannot be loaded (checkpoint rotated away, unreadable, checksum mismatch, an
announcement the guard refuses) is skipped with the reason on /metrics and `metrics`, and its
record committed: never a crash loop. While `max_queued_versions` jobs wait, `policy` is read no
further, so an evaluation slower than training falls behind instead of holding unbounded state.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from m1flow import engines, store
from m1flow.bus import Context, HandlerBase, Record
from m1flow.bus.clients import ClientError
from m1flow.bus.topics import CONTROL, EVALS, POLICY, TopicSpec, suffixed
from m1flow.bus.watch import TopicWatcher
from m1flow.bus.worker import POLL_MS
from m1flow.contracts import events
from m1flow.engines.base import GroupRequest, GroupResult
from m1flow.engines.prompts import prompt_input, prompt_text
from m1flow.heldout import EvalSetConfig, HeldOutError, load_set
from m1flow.runtime.service import Service
from m1flow.sampling import seed_for
from m1flow.security.announcements import Guard
from svc_eval import metrics
from svc_eval.config import EvalConfig
from svc_eval.result import SetRun, result_key
from svc_eval.versions import Versions
from svc_reward.client import LocalScorer

log = logging.getLogger(__name__)
SCHEDULE, CONTROL_TRIGGER = "schedule", "control"


@dataclass
class Job:
    """One policy version to evaluate on some sets, and the input records that asked for it."""

    version: int
    trigger: str
    sets: list[str]  # still to publish, in the configured order
    records: list[Record]


class EvalHandler(HandlerBase):
    topics = (POLICY, CONTROL)

    def __init__(self, service: "EvalService") -> None:
        self.service = service

    def handle(self, message, record: Record, ctx: Context) -> None:  # noqa: ANN001 - PolicyVersion or Control
        self.service.receive(message, record, ctx)

    def tick(self, ctx: Context) -> None:
        self.service.advance(ctx)

    def on_revoked(self, partitions: set[tuple[str, int]]) -> None:
        self.service.forget(partitions)


def check_kinds(sets: dict[str, tuple[EvalSetConfig, list[events.Prompt]]], scorer: LocalScorer) -> None:
    """Refuse, at start-up, a set holding a verifier kind this process cannot score."""
    for name, (_, prompts) in sets.items():
        for kind in sorted({p.verifier.kind.split(":", 1)[0] for p in prompts}):
            try:
                scorer.prepare(kind)
            except ValueError as exc:
                scorer.close()
                raise HeldOutError(f"eval set {name!r}: verifier kind {kind!r} cannot be scored: {exc}") from None


def read_to_end(cfg: EvalConfig, spec: TopicSpec, group_id: str, stop: threading.Event) -> list:
    """Every message on `spec` now (retrying a read that fails, until the stage stops)."""
    watcher = TopicWatcher(cfg.bootstrap, (spec,), f"eval-{cfg.replica}-{spec.name}", group_id=group_id,
                           client=cfg.kafka_client)
    try:
        while not stop.is_set():
            try:
                return watcher.catch_up()
            except (TimeoutError, ClientError) as exc:
                log.warning("reading `%s` to its end failed, retrying: %s", spec.name, exc)
        return []
    finally:
        watcher.close()


class EvalService(Service, name="eval", config=EvalConfig):

    def __init__(self, config: EvalConfig) -> None:
        super().__init__(config)
        self.config: EvalConfig = config
        torch.set_num_threads(config.torch_threads)
        # bad input stops the stage here, before it serves: an empty or unreadable set, an unknown kind
        if not config.eval_sets:
            raise HeldOutError("eval: no `eval_sets` configured; nothing to evaluate")
        self.sets: dict[str, tuple[EvalSetConfig, list[events.Prompt]]] = {
            cfg.set_name: (cfg, load_set(cfg, config.run_id)) for cfg in config.eval_sets}
        self.scorer = LocalScorer(config.scoring)
        check_kinds(self.sets, self.scorer)
        self.engine = engines.build(SimpleNamespace(
            engine=config.engine, batch_groups=config.batch_groups, device=config.device,
            torch_threads=config.torch_threads, vllm=config.vllm,
            group_size=max(cfg.samples for cfg, _ in self.sets.values())))
        self.engine.policies = store.PolicyCache(
            config.store, config.store.cache_dir or config.run_dir / "eval" / f"policy-cache-{config.replica}")
        self.guard = Guard(config.security)  # asked of every `policy` record before anything reads it
        self.versions = Versions(self.engine)
        self.done: set[str] = set()  # result keys on `evals` (read back at start, then as published)
        self.queue: deque[Job] = deque()
        self.active: Job | None = None
        self.current: SetRun | None = None  # the active job's set being sampled
        self.newest = -1  # the newest version fully evaluated by this process

    # ---- start: what is published already, what was announced ----------------------------
    def start(self) -> None:
        cfg = self.config
        evals = EVALS.renamed(suffixed(EVALS.name, cfg.output_suffix))
        for message in read_to_end(cfg, evals, self.group_id, self.stop):
            if message.run_id == cfg.run_id:
                self.done.add(result_key(message.run_id, message.set, message.policy_version))
        for message in read_to_end(cfg, POLICY, self.group_id, self.stop):
            # counted when the worker reads it (or by the process that did, before a restart)
            if message.header.trace.run_id in ("", cfg.run_id) and self.guard.admits(message, count=False):
                self.versions.add(message)
        log.info("%s result(s) of run %s already on %s; %s policy version(s) announced so far",
                 len(self.done), cfg.run_id, evals.name, len(self.versions.announced))
        self.stream = self.worker(EvalHandler(self), max_records=64)

    # ---- input: announcements and commands become jobs ------------------------------------
    def receive(self, message, record: Record, ctx: Context) -> None:  # noqa: ANN001
        cfg = self.config
        if message.header.trace.run_id not in ("", cfg.run_id):
            return  # another run's learner or person on a shared broker: not this run's versions
        if isinstance(message, events.PolicyVersion):
            if not self.guard.admits(message):
                return  # refused (counted): no candidate, no job, nothing on `metrics`
            self.versions.add(message)
            if message.version % cfg.every_versions == 0:
                self._enqueue(Job(message.version, SCHEDULE, list(self.sets), [record]), ctx)
            return
        if message.WhichOneof("command") != "evaluate":
            return
        asked = list(message.evaluate.sets) or list(self.sets)
        for name in (n for n in asked if n not in self.sets):
            self._skip(ctx, message.evaluate.version, "unknown_set", f"no eval set {name!r}; known: {', '.join(self.sets)}")
        known = [n for n in asked if n in self.sets]
        if known:
            self._enqueue(Job(message.evaluate.version, CONTROL_TRIGGER, known, [record]), ctx)

    def _enqueue(self, job: Job, ctx: Context) -> None:
        job.sets = [s for s in job.sets if result_key(self.config.run_id, s, job.version) not in self.done]
        if not job.sets:
            return  # all published already (a replay, a restart, a second command): its record is done
        ctx.hold(job.records[0])
        same = next((j for j in (self.active, *self.queue) if j is not None and j.version == job.version), None)
        if same is not None:  # asked twice (the schedule and a command): one job, both records
            same.sets += [s for s in job.sets if s not in same.sets]
            same.records += job.records
        else:
            self.queue.append(job)
        metrics.QUEUED.set(len(self.queue))

    def forget(self, partitions: set[tuple[str, int]]) -> None:
        """The input went to another member, which reads these records again: drop their jobs."""
        mine = lambda job: any((r.topic, r.partition) in partitions for r in job.records)  # noqa: E731
        self.queue = deque(j for j in self.queue if not mine(j))
        if self.active is not None and mine(self.active):
            self.engine.abort({f"{self.current.name}/{i}" for i in range(self.current.prompts)} if self.current else set())
            self.active, self.current = None, None

    # ---- the work: one slice of sampling and scoring per loop step -------------------------
    def advance(self, ctx: Context) -> None:
        deadline = time.monotonic() + self.config.engine_slice_s
        while time.monotonic() < deadline:
            if self.current is None and not self._next_set(ctx):
                break
            started = time.perf_counter()
            finished = self.engine.step()
            for result in finished:
                self._score(result)
            self.current.seconds += time.perf_counter() - started
            if self.current.complete:
                self._publish(ctx)
        metrics.QUEUED.set(len(self.queue))

    def _next_set(self, ctx: Context) -> bool:
        """Start sampling the next set still to do (loading the job's version first); False: no work."""
        cfg = self.config
        while True:
            job = self.active
            if job is None:
                if not self.queue:
                    return False
                job = self.active = self.queue.popleft()
                if not self._load(job, ctx):
                    self._finish(ctx)
                    continue
            job.sets = [s for s in job.sets if result_key(cfg.run_id, s, job.version) not in self.done]
            if not job.sets:
                self._finish(ctx)
                continue
            name = job.sets[0]
            set_cfg, prompts = self.sets[name]
            self.current = SetRun(name, job.version, len(prompts), set_cfg.samples, set_cfg.k)
            window = set_cfg.max_new_tokens or cfg.max_new_tokens
            for i, prompt in enumerate(prompts):  # one order, one batching: a redo samples the same
                self.engine.submit(GroupRequest(
                    f"{name}/{i}", self.engine.prompt_ids(prompt_input(prompt)), set_cfg.samples, window,
                    cfg.temperature, cfg.top_p, seed_for("eval", cfg.seed, name, i), cfg.early_stop_run,
                    cfg.early_stop_prob))
            log.info("evaluating %s on policy v%s (%s): %s prompts x %s samples", name, job.version, job.trigger,
                     len(prompts), set_cfg.samples)
            return True

    def _load(self, job: Job, ctx: Context) -> bool:
        """Hold exactly the job's version; False: skipped, counted."""
        refused = self.versions.load(job.version)
        return True if refused is None else self._skip(ctx, job.version, *refused)

    def _skip(self, ctx: Context, version: int, reason: str, why: str) -> bool:
        metrics.SKIPPED.labels(reason).inc()
        ctx.metric("eval/skipped", 1.0, step=version, reason=reason)
        log.warning("policy v%s not evaluated (%s): %s", version, reason, why)
        return False

    def _score(self, result: GroupResult) -> None:
        run = self.current
        index = int(result.request.key.rsplit("/", 1)[1])
        prompt = self.sets[run.name][1][index]
        texts = [self.engine.decode(s.tokens) for s in result.samples]
        verdicts = self.scorer.score_group(prompt_text(prompt), texts, prompt.verifier)
        run.add(index, [len(s.tokens) for s in result.samples],
                [(v.correct, v.status.is_infra_failure, v.reward) for v in verdicts])

    def _publish(self, ctx: Context) -> None:
        cfg, run, job = self.config, self.current, self.active
        set_cfg, _ = self.sets[run.name]
        result = run.result(cfg.run_id, self.versions.held, engine=self.engine.name,
                            temperature=cfg.temperature, top_p=cfg.top_p,
                            max_new_tokens=set_cfg.max_new_tokens or cfg.max_new_tokens, trigger=job.trigger,
                            resamples=cfg.resamples)
        key = result_key(cfg.run_id, run.name, job.version)
        ctx.emit(EVALS, key, result)
        self.done.add(key)
        job.sets.remove(run.name)
        self.current = None
        metrics.RESULTS.labels(run.name).inc()
        metrics.PASS1.labels(run.name).set(result.pass1)
        metrics.SET_SECONDS.labels(run.name).set(run.seconds)
        ctx.metric("eval/pass1", result.pass1, step=job.version, set=run.name)
        log.info("%s v%s: pass@1 %.3f [%.3f, %.3f] over %s prompts x %s samples in %.1fs", run.name, job.version,
                 result.pass1, result.pass1_low, result.pass1_high, result.prompts, result.samples, run.seconds)

    def _finish(self, ctx: Context) -> None:
        """The active job is done (published or skipped): its records may be committed after this
        step's flush, which acknowledges what it published first."""
        job = self.active
        ctx.release(job.records)
        if not job.sets and job.version > self.newest:
            self.newest = job.version
            metrics.VERSION.set(job.version)
        self.active = None

    # ---- the loop ----------------------------------------------------------------------------
    def loop(self) -> None:
        self.stream.run(self.stop, before_step=self._pace)  # a replay (`m1flow replay --service eval`) ends

    def _pace(self) -> None:
        """Hold new versions while the queue is full; step without waiting on Kafka while there is work."""
        busy = self.active is not None or bool(self.queue)
        self.stream.throttle(len(self.queue) >= self.config.max_queued_versions)
        self.stream.set_pace(poll_ms=0 if busy else POLL_MS)

    def shutdown(self) -> None:
        self.stream.close()  # a job part-way stays uncommitted: its unpublished sets are redone after a restart
        self.scorer.close()
