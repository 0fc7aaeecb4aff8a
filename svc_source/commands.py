"""What `control` and `policy` change in a running source, in the order they arrive: the mixture
(set_mixture, from the next draw), the online filter's window stage (a larger set_window), and the
lead's batch (the learner's batch_groups on `policy`). Which commands the source applies is the
library's one rule (m1flow.bus.control): its own run's and people's; a replay none of set_mixture.

Each accepted mixture is a new version: the batches in flight are acknowledged, the state with the
new mixture is written under the source's key and under `<key>/mixture/<version>`, and only then is
anything drawn under it. A refused one changes nothing and says why on `metrics`.
"""
from __future__ import annotations

import logging

from m1flow.bus import Producer, codec
from m1flow.bus.topics import METRICS, SOURCE_STATE
from m1flow.contracts import events
from svc_source import metrics
from svc_source.draws import Draws
from svc_source.lead import Lead
from svc_source.mixture import Mixture, MixtureRefused, history_key
from svc_source.window import Window

log = logging.getLogger(__name__)


class Commands:
    def __init__(self, draws: Draws, window: Window, producer: Producer, lead: Lead, digest: str) -> None:
        self.draws, self.window, self.producer, self.lead, self.digest = draws, window, producer, lead, digest
        self.window_tokens = 0  # the largest output window `control` has set (a larger one is a new stage)

    def start(self, history: list) -> None:
        """Apply the history read on start: the window in force is its largest, not a new stage."""
        self.window_tokens = max((m.set_window.max_new_tokens for m in history if isinstance(m, events.Control)
                                  and m.WhichOneof("command") == "set_window"), default=0)
        self.apply(history)
        self.report_mixture()

    def apply(self, messages: list) -> None:
        for msg in messages:
            if isinstance(msg, events.PolicyVersion):
                self.lead.learner_batch(msg.batch_groups)
            elif msg.WhichOneof("command") == "set_mixture":
                self.set_mixture(msg)
            elif msg.WhichOneof("command") == "set_window":
                self.set_window(msg.set_window.max_new_tokens)

    def set_window(self, tokens: int) -> None:
        judged = self.draws.filter
        if tokens > self.window_tokens and self.window_tokens and judged is not None:
            readmitted, retired = judged.window_stage()
            log.info("output window %s -> %s: %s too-hard rows readmitted, %s easy rows retired",
                     self.window_tokens, tokens, readmitted, retired)
        self.window_tokens = max(self.window_tokens, tokens)

    def set_mixture(self, msg: events.Control) -> None:
        """Apply one SetMixture from the next draw on, or refuse it with a metric saying why."""
        try:
            mixture = self.draws.mixture.after(msg.set_mixture, self.draws.draws, self.draws.sources.generators,
                                               msg.header.message_id)
        except MixtureRefused as exc:
            metrics.MIXTURE_REFUSED.labels(exc.code).inc()
            run_id = self.draws.run_id
            self.producer.send(METRICS, "source", events.Metric(
                header=codec.header("source", run_id=run_id), service="source",
                name="source/mixture_refused", value=1.0, labels={"reason": exc.code, "why": str(exc),
                                                                  "command": msg.header.message_id}))
            log.warning("set_mixture %s refused: %s", msg.header.message_id, exc)
            return
        self.use(mixture)
        log.info("mixture v%s from draw %s (%s): weights %s, levels %s", mixture.version, mixture.from_draw,
                 mixture.stage or "no stage", mixture.weights, {n: v for n, v in mixture.levels.items() if v})

    def use(self, mixture: Mixture) -> None:
        """Draw under `mixture` from now on; its state is on the broker before the first such draw
        (the batches in flight acknowledged and their states sent first)."""
        self.window.drain()
        self.draws.switch(mixture)
        state = self.draws.state(self.digest)
        self.producer.send(SOURCE_STATE, history_key(self.draws.stream, mixture.version), state)
        self.producer.send(SOURCE_STATE, self.draws.stream, state)
        self.producer.flush()
        self.report_mixture()

    def report_mixture(self) -> None:
        mixture = self.draws.mixture
        metrics.MIXTURE_VERSION.set(mixture.version)
        for name, weight in mixture.weights.items():
            metrics.WEIGHT.labels(name).set(weight)
        for name, level in mixture.levels.items():
            metrics.LEVEL.labels(name).set(level or 0)
