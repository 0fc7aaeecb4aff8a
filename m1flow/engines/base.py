"""What every rollout engine does, whatever runs the model: submit groups, step, collect finished ones.

A group is one prompt's n samples. The service submits groups as prompts arrive and steps the
engine from its loop; each step advances every group in flight and returns those that finished,
so an engine may batch across prompts and groups (continuous batching in vLLM, a batch of groups
per step in the others). An engine holds one policy at a time: the service only loads a new one
when no group is part-way decoded (`decoding`), so every sample of a group, and every token of a
sample, comes from the version the group is tagged with. A batch engine decodes its groups whole
within one step, so between steps it has none part-way: its queued groups are decoded with the
policy loaded by the time their step comes, and tagged with it, and a new policy loads at once
instead of after the queue drains. vLLM's submitted groups are part-way from the start.

Log-probs are those of the distribution each token was drawn from (temperature, then top-p,
renormalised: m1flow.sampling), and a completion stops early after `early_stop_run` consecutive
tokens each drawn with probability above `early_stop_prob` (finish reason REPETITION; the report's
truncation, at generation time).
"""
from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from m1flow import chat, checkpoint, store
from m1flow.contracts import events
from m1flow.engines import reload

log = logging.getLogger(__name__)


@dataclass
class GroupRequest:
    key: str  # unique among the groups in flight
    prompt_ids: list[int]
    n: int
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int
    early_stop_run: int
    early_stop_prob: float


@dataclass
class Sample:
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: int = events.FINISH_REASON_LENGTH  # events.FinishReason
    routed_experts: events.RoutedExperts | None = None  # R3: the experts it was routed through (recording engines)


@dataclass
class GroupResult:
    request: GroupRequest
    version: int  # the policy every token was sampled with
    samples: list[Sample]


class Engine(ABC):
    """One policy, many groups in flight."""

    name: str
    capacity: int = 1  # sequences one step can decode together (batch occupancy is measured against it)

    def __init__(self) -> None:
        self.version = -1
        self.tokenizer: Any = None
        self.last_reload_s = 0.0
        self.policies = store.PolicyCache()  # the service gives it its config and cache directory

    def load(self, policy: events.PolicyVersion) -> None:
        """Take the announced policy (checksum verified); only called with no group part-way decoded."""
        if self.decoding():
            raise RuntimeError("a policy may only be loaded with no group part-way decoded")
        directory = self.policies.local(policy.checkpoint_uri)  # an s3 policy: downloaded into the cache
        try:
            checkpoint.verify(directory, policy.sha256)
        except checkpoint.PolicyLoadError:
            self.policies.discard(directory)  # a tampered or torn download is not kept for the next try
            raise
        started = time.perf_counter()
        self._load(directory)
        self.last_reload_s = time.perf_counter() - started
        self.version = policy.version
        log.info("loaded policy version %s from %s in %.3fs", policy.version, policy.checkpoint_uri, self.last_reload_s)

    @abstractmethod
    def _load(self, directory: Any) -> None: ...

    @abstractmethod
    def submit(self, request: GroupRequest) -> None: ...

    @abstractmethod
    def step(self) -> list[GroupResult]:
        """Advance the groups in flight; return those that finished."""

    @abstractmethod
    def abort(self, keys: set[str]) -> None:
        """Forget these groups (their prompts went to another replica)."""

    @abstractmethod
    def in_flight(self) -> int:
        """Groups submitted and not yet returned."""

    def decoding(self) -> int:
        """Groups with tokens sampled already (a new policy waits for them): all in flight, unless
        the engine says otherwise."""
        return self.in_flight()

    @abstractmethod
    def sequences_in_flight(self) -> int: ...

    def prompt_ids(self, prompt: chat.PromptInput) -> list[int]:
        """A text (one user turn) or a whole conversation, in the policy's chat template: every
        engine tokenizes prompts here."""
        return chat.prompt_ids(self.tokenizer, prompt)

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    @property
    def eos_id(self) -> int | None:
        return self.tokenizer.eos_token_id


class BatchEngine(Engine):
    """Engines that run a batch of whole groups to completion per step (native, HF)."""

    model: Any  # the policy, a torch module in this process

    def __init__(self, batch_groups: int, group_size: int) -> None:
        super().__init__()
        self.batch_groups = batch_groups
        self.capacity = batch_groups * group_size
        self.queue: deque[GroupRequest] = deque()
        self.model = None
        self.layout = ""  # reload.layout_key of the directory the model was built from
        self.reloads_in_place = 0

    def _load(self, directory: Any) -> None:
        """A version with the loaded one's architecture and tokenizer is copied into the live model
        (m1flow.engines.reload); any other is built whole by the engine."""
        layout = reload.layout_key(directory)
        if self.model is not None and layout == self.layout:
            try:
                reload.copy_weights(self.model, directory)
                self.reloads_in_place += 1
                return
            except checkpoint.PolicyLoadError as exc:
                log.warning("policy %s not copied in place (%s): loading it whole", directory, exc)
        self._load_whole(directory)
        self.layout = layout

    @abstractmethod
    def _load_whole(self, directory: Any) -> None:
        """Build the model and the tokenizer from a policy directory."""

    def load_weights(self, version: int, weights: Mapping[str, Any]) -> None:
        """Take a policy's weights from a learner in this process, copied in place: a colocated loop
        (bench/learning.py's in-process side), where writing a checkpoint and reading it back cost a
        fifth of each step (the services announce checkpoints: they share no memory)."""
        if self.decoding():
            raise RuntimeError("a policy may only be loaded with no group part-way decoded")
        started = time.perf_counter()
        with torch.no_grad():
            self.model.load_state_dict(weights, strict=True)
        self.last_reload_s = time.perf_counter() - started
        self.version = version

    def submit(self, request: GroupRequest) -> None:
        if self.version < 0:
            raise RuntimeError("no policy loaded yet")
        self.queue.append(request)

    def step(self) -> list[GroupResult]:
        batch = [self.queue.popleft() for _ in range(min(self.batch_groups, len(self.queue)))]
        results = []
        for part in uniform_runs(batch):
            results += [GroupResult(r, self.version, samples) for r, samples in zip(part, self.generate(part))]
        return results

    @abstractmethod
    def generate(self, batch: list[GroupRequest]) -> list[list[Sample]]:
        """Each group's samples; every request of `batch` has the same sampling settings."""

    def abort(self, keys: set[str]) -> None:
        self.queue = deque(r for r in self.queue if r.key not in keys)

    def in_flight(self) -> int:
        return len(self.queue)

    def decoding(self) -> int:
        return 0  # between steps every group is either finished or not started

    def sequences_in_flight(self) -> int:
        return sum(r.n for r in self.queue)


def uniform_runs(batch: list[GroupRequest]) -> list[list[GroupRequest]]:
    """Consecutive requests that share their sampling settings, in order (one batch each)."""
    runs: list[list[GroupRequest]] = []
    for r in batch:
        if runs and _settings(runs[-1][0]) == _settings(r):
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


def _settings(r: GroupRequest) -> tuple:
    return r.temperature, r.top_p, r.n, r.early_stop_run, r.early_stop_prob
