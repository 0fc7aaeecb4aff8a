"""The monitor's `set_correction` applied to the trainer: the mismatch correction's bounds scaled.

A setting (m1flow.bus.control): the newest command defines the scale, so a restarted learner reads
`control` from its beginning before its first step, then polls it before each step. Only where a
correction is configured (there is nothing to scale otherwise) and in a live run (a replay trains
with the bounds it starts with). Under torchrun only rank 0 reads `control`, and the other ranks
would keep their configured bounds: a command is then refused (logged), not half applied.
"""
from __future__ import annotations

import logging

from m1flow.bus.clients import ClientError
from m1flow.bus.control import ControlFollower
from m1flow.contracts import events
from svc_learner.trainer import Trainer

log = logging.getLogger(__name__)
COMMANDS = frozenset({"set_correction"})


class CorrectionSteering:
    """Applies the `control` commands that concern the learner (set_correction) to its trainer."""

    def __init__(self, control: ControlFollower, trainer: Trainer) -> None:
        self.control = control
        self.trainer = trainer

    def catch_up(self) -> None:
        """The scale in force: the newest command in the whole history (TimeoutError, ClientError: retry)."""
        self.apply(self.control.catch_up())

    def poll(self) -> None:
        try:
            self.apply(self.control.poll())
        except ClientError as exc:  # a broker hiccup must not stop training; the next step reads on
            log.warning("reading control failed, will retry: %s", exc)

    def apply(self, commands: list) -> None:
        for command in commands:
            if not isinstance(command, events.Control) or not command.HasField("set_correction"):
                continue
            scale = command.set_correction.scale
            if scale <= 0:
                log.warning("set_correction refused: scale must be > 0, got %s", scale)
            elif self.trainer.ranks.world > 1:
                log.warning("set_correction %s refused: under torchrun the other ranks would keep the "
                            "configured bounds", scale)
            elif scale != self.trainer.correction_scale:
                log.info("mismatch correction bounds scaled %s -> %s: %s", self.trainer.correction_scale, scale,
                         command.reason)
                self.trainer.set_correction(scale)

    def close(self) -> None:
        self.control.close()
