"""The dashboard's figures (plotly) and tables, built from the store.

Per policy version: reward and accuracy per verifier kind, output length (mean, p50, p99) against the
window with window changes marked, perplexity; per evaluation window: the GenRM length-bias
signals with their thresholds and the recalibrations marked, the pattern-collapse signals; per
source (m1flow.accounting) and version: reward, accuracy, mean length and samples per minute; per
learner step: the train/inference correlation; on the clock: staleness, throughput, lag per
consumer group and dead letters per minute; the curriculum: the mixture's weights per source as
each set_mixture left them (stage changes marked), the accuracy per source per curriculum window
(the level rules' bands drawn) and each generator's difficulty level; svc_eval's held-out pass@1 per
set against policy version, with its 95% interval.
"""
from __future__ import annotations

import json
import math
import threading
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from svc_monitor.config import MonitorConfig
from svc_monitor.store import Store

RECENT_GROUPS = 20  # the table of the newest scored groups, each linking to its story (/group?id=...)
LAYOUT = dict(template="plotly_white", height=330, margin=dict(l=55, r=55, t=40, b=90),
              legend=dict(orientation="h", y=-0.32, x=0), hovermode="x unified")


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


def _figure(title: str, xaxis: str, yaxis: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, xaxis_title=xaxis, yaxis_title=yaxis, **LAYOUT)
    return fig


def _line(fig: go.Figure, x: list, y: list, name: str, **kwargs: Any) -> None:
    fig.add_trace(go.Scatter(x=x, y=y, name=name, mode="lines+markers" if len(x) < 60 else "lines", **kwargs))


def _threshold(fig: go.Figure, value: float, label: str, where: str = "top right") -> None:
    fig.add_hline(y=value, line_dash="dash", line_color="firebrick", annotation_text=label,
                  annotation_position=where)


def _marks(fig: go.Figure, versions: list[int], label: str, color: str) -> None:
    for v in versions:
        fig.add_vline(x=v, line_dash="dot", line_color=color, annotation_text=label)


def _stage_marks(fig: go.Figure, changes: list[tuple[str, str]]) -> None:
    """A dotted line where each stage started, its name written along it (on a time axis, where
    add_vline's annotations do not work)."""
    for at, stage in changes:
        fig.add_shape(type="line", x0=at, x1=at, y0=0, y1=1, yref="paper", line=dict(dash="dot", color="green"))
        fig.add_annotation(x=at, y=1, yref="paper", text=stage, showarrow=False, textangle=-90, xanchor="left",
                           yanchor="top", font=dict(color="green"))


class Lengths:
    """Per-version output lengths, perplexity and window, read incrementally (each refresh reads only
    the rollouts stored since the last)."""

    def __init__(self) -> None:
        self.cursor = 0
        self.lengths: dict[int, list[int]] = defaultdict(list)
        self.nll: dict[int, float] = defaultdict(float)
        self.window: dict[int, int] = {}

    def update(self, store: Store) -> None:
        for version, length, window, nll, _finish, row_id in store.rollouts_since_id(self.cursor):
            self.lengths[version].append(length)
            self.nll[version] += nll
            self.window[version] = max(self.window.get(version, 0), window)
            self.cursor = max(self.cursor, row_id)

    def series(self) -> dict[str, list]:
        versions = sorted(self.lengths)
        stats = [(float(np.mean(self.lengths[v])), float(np.percentile(self.lengths[v], 50)),
                  float(np.percentile(self.lengths[v], 99)), sum(self.lengths[v])) for v in versions]
        return {"version": versions, "mean": [s[0] for s in stats], "p50": [s[1] for s in stats],
                "p99": [s[2] for s in stats], "window": [self.window[v] for v in versions],
                "perplexity": [math.exp(self.nll[v] / s[3]) if s[3] else None for v, s in zip(versions, stats)]}


class Figures:
    def __init__(self, store: Store, cfg: MonitorConfig, state: Callable[[], dict[str, Any]] = dict) -> None:
        self.store = store
        self.cfg = cfg
        self.state = state  # what only the running monitor knows (window in force, stage)
        self.lengths = Lengths()
        self.lock = threading.Lock()

    def build(self) -> dict[str, Any]:
        """Everything the page shows, as JSON-ready data."""
        with self.lock:
            self.lengths.update(self.store)
            decisions = self.store.decisions(limit=200)
            figures = {"reward": self.reward(), "accuracy": self.accuracy(), "length": self.length(decisions),
                       "genrm": self.genrm(decisions), "collapse": self.collapse(), "precision": self.precision(),
                       "throughput": self.throughput(), "lag": self.lag(), "skipped": self.skipped(),
                       "heldout": self.heldout(),
                       **self.per_source(), "reasons": self.reasons(),
                       **self.curriculum()}
            return {"figures": {k: json.loads(pio.to_json(f)) for k, f in figures.items()},
                    "alerts": self.store.alerts(limit=50), "decisions": decisions[:50],
                    "sources": self.source_table(), "reasons": self.reason_table(), "groups": self.store.recent_groups(RECENT_GROUPS),
                    "status": self.status()}

    def status(self) -> dict[str, Any]:
        latest = self.store.latest_version()
        return {"policy_version": latest, "active_alerts": len(self.store.alerts(limit=1000, active_only=True)),
                **self.state()}

    def reward(self) -> go.Figure:
        fig = _figure("Mean reward per verifier kind", "policy version", "reward")
        by_kind: dict[str, list] = defaultdict(list)
        for row in self.store.by_version_and_kind():
            by_kind[row["kind"]].append(row)
        for kind, rows in sorted(by_kind.items()):
            _line(fig, [r["policy_version"] for r in rows], [r["mean_reward"] for r in rows], kind)
        return fig

    def accuracy(self) -> go.Figure:
        fig = _figure("Accuracy per verifier kind (samples with a verdict)", "policy version", "accuracy")
        by_kind: dict[str, list] = defaultdict(list)
        for row in self.store.by_version_and_kind():
            if row["accuracy"] is not None:
                by_kind[row["kind"]].append(row)
        for kind, rows in sorted(by_kind.items()):
            _line(fig, [r["policy_version"] for r in rows], [r["accuracy"] for r in rows], kind)
        fig.update_yaxes(range=[0, 1])
        return fig

    def per_source(self) -> dict[str, go.Figure]:
        """Reward, accuracy (verdicts only), mean length and throughput per source over policy versions."""
        by_source: dict[str, list] = defaultdict(list)
        for row in self.store.by_source(kinds=False):
            by_source[row["source"]].append(row)
        figures = {}
        for key, title, yaxis in (("mean_reward", "Mean reward per source", "reward"),
                                  ("accuracy", "Accuracy per source (samples with a verdict)", "accuracy"),
                                  ("mean_length", "Mean output length per source", "tokens"),
                                  ("samples_per_min", "Throughput per source", "samples per minute")):
            fig = _figure(title, "policy version", yaxis)
            for source, rows in sorted(by_source.items()):
                rows = [r for r in rows if r[key] is not None]
                _line(fig, [r["policy_version"] for r in rows], [r[key] for r in rows], source)
            if key == "accuracy":
                fig.update_yaxes(range=[0, 1])
            figures[f"source_{key.removeprefix('mean_')}"] = fig
        return figures

    def heldout(self) -> go.Figure:
        """svc_eval's pass@1 per held-out set against the policy version evaluated, each point with
        its 95% interval (bootstrap over the set's prompts)."""
        fig = _figure("Held-out pass@1 per set (95% interval)", "policy version", "pass@1")
        by_set: dict[str, list] = defaultdict(list)
        for row in self.store.evals():
            by_set[row["set_name"]].append(row)
        for name, rows in sorted(by_set.items()):
            _line(fig, [r["policy_version"] for r in rows], [r["pass1"] for r in rows], name,
                  error_y=dict(type="data", symmetric=False, array=[r["pass1_high"] - r["pass1"] for r in rows],
                               arrayminus=[r["pass1"] - r["pass1_low"] for r in rows]))
        fig.update_yaxes(range=[0, 1])
        return fig

    def reason_table(self) -> list[dict[str, Any]]:
        """Per source and kind: its samples and how many scored for each reason (most frequent first)."""
        table: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        for row in self.store.reasons_by_source():
            table[(row["source"], row["kind"])][row["reason"]] = row["samples"]
        return [{"source": s, "kind": k, "samples": sum(c.values()),
                 "reasons": dict(sorted(c.items(), key=lambda item: (-item[1], item[0])))}
                for (s, k), c in sorted(table.items())]

    def reasons(self) -> go.Figure:
        """Why samples scored what they did, per source: one stacked bar per source, a segment per reason."""
        fig = _figure("Verdict reasons per source (samples, whole run)", "source", "samples")
        rows = self.store.reasons_by_source()
        sources = sorted({r["source"] for r in rows})
        for reason in sorted({r["reason"] for r in rows}):
            counts = defaultdict(int)
            for r in rows:
                if r["reason"] == reason:
                    counts[r["source"]] += r["samples"]
            fig.add_trace(go.Bar(x=sources, y=[counts[s] for s in sources], name=reason))
        fig.update_layout(barmode="stack")
        return fig

    def source_table(self) -> list[dict[str, Any]]:
        """The newest version's rows per source and verifier kind (the table under the plots)."""
        rows = self.store.by_source()
        newest = max((r["policy_version"] for r in rows), default=None)
        return [r for r in rows if r["policy_version"] == newest]

    def curriculum(self) -> dict[str, go.Figure]:
        """Mixture weights, per-source accuracy per window and levels over time, from the set_mixture
        decisions (the monitor's and people's) and the curriculum's signals; stage changes marked."""
        mixtures = self.store.mixture_decisions()
        changes = [(_time(d["ts_ms"]), d["stage"]) for prev, d in zip([None, *mixtures], mixtures)
                   if d["stage"] and (prev is None or prev["stage"] != d["stage"])]
        weights = _figure("Mixture weights (each set_mixture)", "time", "weight")
        levels = _figure("Difficulty level per generator source", "time", "level")
        for fig, key in ((weights, "weights"), (levels, "levels")):
            for source in sorted({k for d in mixtures for k in (d[key] or {})}):
                points = [(_time(d["ts_ms"]), d[key][source]) for d in mixtures if source in (d[key] or {})]
                _line(fig, [t for t, _ in points], [w for _, w in points], source, line_shape="hv")
        levels.update_yaxes(dtick=1)
        accuracy = _figure("Accuracy per source per curriculum window", "time (window end)", "accuracy")
        by_source: dict[str, list] = defaultdict(list)
        for row in self.store.signal_series("curriculum/accuracy"):
            if row["name"] == "curriculum/accuracy":  # not accuracy_gain
                by_source[row["subject"]].append(row)
        for source, rows in sorted(by_source.items()):
            _line(accuracy, [_time(r["ts_ms"]) for r in rows], [r["value"] for r in rows], source)
        for rule in self.cfg.curriculum.levels:
            for bound, where in zip(rule.band, ("bottom right", "top right")):
                _threshold(accuracy, bound, f"{rule.source} band", where)
        accuracy.update_yaxes(range=[0, 1])
        for fig in (weights, accuracy):
            _stage_marks(fig, changes)
        return {"mixture": weights, "curriculum_accuracy": accuracy, "levels": levels}

    def length(self, decisions: list[dict]) -> go.Figure:
        fig = _figure("Output length (tokens) against the window", "policy version", "tokens")
        s = self.lengths.series()
        for key in ("mean", "p50", "p99"):
            _line(fig, s["version"], s[key], key)
        fig.add_trace(go.Scatter(x=s["version"], y=s["window"], name="window", line_shape="hv",
                                 line=dict(dash="dash", color="black")))
        _marks(fig, [d["version"] for d in decisions if d["command"] == "set_window"], "window", "green")
        return fig

    def genrm(self, decisions: list[dict]) -> go.Figure:
        fig = _figure("GenRM length bias per window", "policy version (window end)", "signal")
        for name, threshold, where in (("genrm/length_corr", self.cfg.length_bias.corr_threshold, "bottom left"),
                                       ("genrm/length_coef", self.cfg.length_bias.coef_threshold, "top right")):
            rows = self.store.signal_series(name)
            _line(fig, [r["version_to"] for r in rows], [r["value"] for r in rows], name)
            _threshold(fig, threshold, f"{name.split('/')[1]} threshold", where)
        _marks(fig, [d["version"] for d in decisions if d["command"] == "recalibrate"], "recalibrate", "purple")
        return fig

    def collapse(self) -> go.Figure:
        fig = _figure("Perplexity and pattern-collapse signals per window", "policy version (window end)", "share")
        for name in ("window/repetition_stops", "window/token_repetition", "window/hit_window"):
            rows = self.store.signal_series(name)
            _line(fig, [r["version_to"] for r in rows], [r["value"] for r in rows], name.split("/")[1])
        s = self.lengths.series()
        fig.add_trace(go.Scatter(x=s["version"], y=s["perplexity"], name="perplexity", yaxis="y2"))
        fig.update_layout(yaxis=dict(range=[0, 1]), yaxis2=dict(title="perplexity", overlaying="y", side="right"))
        return fig

    def precision(self) -> go.Figure:
        fig = _figure("Train/inference probability correlation", "policy version", "correlation")
        series = self.store.metric_series(self.cfg.precision.metric)
        _line(fig, [s for s, _ in series], [v for _, v in series], "train_infer_corr")
        _threshold(fig, self.cfg.precision.threshold, "alert below")
        return fig

    def skipped(self) -> go.Figure:
        """What dynamic sampling leaves out: the learner's skipped groups by reason (running counts)
        against the groups scored, so a filter that spends fewer rollouts on useless prompts shows."""
        fig = _figure("Groups scored, and skipped by the learner (dynamic sampling)", "policy version", "groups")
        per_version = self.store.groups_per_version()
        total, cumulative = 0, []
        for _, n in per_version:
            total += n
            cumulative.append(total)
        _line(fig, [v for v, _ in per_version], cumulative, "scored")
        by_reason: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for row in self.store.metric_rows("learner/groups_skipped"):
            by_reason[row["labels"].get("reason", "?")].append((row["step"], row["value"]))
        for reason, points in sorted(by_reason.items()):
            _line(fig, [s for s, _ in points], [v for _, v in points], f"skipped: {reason}")
        return fig

    def throughput(self) -> go.Figure:
        fig = _figure("Throughput and staleness", "time", "per second")
        for name in ("ops/rollouts_per_s", "ops/groups_per_s"):
            rows = self.store.signal_series(name)
            _line(fig, [_time(r["ts_ms"]) for r in rows], [r["value"] for r in rows], name.split("/")[1])
        rows = self.store.signal_series("ops/staleness")
        fig.add_trace(go.Scatter(x=[_time(r["ts_ms"]) for r in rows], y=[r["value"] for r in rows],
                                 name="staleness (versions)", yaxis="y2"))
        fig.update_layout(yaxis2=dict(title="versions", overlaying="y", side="right"))
        return fig

    def lag(self) -> go.Figure:
        fig = _figure("Lag per consumer group and dead letters per minute", "time", "records")
        for name, label in (("ops/lag", "lag"), ("ops/dead_letters_per_min", "dead letters/min")):
            by_subject: dict[str, list] = defaultdict(list)
            for row in self.store.signal_series(name):
                by_subject[row["subject"]].append(row)
            for subject, rows in sorted(by_subject.items()):
                _line(fig, [_time(r["ts_ms"]) for r in rows], [r["value"] for r in rows], f"{label} {subject}")
        return fig
