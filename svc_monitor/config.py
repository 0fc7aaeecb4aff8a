"""Settings of svc_monitor: where the history goes, the dashboard, and every threshold it acts on.

Each decision rule has its own block so a run's config file reads like the rules themselves
(`--length-bias '{"corr_threshold": 0.4}'` on the command line, or a YAML block).
"""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from m1flow.rl.config import AlgorithmConfig
from m1flow.runtime.config import ServiceConfig
from svc_monitor.schedule import CurriculumConfig


class LengthBiasConfig(BaseModel):
    """GenRM length bias: windows of GenRM-scored groups, hysteresis, cool-down, then verify."""

    window_groups: int = Field(16, ge=2, description="GenRM-scored groups per evaluation window")
    corr_threshold: float = Field(0.3, description="mean within-prompt rank correlation of GenRM score "
                                                   "and length above which a window counts as biased")
    coef_threshold: float = Field(0.5, description="length coefficient b1 of the logistic preference fit "
                                                   "(svc_reward's calibration model) above which it counts")
    drift_threshold: float = Field(0.1, description="GenRM reward gained over `drift_windows` windows while "
                                                    "length rose and verified accuracy stayed flat")
    drift_windows: int = Field(4, ge=2, description="windows the verified-drift trend is measured over")
    accuracy_flat: float = Field(0.02, ge=0.0, description="|accuracy change| below which accuracy is flat")
    min_signals: int = Field(2, ge=1, description="signals past their thresholds for a window to count")
    consecutive: int = Field(2, ge=1, description="biased windows in a row before recalibrating")
    cooldown_windows: int = Field(1, ge=0, description="windows ignored after a recalibration "
                                                       "(groups scored before it still arrive)")
    audit_groups: int = Field(
        96, ge=0, description="after a recalibration passes its verify window: groups with an ordering whose "
                              "rank correlation is pooled to test the residual; recalibrate again when its 95% "
                              "interval lies above zero (a residual under corr_threshold a policy can still climb); "
                              "0: no audit")
    enabled: bool = Field(True, description="publish recalibrate commands (signals are computed anyway)")


class WindowConfig(BaseModel):
    """Output window stages (the report's 40K -> 48K -> ... -> 80K) and pattern-collapse guard."""

    stages: list[int] = Field([8, 12, 16, 24, 32], description="max-new-token stages, ascending")
    window_rollouts: int = Field(256, ge=8, description="rollouts per evaluation window")
    near_fraction: float = Field(0.1, ge=0.0, lt=1.0,
                                 description="advance when p99 length >= (1 - this) * window ...")
    ppl_tolerance: float = Field(0.05, gt=0.0, description="... and perplexity changed by at most this "
                                                           "fraction between windows ...")
    ppl_windows: int = Field(2, ge=1, description="... for this many window-to-window changes in a row")
    repetition_ngram: int = Field(4, ge=1, description="n of the n-grams token repetition counts")
    baseline_windows: int = Field(4, ge=1, description="healthy windows the collapse baseline averages")
    repetition_stop_jump: float = Field(0.05, gt=0.0, description="rise in the share of repetition "
                                                                  "truncations that is a collapse")
    token_repetition_jump: float = Field(0.2, gt=0.0, description="rise in mean repeated-n-gram share "
                                                                  "that is a collapse")
    hit_window_jump: float = Field(0.3, gt=0.0, description="rise in the share of responses hitting the "
                                                            "window that is a collapse")
    hold_on_collapse: bool = Field(True, description="do not advance while a collapse is active")
    enabled: bool = Field(True, description="publish set_window commands (signals are computed anyway)")

    @field_validator("stages")
    @classmethod
    def _ascending(cls, stages: list[int]) -> list[int]:
        if not stages or any(s <= 0 for s in stages) or stages != sorted(set(stages)):
            raise ValueError(f"stages must be positive and strictly ascending, got {stages}")
        return stages


class PrecisionConfig(BaseModel):
    """Train/inference probability correlation (the report: 0.9x with a bf16 head, 0.99x in fp32)."""

    metric: str = Field("learner/train_infer_corr", description="the learner's metric name")
    threshold: float = Field(0.95, description="alert while the correlation is below this")


class MismatchConfig(BaseModel):
    """Steering the learner's mismatch-correction bounds (svc_monitor/rules/mismatch.py): tighter
    while the train/inference mismatch is high, back towards the configured ones while it stays low."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="publish set_correction (turn on where the learner has a correction)")
    corr_metric: str = Field("learner/train_infer_corr", description="the learner's correlation metric")
    kl_metric: str = Field("learner/train_infer_k3", description="the learner's KL(rollout || train) metric")
    corr_low: float = Field(0.95, description="a step is bad below this correlation ...")
    kl_high: float = Field(0.01, gt=0, description="... or above this KL (nats per token)")
    corr_ok: float = Field(0.98, description="a step is good at or above this correlation ...")
    kl_ok: float = Field(0.002, gt=0, description="... and at or below this KL (between: neither)")
    tighten_after: int = Field(2, ge=1, description="bad steps in a row that tighten the bounds")
    relax_after: int = Field(5, ge=1, description="good steps in a row that relax them")
    factor: float = Field(0.5, gt=0, lt=1, description="each tightening multiplies the scale by this")
    min_scale: float = Field(0.125, gt=0, le=1, description="the tightest scale")
    dropped_metric: str = Field("learner/correction_dropped_frac", description="the share of tokens the correction drops")
    max_dropped: float = Field(0.05, gt=0, le=1, description=(
        "no tightening while the correction already drops this share of tokens or more: the mismatch is "
        "measured before any correction, so a tighter bound cannot lower it, only discard more samples "
        "(bench/mismatch.py: without this stop the scale fell to its floor in 6 steps and pass@1 by 0.2)"))

    @model_validator(mode="after")
    def _bands(self) -> MismatchConfig:
        if self.corr_ok < self.corr_low:
            raise ValueError(f"corr_ok ({self.corr_ok}) < corr_low ({self.corr_low}): no hysteresis band")
        if self.kl_ok > self.kl_high:
            raise ValueError(f"kl_ok ({self.kl_ok}) > kl_high ({self.kl_high}): no hysteresis band")
        return self


class OpsConfig(BaseModel):
    """Lag, staleness, throughput and dead letters, sampled on a clock."""

    interval_s: float = Field(10.0, gt=0.0, description="seconds between samples")
    watch_group_prefix: str = Field("m1flow-", description="consumer groups checked for progress "
                                                           "(the services' default groups)")
    no_progress_s: float = Field(60.0, gt=0.0, description="alert when a watched group's committed "
                                                           "offsets have not moved for this long while it has lag")
    dead_letters_per_min: float = Field(30.0, gt=0.0, description="alert above this rate per consumer group")


class RetentionConfig(BaseModel):
    """How long detailed rows live; per-version totals and decisions/alerts are kept."""

    keep_versions: int = Field(2000, ge=1, description="per-rollout and per-sample rows of this many "
                                                       "newest policy versions")
    keep_days: float = Field(30.0, gt=0.0, description="time-stamped rows (metrics, signals, dead letters, "
                                                       "rollouts) younger than this")
    every_s: float = Field(300.0, gt=0.0, description="seconds between pruning passes")


class MonitorConfig(ServiceConfig):
    """svc_monitor: history, dashboard, alerts and the control loop."""

    database_url: str = Field("", description="SQLAlchemy URL (sqlite:///..., postgresql+psycopg://...); "
                                              "default sqlite under run_dir")
    dashboard_host: str = Field("127.0.0.1", description="address the dashboard binds (0.0.0.0 in containers)")
    dashboard_port: int = Field(0, description="dashboard HTTP port; 0 picks a free one; -1 disables")
    access_token: SecretStr | None = Field(None, description="bearer token the dashboard and Monitor.Report "
                                           "require (svc_monitor/access.py); unset and bound beyond loopback: "
                                           "one is made in run_dir/access_token")
    access_token_file: Path | None = Field(None, description="file holding that token (a mounted Secret)")
    dashboard_refresh_s: float = Field(5.0, gt=0.0, description="how often the page refreshes its plots")
    act_within_s: float = Field(600.0, gt=0.0, description="send commands only on evidence younger than this "
                                                           "(a monitor catching up on history does not act on it)")
    length_bias: LengthBiasConfig = Field(default_factory=LengthBiasConfig)
    window: WindowConfig = Field(default_factory=WindowConfig)
    precision: PrecisionConfig = Field(default_factory=PrecisionConfig)
    mismatch: MismatchConfig = Field(default_factory=MismatchConfig)
    ops: OpsConfig = Field(default_factory=OpsConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig,
                                       description="the run's `algorithm:` (the learner's): the per-group page "
                                                   "computes a group's advantages with it")
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig,
                                         description="stages, ramps and adaptive levels of the prompt mixture "
                                                     "(svc_monitor/schedule.py); empty: off")
