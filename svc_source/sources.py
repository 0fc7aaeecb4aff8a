"""The configured sources, opened: each at the level the mixture holds for it, and where its blocks are
read (the reader process for files, this process for generators).

A source that cannot be opened stops the service with one line naming it (SourceUnreadable) rather
than shifting the mixture onto the others: renormalising the weights would silently train on another
mixture. The supervisor's back-off retries.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from m1flow.data.dataset import DatasetConfig, TaskSource, open_source
from m1flow.heldout import heldout_keys
from m1flow.source import prompt_bodies
from svc_source import metrics
from svc_source.config import SourceConfig
from svc_source.cursor import Ahead, Reader
from svc_source.mixture import Mixture
from svc_source.reader import ReadAhead


class SourceUnreadable(SystemExit):
    """A configured source that cannot be opened: the service stops with one line saying which."""


def open_all(cfg: SourceConfig) -> list[TaskSource]:
    """Every configured source opened, in order; SourceUnreadable names the first that cannot be."""
    if not cfg.sources:
        raise SourceUnreadable("source: no `sources` configured; nothing to publish")
    opened = []
    for i, dataset in enumerate(cfg.sources):
        try:
            opened.append(open_source(dataset))
        except Exception as exc:  # noqa: BLE001 - any reason a source cannot open is said in one line
            raise SourceUnreadable(f"source: sources[{i}] ({dataset.name or dataset.path or dataset.generator}) "
                                   f"cannot be opened: {type(exc).__name__}: {exc}") from None
    names = [s.name for s in opened]
    if len(set(names)) != len(names):
        raise SourceUnreadable(f"source: source names must be unique, got {names}")
    return opened


class Sources:
    """The datasets by source name, and how each cursor reads its blocks."""

    def __init__(self, cfg: SourceConfig) -> None:
        self.config = cfg
        self.opened = open_all(cfg)
        self.datasets: dict[str, DatasetConfig] = {src.name: d for src, d in zip(self.opened, cfg.sources)}
        self.where = {src.name: d.path or d.generator for src, d in zip(self.opened, cfg.sources)}  # for bad-row letters
        self.reader: ReadAhead | None = None
        self.heldout = heldout_keys(cfg.eval_sets, cfg.run_id)  # the eval sets' prompts; HeldOutError: one line
        metrics.HELDOUT_PROMPTS.set(len(self.heldout))

    def initial_mixture(self) -> Mixture:
        """The config's weights, and the generators' levels."""
        return Mixture.initial({n: d.weight for n, d in self.datasets.items()},
                               {n: d.level for n, d in self.datasets.items() if d.generator})

    @property
    def generators(self) -> set[str]:
        return {n for n, d in self.datasets.items() if d.generator}

    def start_reader(self) -> None:
        """The reader process, when there are files to read ahead (cfg.read_ahead)."""
        cfg = self.config
        if cfg.read_ahead and any(not d.generator for d in cfg.sources):
            self.reader = ReadAhead(cfg.sources, cfg.group_size, [self.where[s.name] for s in self.opened])

    def at_level(self, src: Any, levels: Mapping[str, int | None]) -> TaskSource:
        """The source at the level the mixture holds for it: a generator at another level is reopened,
        its ids tagged with the level (another level's item i is another task)."""
        dataset = self.datasets[src.name]
        level = levels.get(src.name)
        if not dataset.generator or level == getattr(getattr(src, "cfg", None), "level", dataset.level):
            return src
        return open_source(dataset.model_copy(update={"level": level}), tag_level=level != dataset.level)

    def readers(self, j: int, src: Any) -> tuple[Reader, Ahead | None]:
        """A cursor's block reader (each row's prompt body, m1flow.source.prompt_bodies, or its
        error) and whom to tell the next block: the reader process for files, or this one, reading in
        turn (generators: their level can change at run time, which the reader process does not see)."""
        reader = self.reader
        if reader is not None and not self.datasets[src.name].generator:
            return (lambda start, stop: reader.read(j, start, stop)), (lambda start, stop: reader.ahead(j, start, stop))
        group_size, path = self.config.group_size, self.where[src.name]
        return (lambda start, stop: prompt_bodies(src, start, stop, group_size, path)), None

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
