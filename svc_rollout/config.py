"""Settings of the rollout service."""
from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from m1flow.runtime.config import ServiceConfig
from m1flow.engines import EngineName
from m1flow.engines.vllm_engine import VllmSettings


class GenerateCaps(BaseModel):
    """The most one Generate call (sampling by hand, over gRPC) may ask for; more is INVALID_ARGUMENT."""
    max_n: int = Field(64, ge=1, description="samples of one call")
    max_new_tokens: int = Field(8192, ge=1, description="tokens per sample")
    max_prompt_chars: int = Field(65536, ge=1, description="characters of the prompt")


class RolloutConfig(ServiceConfig):
    """svc_rollout: samples G completions per prompt with the current policy."""

    engine: EngineName = Field(  # a name in m1flow.engines.ENGINES
        "native", description="native: the hybrid model's own decoding; hf: transformers generate; vllm: production")
    device: str = Field("auto", description="native/hf engines: auto (CUDA where present), cpu, cuda:N")
    group_size: int = Field(8, description="completions per prompt when the prompt does not say")
    max_new_tokens: int = Field(8, description="output window until `control` sets another (new requests only)")
    max_window: int = Field(131072, ge=1, description="the most tokens per sample a prompt on the topic or a "
                            "`set_window` may ask for (M1's 80K window fits); a prompt asking more goes to dlq")
    max_group_size: int = Field(4096, ge=1, description="the most samples a prompt on the topic may ask for")
    temperature: float = 1.0
    top_p: float = 0.95
    early_stop_run: int = Field(3000, ge=1, description="stop after this many consecutive near-certain tokens")
    early_stop_prob: float = Field(0.99, ge=0.5, lt=1.0, description="'near-certain': drawn with probability above this")
    max_inflight_groups: int = Field(64, ge=1, description="groups admitted into the engine at once")
    batch_groups: int = Field(8, ge=1, description="native/hf: groups decoded together per step")
    record_routing: bool = Field(
        False, description="native: carry the experts each MoE layer chose for every token on each Rollout "
                           "(routed_experts, R3) so the learner can replay them; about layers x top_k bytes a token")
    engine_slice_s: float = Field(0.05, ge=0, description="engine steps run back to back before Kafka is served again")
    max_ahead_versions: float = Field(
        1.0, ge=0, description="pause while the groups not yet trained on exceed this many learner steps beyond "
                               "the one the learner can already take")
    batch_margin_sd: float = Field(
        2.0, ge=0, description="admit this many standard deviations of the groups a learner batch takes beyond "
                               "max_ahead_versions (dynamic sampling's skips vary), so the next batch forms in time")
    learner_batch_groups: int = Field(16, ge=1, description="groups per learner step until `policy` announces it")
    reward_group: str = Field("m1flow-reward", description="consumer group of the reward service (its lag counts)")
    learner_group: str = Field("m1flow-learner", description="consumer group of the learner (its lag counts)")
    policy_retry_s: float = Field(5.0, description="retry a policy that failed to load after this long")
    pinned_policy: str = Field("", description="replay: sample with this checkpoint URI only, not `policy`'s")
    pinned_policy_version: int = Field(0, ge=0, description="the version of pinned_policy (stamped on rollouts)")
    generate: GenerateCaps = Field(default_factory=GenerateCaps, description="caps of one Generate call")
    torch_threads: int = 1
    vllm: VllmSettings = Field(default_factory=VllmSettings)

    @model_validator(mode="after")
    def _records_natively(self) -> "RolloutConfig":
        if self.record_routing and self.engine != "native":
            raise ValueError(f"record_routing: only the native engine records routing (engine is {self.engine!r})")
        return self

    @property
    def replaying(self) -> bool:
        """A pinned policy is a replay's too: the learner does not move it (see ServiceConfig.replaying)."""
        return super().replaying or bool(self.pinned_policy)
