"""One held-out set's samples, scored, as the EvalResult svc_eval publishes (pure: no engine, no broker).

Per prompt, n is the samples with a verdict (an infrastructure failure of ours says nothing about
the policy and is left out, as the learner leaves it out) and c the correct ones. pass@1 is the mean
over prompts of c/n (with the same n everywhere, the mean over samples); pass@k is Chen et al.'s
unbiased estimator averaged over the prompts with n >= k; the interval of pass@1 is a percentile
bootstrap over prompts with a fixed seed (m1flow.stats), so the same samples give the same result.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.stats import bootstrap_interval, mean_pass_at_k

INTERVAL = "bootstrap-prompts"


def result_key(run_id: str, set_name: str, version: int) -> str:
    """The record key on `evals` (compaction keeps the newest per key) and the monitor's unique key."""
    return f"{run_id}/{set_name}/v{version}"


@dataclass
class PromptOutcome:
    """What one prompt's samples scored."""

    judged: int = 0  # samples with a verdict
    correct: int = 0
    infra_failed: int = 0
    tokens: int = 0  # over all samples
    reward: float = 0.0  # over the usable samples


@dataclass
class SetRun:
    """One (set, version) being evaluated: the outcome of each prompt as its samples come back."""

    name: str
    version: int
    prompts: int
    samples: int
    ks: list[int]
    outcomes: dict[int, PromptOutcome] = field(default_factory=dict)
    seconds: float = 0.0  # sampling and scoring time spent on it

    @property
    def complete(self) -> bool:
        return len(self.outcomes) == self.prompts

    def add(self, index: int, lengths: list[int], verdicts: list[tuple[bool | None, bool, float]]) -> None:
        """Prompt `index`'s samples: their lengths, and per sample (correct or None, infrastructure
        failure, reward)."""
        out = PromptOutcome(tokens=sum(lengths))
        for correct, infra, reward in verdicts:
            if infra:
                out.infra_failed += 1
                continue
            out.reward += reward
            if correct is not None:
                out.judged += 1
                out.correct += int(correct)
        self.outcomes[index] = out

    def result(self, run_id: str, policy: events.PolicyVersion, *, engine: str, temperature: float, top_p: float,
               max_new_tokens: int, trigger: str, resamples: int) -> events.EvalResult:
        rows = [self.outcomes[i] for i in range(self.prompts)]
        judged, correct = [r.judged for r in rows], [r.correct for r in rows]
        rates = [c / n for n, c in zip(judged, correct) if n]
        pass1 = sum(rates) / len(rates) if rates else 0.0
        low, high = bootstrap_interval(rates, resamples) if rates else (0.0, 0.0)
        usable = sum(r.judged for r in rows) or 1
        key = result_key(run_id, self.name, self.version)
        result = events.EvalResult(
            header=codec.header("eval", run_id=run_id, policy_version=self.version, message_id=f"eval:{key}"),
            run_id=run_id, set=self.name, policy_version=self.version, checkpoint_uri=policy.checkpoint_uri,
            sha256=policy.sha256, prompts=self.prompts, samples=self.samples, judged=sum(judged),
            correct=sum(correct), pass1=pass1, pass1_low=low, pass1_high=high,
            mean_length=sum(r.tokens for r in rows) / max(1, self.prompts * self.samples),
            mean_reward=sum(r.reward for r in rows) / usable, duration_s=self.seconds,
            interval_method=f"{INTERVAL}-{resamples}", engine=engine, temperature=temperature, top_p=top_p,
            max_new_tokens=max_new_tokens, trigger=trigger, prompt_judged=judged, prompt_correct=correct,
            infra_failed=sum(r.infra_failed for r in rows))
        for k in self.ks:
            value = mean_pass_at_k(judged, correct, k)
            if value is not None:
                result.pass_at_k[k] = value
        return result
