"""One benchmark run: an algorithm trained from the warm start on one seed, batches as the learner makes them.

Each step's batch is `batch_groups` trainable groups: prompts are drawn from the pool in a per-seed
order, G completions each are sampled with the current policy and rewarded, and m1flow.rl's
fill_batches selects them (GRPO advantages; groups whose rewards are all equal are skipped and the
next prompt takes their place: DAPO's dynamic sampling). The groups of a batch are shuffled and cut
into `updates` minibatches of whole groups, of equal size, for the learner's train_on_batch.
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count
from typing import Literal

import torch
from policy_io import Policy
from pydantic import BaseModel, ConfigDict, Field

from m1flow.contracts import events
from m1flow.rl.config import AlgorithmConfig
from m1flow.rl.filling import fill_batches
from m1flow.rl.objectives import LossSpec
from m1flow.rl.selection import Selected
from m1flow.rl.shaping import ShapingConfig
from m1flow.status import Status
from m1flow.tasks import chain, recheck
from ops.warmstart import WarmStartConfig
from svc_learner.batching import Batch, to_batch
from svc_learner.optim import EPS, make_optimizer
from svc_learner.update import SequenceLogprobs, TrainConfig, train_on_batch

TaskName = Literal["chain", "recheck"]
TASK_MODULES = {"chain": chain, "recheck": recheck}
# The problems' operand range (3-5 terms), which is also the warm start's.
MAX_OPERAND = {"chain": 12, "recheck": 12}
WARM_STARTS = {
    "chain": WarmStartConfig(task="chain", max_operand=MAX_OPERAND["chain"]),
    # 1000 SFT steps, not 300: the redo after the re-check must be learned well enough to be worth taking
    # (after 300 or 400 steps a forced re-check was no more accurate than the first pass)
    "recheck": WarmStartConfig(task="recheck", max_operand=MAX_OPERAND["recheck"], steps=1000),
}
DAPO_EPS_HIGH = LossSpec("dapo").eps_high
DRIFT_KEYS = ("masked_frac", "drift_abs_log_ratio_last", "abs_log_ratio", "pos_clip_high_share", "clip_high_frac")


class RunConfig(BaseModel):
    """Everything one run depends on besides the algorithm's name and the seed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: TaskName = "recheck"
    steps: int = Field(16, ge=1)
    batch_groups: int = Field(16, ge=1, description="trainable groups per step")
    updates: int = Field(4, ge=1, description="minibatch updates per batch; divides batch_groups")
    group: int = Field(8, ge=2, description="completions per prompt (G)")
    lr: float = Field(1e-5, gt=0)
    adam_eps: float = EPS
    grad_clip: float | None = 1.0
    eps_low: float | None = None  # None: the policy loss's own
    eps_high: float | None = None
    eval_every: int = Field(4, ge=1)
    eval_samples: int = Field(8, ge=1, description="samples per problem at temperature 1 for accuracy")
    max_new_tokens: int = 96  # a re-checked response is at most 81 characters and its end of sequence
    max_groups_per_step: int = Field(
        600, ge=1, description="a step that finds too few trainable groups among this many sampled ends the "
                               "run: the policy collapsed so far that nearly every group's rewards are equal")

    def learner(self) -> TrainConfig:
        return TrainConfig(lr=self.lr, adam_eps=self.adam_eps, minibatches=self.updates, grad_clip=self.grad_clip)

    def algorithm(self, policy_loss: str) -> AlgorithmConfig:
        """Verifier reward only (no format reward, no overlong penalty): what differs is the objective."""
        return AlgorithmConfig(policy_loss=policy_loss, eps_low=self.eps_low, eps_high=self.eps_high,
                               shaping=ShapingConfig(format_reward=0.0, overlong_penalty=False))

    def warmstart(self) -> WarmStartConfig:
        return WARM_STARTS[self.task]

    @property
    def max_operand(self) -> int:
        return MAX_OPERAND[self.task]


@dataclass
class Eval:
    step: int
    pool: float  # sampled accuracy on the training pool
    held_out: float
    recheck_share: float  # share of the pool's samples that took the re-check (task recheck; 0 otherwise)
    recheck_acc: float  # accuracy of the pool's samples that took it (nan when none did)
    plain_acc: float  # accuracy of the others


@dataclass
class RunResult:
    algo: str
    seed: int
    config: RunConfig
    evals: list[Eval] = field(default_factory=list)
    steps: list[dict[str, float]] = field(default_factory=list)  # the learner's stats of every step
    seconds: float = 0.0
    starved_at: int | None = None  # the step that found too few trainable groups, ending the run

    def mean(self, key: str) -> float:
        values = [s[key] for s in self.steps if key in s]
        return sum(values) / len(values) if values else float("nan")

    def max(self, key: str) -> float:
        return max((s[key] for s in self.steps if key in s), default=float("nan"))

    def pool_at(self, step: int) -> float | None:
        return next((e.pool for e in self.evals if e.step == step), None)

    def steps_to(self, target: float) -> int | None:
        """The first evaluated step whose pool accuracy reached target, or None."""
        return next((e.step for e in self.evals if e.pool >= target), None)


def prompt_order(pool: list[chain.ChainProblem], seed: int) -> Iterator[chain.ChainProblem]:
    """The pool in a fresh per-seed shuffle each epoch, forever (the same order for every algorithm)."""
    rng = random.Random(seed)
    while True:
        epoch = list(pool)
        rng.shuffle(epoch)
        yield from epoch


def scored_group(policy: Policy, task: TaskName, problem: chain.ChainProblem, completions, version: int,
                 max_new_tokens: int, serial: int) -> events.ScoredGroup:
    """A group as the reward service writes it: the verifier's reward (1 for a right answer) per sample."""
    ids = policy.prompt_ids(problem.text)
    group = events.ScoredGroup(group_id=f"{problem.prompt_id}#{serial}", group_size=len(completions))
    for i, c in enumerate(completions):
        reward = TASK_MODULES[task].reward(policy.text(c.tokens), problem.answer)
        group.samples.add(index=i, prompt_token_ids=ids, token_ids=c.tokens, logprobs=c.logprobs, reward=reward,
                          status=Status.OK, policy_version=version, max_new_tokens=max_new_tokens)
    return group


@dataclass
class Sampled:
    """Sampled accuracy on a set of problems, split by whether the sample took the re-check."""

    hits: int = 0
    total: int = 0
    recheck_hits: int = 0
    rechecks: int = 0

    @property
    def accuracy(self) -> float:
        return self.hits / max(self.total, 1)

    @property
    def recheck_share(self) -> float:
        return self.rechecks / max(self.total, 1)

    @property
    def recheck_acc(self) -> float:
        return self.recheck_hits / self.rechecks if self.rechecks else float("nan")

    @property
    def plain_acc(self) -> float:
        plain = self.total - self.rechecks
        return (self.hits - self.recheck_hits) / plain if plain else float("nan")


def sampled_accuracy(policy: Policy, model, task: TaskName, problems: list[chain.ChainProblem], cfg: RunConfig,
                     generator: torch.Generator) -> Sampled:
    """cfg.eval_samples samples per problem at temperature 1, rewarded as in training."""
    out = Sampled()
    for p in problems:
        for c in policy.complete(model, p.text, cfg.eval_samples, cfg.max_new_tokens, generator):
            text = policy.text(c.tokens)
            hit = int(TASK_MODULES[task].reward(text, p.answer))
            took = task == "recheck" and recheck.took_recheck(text)
            out.hits += hit
            out.total += 1
            out.rechecks += took
            out.recheck_hits += hit * took
    return out


def fork_ratios(model, batch: Batch, fork_id: int) -> torch.Tensor:
    """Importance ratios, after the batch's updates, of the re-check tokens of positive-advantage responses:
    what PPO's mask compares with 1 + eps_high at the next update."""
    with torch.no_grad():
        logp = SequenceLogprobs(model)(batch.input_ids, batch.response_mask)[0]
    fork = (batch.input_ids == fork_id) & (batch.response_mask > 0) & (batch.advantages[:, None] > 0)
    return torch.exp(logp[fork] - batch.rollout_logp[fork])


class Starved(Exception):
    """A step found fewer than batch_groups trainable groups among max_groups_per_step sampled."""


def train_batches(policy: Policy, model, cfg: RunConfig, algo: str, seed: int,
                  pool: list[chain.ChainProblem], version: list[int], sampled: list[int]) -> Iterator[list[Selected]]:
    """fill_batches over groups sampled on demand with the current policy (the learner's batches, offline).
    version[0] is the policy version of the groups sampled next; sampled[0] counts the groups sampled,
    sampled[1] is the count at the start of the current step (Starved past max_groups_per_step)."""
    gen = torch.Generator().manual_seed(seed)
    order = prompt_order(pool, seed)

    def groups() -> Iterator[events.ScoredGroup]:
        for serial in count():
            if sampled[0] - sampled[1] >= cfg.max_groups_per_step:
                raise Starved
            problem = next(order)
            done = policy.complete(model, problem.text, cfg.group, cfg.max_new_tokens, gen)
            sampled[0] += 1
            yield scored_group(policy, cfg.task, problem, done, version[0], cfg.max_new_tokens, serial)

    return fill_batches(groups(), cfg.algorithm(algo), cfg.batch_groups, flush=False)


def run(policy: Policy, cfg: RunConfig, algo: str, seed: int, pool: list[chain.ChainProblem],
        held_out: list[chain.ChainProblem]) -> RunResult:
    """Train `algo` for cfg.steps steps from the warm start; evaluate every cfg.eval_every steps."""
    if cfg.batch_groups % cfg.updates:
        raise ValueError(f"updates ({cfg.updates}) must divide batch_groups ({cfg.batch_groups}): whole groups")
    torch.manual_seed(seed)
    model = policy.load()
    learner = cfg.learner()
    loss = cfg.algorithm(algo).loss()
    optimizer = make_optimizer(model.parameters(), cfg.lr, eps=cfg.adam_eps)
    shuffle = torch.Generator().manual_seed(10_000 + seed)
    result = RunResult(algo, seed, cfg)
    version, sampled = [0], [0, 0]

    def evaluate(step: int) -> None:
        gen = torch.Generator().manual_seed(20_000 + 100 * seed + step)  # the same draws for every algorithm
        on_pool = sampled_accuracy(policy, model, cfg.task, pool, cfg, gen)
        held = sampled_accuracy(policy, model, cfg.task, held_out, cfg, gen)
        result.evals.append(Eval(step, on_pool.accuracy, held.accuracy, on_pool.recheck_share, on_pool.recheck_acc,
                                 on_pool.plain_acc))

    evaluate(0)
    batches = train_batches(policy, model, cfg, algo, seed, pool, version, sampled)
    for step in range(1, cfg.steps + 1):
        before = sampled[1] = sampled[0]
        try:
            selected = next(batches)
        except Starved:
            result.starved_at = step
            if result.evals[-1].step != step - 1:
                evaluate(step - 1)  # the policy that starved
            break
        if any(len(s.samples) != cfg.group for s in selected):
            raise RuntimeError("a group lost samples: minibatches would not hold whole groups")
        order = torch.randperm(len(selected), generator=shuffle).tolist()
        batch = to_batch([selected[i] for i in order], policy.pad_id)  # contiguous cuts = whole groups
        stats = train_on_batch(model, optimizer, batch, learner, loss)
        if cfg.task == "recheck":
            ratios = fork_ratios(model, batch, policy.token_id(recheck.RECHECK))
            stats["fork_tokens"] = float(ratios.numel())
            if ratios.numel():
                stats["fork_ratio_mean"] = float(ratios.mean())
                stats["fork_above_dapo"] = float((ratios > 1 + DAPO_EPS_HIGH).float().mean())
        stats["groups_sampled"] = float(sampled[0] - before)
        stats["reward_mean"] = sum(r for s in selected for r in s.rewards) / (len(selected) * cfg.group)
        result.steps.append(stats)
        version[0] = step
        if step % cfg.eval_every == 0 or step == cfg.steps:
            evaluate(step)
    return result
