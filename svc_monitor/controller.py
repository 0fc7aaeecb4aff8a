"""Cuts the stored history into evaluation windows and runs the decision rules over them.

Windows are ranges of arrival order (row ids), so they survive a restart: the cursors and the
rules' state are saved in the store once what the rules decided has been published (`save`), and a
restarted monitor continues with the next window instead of starting its hysteresis over. A crash
between deciding and saving re-evaluates the same windows: a command may go out twice, never not.
"""
from __future__ import annotations

import time

from svc_monitor.config import MonitorConfig
from svc_monitor.outcome import Outcome
from svc_monitor.rules.curriculum import CurriculumRule
from svc_monitor.rules.length_bias import LengthBiasRule
from svc_monitor.rules.mismatch import MismatchRule
from svc_monitor.rules.precision import PrecisionRule
from svc_monitor.rules.window_stages import WindowStageRule
from svc_monitor.schema import DecisionRow, GenRMSampleRow, GroupRow, MetricRow, RolloutRow
from svc_monitor.store import Store

STATE_KEY = "controller"
MAX_GROUP_SIZE = 256  # bounds the rows read to complete a window of GenRM groups


class Controller:
    def __init__(self, store: Store, cfg: MonitorConfig) -> None:
        self.store = store
        self.cfg = cfg
        state = store.get_state(STATE_KEY) or {}
        self.cursors: dict[str, int] = {"genrm": 0, "rollouts": 0, "precision": 0, "groups": 0, "mismatch": 0,
                                        **state.get("cursors", {})}
        self.length_bias = LengthBiasRule(cfg.length_bias, state.get("length_bias"))
        self.window = WindowStageRule(cfg.window, state.get("window"))
        self.precision = PrecisionRule(cfg.precision, state.get("precision"))
        self.curriculum = CurriculumRule(cfg.curriculum, state.get("curriculum"))
        self.mismatch = MismatchRule(cfg.mismatch, state.get("mismatch"))
        self.dirty = False

    def save(self) -> None:
        """Persist cursors and rules' state (call after the outcomes are published)."""
        if not self.dirty:
            return
        self.dirty = False
        self.store.set_state(STATE_KEY, {"cursors": self.cursors, "length_bias": self.length_bias.snapshot(),
                                         "window": self.window.snapshot(), "precision": self.precision.snapshot(),
                                         "curriculum": self.curriculum.snapshot(),
                                         "mismatch": self.mismatch.snapshot()})

    def _fresh(self, newest_ms: int) -> bool:
        return time.time() * 1000 - newest_ms <= self.cfg.act_within_s * 1000

    def next_genrm_window(self) -> list[GenRMSampleRow] | None:
        """The next `window_groups` GenRM groups after the cursor, once that many are stored."""
        want = self.cfg.length_bias.window_groups
        rows = self.store.genrm_after(self.cursors["genrm"], want * MAX_GROUP_SIZE)
        # a group's rows are written in one transaction: a group seen is a group complete
        order = list(dict.fromkeys(r.group_id for r in rows))
        if len(order) < want:
            return None
        keep = set(order[:want])
        window = [r for r in rows if r.group_id in keep]
        self.cursors["genrm"] = max(r.id for r in window)
        return window

    def next_rollout_window(self) -> list[RolloutRow] | None:
        want = self.cfg.window.window_rollouts
        rows = self.store.rollouts_after(self.cursors["rollouts"], want)
        if len(rows) < want:
            return None
        self.cursors["rollouts"] = rows[-1].id
        return rows

    def next_group_window(self) -> list[GroupRow] | None:
        """The next `window_groups` scored groups after the cursor (the curriculum's windows)."""
        want = self.cfg.curriculum.window_groups
        rows = self.store.groups_after(self.cursors["groups"], want)
        if len(rows) < want:
            return None
        self.cursors["groups"] = rows[-1].seq
        return rows

    def evaluate(self) -> Outcome:
        """Every window completed since the last call, oldest first."""
        out = Outcome()
        if self.cfg.curriculum.active:
            if not self.curriculum.state.started:
                started = self.curriculum.start(self.store.latest_version() or 0)
                self.dirty = self.dirty or bool(started.commands)
                out.extend(started)
            while (groups := self.next_group_window()) is not None:
                self.curriculum.heldout = self.store.latest_heldout(self.cfg.run_id)  # heldout_pass1 (svc_eval)
                out.extend(self.curriculum.evaluate(groups, act=self._fresh(max(g.ts_ms for g in groups))))
                self.dirty = True
        while (rows := self.next_genrm_window()) is not None:
            out.extend(self.length_bias.evaluate(rows, act=self._fresh(max(r.ts_ms for r in rows))))
            self.dirty = True
        while (rows := self.next_rollout_window()) is not None:
            out.extend(self.window.evaluate(rows, act=self._fresh(max(r.ts_ms for r in rows))))
            self.dirty = True
        metrics = self.store.metrics_after(self.cursors["precision"], self.cfg.precision.metric)
        if metrics:
            out.extend(self.precision.evaluate(metrics))
            self.cursors["precision"] = metrics[-1].id
            self.dirty = True
        if self.cfg.mismatch.enabled and (rows := self.next_mismatch_rows()):
            out.extend(self.mismatch.evaluate(rows, act=self._fresh(max(r.ts_ms for r in rows))))
            self.dirty = True
        return out

    def next_mismatch_rows(self) -> list[MetricRow]:
        """The learner's correlation, KL and dropped-share rows after the cursor, oldest first (up to the newest row
        stored before reading, so that a row written between the two reads is not skipped)."""
        upto, after, cfg = self.store.last_id(MetricRow), self.cursors["mismatch"], self.cfg.mismatch
        rows = sorted((r for name in (cfg.corr_metric, cfg.kl_metric, cfg.dropped_metric) for r in self.store.metrics_after(after, name)
                       if r.id <= upto), key=lambda r: r.id)
        if rows:
            self.cursors["mismatch"] = rows[-1].id
        return rows

    def seen(self, decisions: list[DecisionRow]) -> None:
        """Commands a person sent on `control` (the monitor's own are in its state already)."""
        for decision in decisions:
            if decision.command == "recalibrate":
                self.length_bias.recalibrated()
            elif decision.command == "set_window":
                self.window.window_set(decision.max_new_tokens)
            elif decision.command == "set_mixture":
                self.curriculum.mixture_set(decision.weights or {}, decision.levels or {}, decision.stage)
            elif decision.command == "set_correction":
                self.mismatch.scale_set((decision.weights or {}).get("scale", 0.0))
            self.dirty = True
