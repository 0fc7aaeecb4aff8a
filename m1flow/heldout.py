"""Held-out sets: configured like the prompt source's datasets, read once, and kept out of training.

An eval set is a `DatasetConfig` (a file or a generator, as `sources:` takes them) with a name, how
many of its rows are the set (`prompts`: rows 0..prompts-1 in the file's order, or items 0..prompts-1
of a generator), how many samples each prompt gets and which pass@k to report. The run's settings
file (`m1flow up --sources FILE`) lists them under `eval_sets:` beside `sources:`, and both services
read that one list: svc_eval samples the sets, svc_source drops from the training stream every row
whose prompt is one of theirs (`prompt_key`, a hash of the conversation as the engine sees it), so
held-out rows are held out by construction, whatever seeds or files the sets use.

A set that cannot be used stops the service that reads it at start-up, with one line: an empty set, a
file that cannot be opened, a bad row (file, row, field and why, as the source says it), more rows
asked for than the dataset has. A held-out list that silently shrank would leave its rows in training.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from pydantic import Field, field_validator, model_validator

from m1flow.contracts import events
from m1flow.data.dataset import DatasetConfig, open_source
from m1flow.source import prompt_for


class HeldOutError(SystemExit):
    """A held-out set that cannot be used: one line naming the set, and the file and row where there is one."""


class EvalSetConfig(DatasetConfig):
    """One held-out set: a dataset or generator (m1flow.data.DatasetConfig's fields), which rows, how
    many samples per prompt, and the pass@k reported for it."""

    prompts: int = Field(64, ge=1, description="rows of the dataset (0..prompts-1) that make the set")
    samples: int = Field(4, ge=1, description="samples drawn per prompt (n of pass@k)")
    k: list[int] = Field(default_factory=lambda: [1], description="pass@k values reported (each at most `samples`)")
    max_new_tokens: int = Field(0, ge=0, description="output window for this set; 0: svc_eval's max_new_tokens")

    @field_validator("k")
    @classmethod
    def _ks(cls, value: list[int]) -> list[int]:
        if not value or any(k < 1 for k in value):
            raise ValueError(f"k: pass@k values are whole numbers >= 1, got {value}")
        return sorted(set(value))

    @model_validator(mode="after")
    def _k_within_samples(self) -> "EvalSetConfig":
        if max(self.k) > self.samples:
            raise ValueError(f"eval set {self.set_name!r}: pass@{max(self.k)} needs at least {max(self.k)} samples "
                             f"per prompt, it draws {self.samples}")
        return self

    @property
    def set_name(self) -> str:
        """The set's name (results are keyed by it): `name`, else the file stem or the generator."""
        return self.source_name


def unique_names(sets: Sequence[EvalSetConfig]) -> Sequence[EvalSetConfig]:
    names = [s.set_name for s in sets]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"eval_sets: names must be unique, {repeated} repeated (give each a `name`)")
    return sets


def _where(cfg: EvalSetConfig) -> str:
    return cfg.path or f"generator:{cfg.generator}"


def load_set(cfg: EvalSetConfig, run_id: str = "local") -> list[events.Prompt]:
    """The set's prompts, in row order, each with `samples` as its group size; HeldOutError (one
    line) when the set is empty, cannot be opened or has a bad row among the ones it takes."""
    name = cfg.set_name
    try:
        source = open_source(cfg)
        rows = len(source)
    except Exception as exc:  # noqa: BLE001 - any reason a set cannot open is said in one line
        raise HeldOutError(f"eval set {name!r}: {_where(cfg)} cannot be opened: {type(exc).__name__}: {exc}") from None
    if rows == 0:
        raise HeldOutError(f"eval set {name!r}: {_where(cfg)} is empty: no prompt to evaluate")
    if rows < cfg.prompts:
        raise HeldOutError(f"eval set {name!r}: asks for {cfg.prompts} prompts, {_where(cfg)} has {rows} rows")
    prompts = []
    try:
        for row, item in source.records(0, cfg.prompts):
            if isinstance(item, Exception):
                raise HeldOutError(f"eval set {name!r}: {item}")
            try:
                prompts.append(prompt_for(item, cfg.samples, run_id, path=_where(cfg), row=row))
            except ValueError as exc:
                raise HeldOutError(f"eval set {name!r}: {exc}") from None
    except (OSError, ValueError) as exc:  # a file that breaks part-way
        raise HeldOutError(f"eval set {name!r}: {_where(cfg)} cannot be read: {type(exc).__name__}: {exc}") from None
    return prompts


def _normal(text: str) -> str:
    return " ".join(text.split())


def prompt_key(prompt: events.Prompt) -> bytes:
    """What makes two prompts the same prompt: the conversation the engine is given (a text alone is
    one user turn), whitespace runs collapsed. 16 bytes of SHA-256."""
    turns = [(m.role, m.content) for m in prompt.messages] if prompt.messages else [("user", prompt.text)]
    digest = hashlib.sha256()
    for role, content in turns:
        digest.update(f"{role}\x00{_normal(content)}\x01".encode())
    return digest.digest()[:16]


def heldout_keys(sets: Iterable[EvalSetConfig], run_id: str = "local") -> set[bytes]:
    """The prompt keys of every row of every set (HeldOutError when one cannot be read)."""
    return {prompt_key(p) for cfg in sets for p in load_set(cfg, run_id)}
