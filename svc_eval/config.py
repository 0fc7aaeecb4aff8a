"""Settings of the evaluation stage: which held-out sets, which versions, and the sampling (the
rollout engines' knobs, so a set is sampled the way training samples)."""
from __future__ import annotations

from pydantic import Field, field_validator

from m1flow.engines import EngineName
from m1flow.engines.vllm_engine import VllmSettings
from m1flow.heldout import EvalSetConfig, unique_names
from m1flow.runtime.config import ServiceConfig
from svc_reward.client import RewardConfig


class EvalConfig(ServiceConfig):
    """svc_eval: samples the held-out sets with exactly the policy versions the learner announces
    (every `every_versions`-th, and any a `control` evaluate names) and publishes pass@k on `evals`."""

    eval_sets: list[EvalSetConfig] = Field(
        default_factory=list, description="the held-out sets (m1flow.heldout.EvalSetConfig: a dataset or generator, "
                                          "name, prompts, samples, k); the run's settings file lists them beside `sources:`")
    every_versions: int = Field(5, ge=1, description="evaluate policy version v when v % every_versions == 0 (v0 too)")
    engine: EngineName = Field("native", description="a name in m1flow.engines.ENGINES, as svc_rollout's --engine")
    device: str = Field("auto", description="native/hf engines: auto (CUDA where present), cpu, cuda:N")
    batch_groups: int = Field(8, ge=1, description="native/hf: prompts decoded together per engine step")
    torch_threads: int = Field(1, ge=1, description="CPU threads for sampling (bounds what evaluation takes from training)")
    max_new_tokens: int = Field(8, ge=1, description="output window of a set that does not set its own (fixed: "
                                                     "results of two versions compare only under one window)")
    temperature: float = Field(1.0, ge=0, description="sampling temperature (training's, so pass@1 is what "
                                                      "a rollout of that version scores)")
    top_p: float = Field(0.95, gt=0, le=1)
    early_stop_run: int = Field(3000, ge=1, description="the rollout's repetition truncation")
    early_stop_prob: float = Field(0.99, ge=0.5, lt=1.0)
    seed: int = Field(0, description="mixed into every (set, prompt) sampling seed; the same for every version")
    max_queued_versions: int = Field(4, ge=1, description="versions waiting to be evaluated before `policy` is "
                                                          "read no further (their checkpoints may be rotated away "
                                                          "meanwhile: then skipped, counted)")
    engine_slice_s: float = Field(0.2, ge=0, description="engine steps run back to back before Kafka is served again")
    resamples: int = Field(2000, ge=100, description="bootstrap resamples of the pass@1 interval")
    scoring: RewardConfig = Field(default_factory=RewardConfig,
                                  description="the verifiers' settings (svc_reward's: math, code, genrm, sandbox_address)")
    vllm: VllmSettings = Field(default_factory=VllmSettings)

    @field_validator("eval_sets")
    @classmethod
    def _unique_sets(cls, value: list[EvalSetConfig]) -> list[EvalSetConfig]:
        return list(unique_names(value))
