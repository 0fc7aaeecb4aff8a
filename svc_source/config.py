"""Settings of the prompt source service."""
from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from m1flow.data.dataset import DatasetConfig
from m1flow.heldout import EvalSetConfig, unique_names
from m1flow.runtime.config import ServiceConfig
from svc_source.filter import FilterConfig


class SourceConfig(ServiceConfig):
    """svc_source: draws prompts from the configured datasets and generators, a bounded lead ahead
    of the rollout service."""

    sources: list[DatasetConfig] = Field(
        default_factory=list, description="the datasets and generators drawn from, each with its weight "
                                          "(m1flow.data.dataset.DatasetConfig: path or generator, seed, ...)")
    seed: int = Field(0, description="seeds the shuffle of every epoch and the weighted interleave")
    group_size: int = Field(8, ge=1, description="completions per prompt, stamped on each Prompt")
    max_epochs: int = Field(0, ge=0, description="epochs of each source before it is exhausted; 0: forever")
    block_rows: int = Field(4096, ge=1, description="shuffle block: rows read and held at once per source")
    lead_steps: float = Field(2.0, ge=0, description="publish while the prompts the rollout group has not "
                                                     "committed stay under this many learner batches; 0: no limit")
    batch_groups: int = Field(16, ge=1, description="groups per learner step until `policy` announces it")
    rollout_group: str = Field("m1flow-rollout", description="consumer group of the rollout service (its lag counts)")
    publish_batch: int = Field(64, ge=1, description="prompts per acknowledged batch (and per state record)")
    read_ahead: bool = Field(True, description="read, check and encode each source's next block in a reader "
                                               "process while this one sends (2 cores); false: in turn, here")
    inflight_batches: int = Field(4, ge=1, description="batches sent and not yet acknowledged while the next is "
                                                       "drawn; a kill -9 leaves at most these past the state")
    lag_refresh_s: float = Field(0.1, gt=0, description="how often the rollout group's lag is read (and how long "
                                 "a full lead waits): the lead lets at most lead_steps batches through per read, "
                                 "so a read every 0.5 s held bench/learning.py's 0.2 s steps to 0.28 s")
    filter: FilterConfig = Field(default_factory=FilterConfig,
                                 description="online difficulty filter: retire rows whose pass rate leaves the band")
    eval_sets: list[EvalSetConfig] = Field(
        default_factory=list, description="the run's held-out sets (svc_eval samples them): every row whose prompt "
                                          "is one of theirs is dropped from the training stream")
    scan_back: int = Field(2000, ge=0, description="on start, records per `prompts` partition read back to find "
                                                   "prompts published after the last state record")

    @model_validator(mode="after")
    def _scan_covers_the_window(self) -> "SourceConfig":
        past = (self.inflight_batches + 2) * self.publish_batch  # in flight, plus the states not yet on the topic
        if self.scan_back and self.scan_back < past:
            raise ValueError(f"scan_back: {self.scan_back} records cannot find the up to {past} prompts a kill leaves "
                             f"past the state ((inflight_batches + 2) x publish_batch); raise it, or 0 to not scan")
        return self

    @field_validator("sources", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("eval_sets")
    @classmethod
    def _unique_sets(cls, value: list[EvalSetConfig]) -> list[EvalSetConfig]:
        return list(unique_names(value))

    @field_validator("sources")
    @classmethod
    def _some_weight(cls, value: list[DatasetConfig]) -> list[DatasetConfig]:
        if value and sum(d.weight for d in value) <= 0:
            raise ValueError("every source has weight 0: nothing would be drawn")
        return value
