"""Check a run's sources before anything starts: each opened and its first rows read, as svc_source will.

Why: `m1flow up --sources FILE` used to start the broker, a warm start and every service (about 100 s)
before svc_source found it could not open a file, and then ended in a traceback. The check opens each
configured source with the library's own `open_source` and reads its first rows through
`prompt_bodies` (the record -> prompt path svc_source publishes through), and each held-out set with
`load_set` (what svc_eval and svc_source read them with), so what passes here opens there. A problem
is one line naming the setting, the source and the reason.

A few bad rows among the first ones are not refused (svc_source dead-letters a bad row and goes on);
a source none of whose first rows can become a prompt, or with no rows at all, is: it would publish
nothing, and is almost always the wrong file, format or importer.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from m1flow.data.dataset import DatasetConfig, open_source
from m1flow.heldout import EvalSetConfig, HeldOutError, load_set, unique_names
from m1flow.source import prompt_bodies

FIRST_ROWS = 8  # rows read per source: enough to tell a wrong file from a few bad rows, cheap on any file


class SourceCheckError(ValueError):
    """A configured source or held-out set that cannot be used: one line saying which and why."""


def one_line(text: str) -> str:
    """The text on one line (an error from a reader or pydantic may span several)."""
    return " ".join(str(text).split())


def _entries(settings: Mapping[str, Any], key: str) -> list[Any]:
    value = settings.get(key)
    if value is None:
        return []
    if isinstance(value, dict):  # one source, not a list: as svc_source reads it
        return [value]
    if not isinstance(value, list):
        raise SourceCheckError(f"{key}: a list of datasets or generators, got {type(value).__name__}")
    return value


def _validation(where: str, exc: ValidationError) -> SourceCheckError:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "entry"
    return SourceCheckError(one_line(f"{where}: {field}: {first['msg']}"))


def _parsed(settings: Mapping[str, Any], key: str, model: type[BaseModel]) -> list:
    """The `key:` entries as `model`s; SourceCheckError names the first bad one and its field."""
    out = []
    for i, entry in enumerate(_entries(settings, key)):
        try:
            out.append(model.model_validate(entry))
        except ValidationError as exc:
            raise _validation(f"{key}[{i}]", exc) from None
    return out


def parsed_sources(settings: Mapping[str, Any]) -> list[DatasetConfig]:
    """The `sources:` entries as DatasetConfigs; SourceCheckError names the first bad one and its field."""
    return _parsed(settings, "sources", DatasetConfig)


def parsed_eval_sets(settings: Mapping[str, Any]) -> list[EvalSetConfig]:
    """The `eval_sets:` entries as EvalSetConfigs (unique names); SourceCheckError names a bad one."""
    out = _parsed(settings, "eval_sets", EvalSetConfig)
    try:
        unique_names(out)
    except ValueError as exc:
        raise SourceCheckError(one_line(str(exc))) from None
    return out


def check_dataset(cfg: DatasetConfig, where: str, group_size: int = 8, rows: int = FIRST_ROWS) -> int:
    """Open one source and read its first `rows` rows into prompts; how many of them are good.
    SourceCheckError when it cannot be opened or read, has no rows, or none of those rows is good."""
    label = f"{where} ({cfg.path or cfg.generator})"
    try:
        source = open_source(cfg)
        n = len(source)
    except Exception as exc:  # noqa: BLE001 - any reason a source cannot open is said in one line
        raise SourceCheckError(one_line(f"{label} cannot be opened: {type(exc).__name__}: {exc}")) from None
    if n == 0:
        raise SourceCheckError(f"{label} has no rows: nothing to publish")
    good, first_bad = 0, None
    try:
        for _, item in prompt_bodies(source, 0, min(rows, n), group_size, cfg.path):
            if isinstance(item, Exception):
                first_bad = first_bad or item
            else:
                good += 1
    except Exception as exc:  # noqa: BLE001 - a read that breaks: the reader's error, on one line
        raise SourceCheckError(one_line(f"{label} cannot be read: {type(exc).__name__}: {exc}")) from None
    if good == 0:
        raise SourceCheckError(one_line(f"{label}: none of its first {min(rows, n)} rows can become a prompt; "
                                        f"the first: {first_bad} (`m1flow data validate` lists every bad row)"))
    return good


def check_settings(settings: Mapping[str, Any], run_id: str = "local", rows: int = FIRST_ROWS) -> list[str]:
    """Every source and held-out set of a run's settings (svc_source's `sources:`, `eval_sets:` and
    `group_size`) checked in order; the names of the sources checked. SourceCheckError on the first
    that cannot be used."""
    sources = parsed_sources(settings)
    group_size = settings.get("group_size", 8)
    if not isinstance(group_size, int) or group_size < 1:
        raise SourceCheckError(f"group_size: a whole number >= 1, got {group_size!r}")
    names = [d.source_name for d in sources]
    if len(set(names)) != len(names):
        raise SourceCheckError(f"sources: names must be unique, got {names} (give each a `name`)")
    for i, dataset in enumerate(sources):
        check_dataset(dataset, f"sources[{i}]", group_size, rows)
    for i, held in enumerate(parsed_eval_sets(settings)):
        try:
            load_set(held, run_id)
        except HeldOutError as exc:
            raise SourceCheckError(one_line(f"eval_sets[{i}]: {exc}")) from None
    return names
