"""The run's settings file as `m1flow up --sources FILE` hands it to svc_source (and, when it lists
`eval_sets:`, to svc_eval: both read the one list of held-out sets).

Why a copy: the services run from the repository root (ops/launcher.py), so a dataset path
written relative in the user's file would be looked up there, not beside the file. Each relative
`path:` is made absolute against the file's own directory (as docker compose reads its paths), and
svc_source reads that copy from the run directory; everything else is passed on as written.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from m1flow.source_check import SourceCheckError, check_settings


class SourcesFileError(ValueError):
    """A sources file that cannot be read or is not a mapping; the message names the file."""


def load_settings(path: Path) -> dict[str, Any]:
    """The file's settings (YAML, or JSON for a .json name)."""
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise SourcesFileError(f"--sources {path}: cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise SourcesFileError(f"--sources {path}: svc_source settings are a mapping with a `sources:` list, "
                               f"got {type(data).__name__}")
    return data


def with_absolute_paths(settings: dict[str, Any], base: Path) -> dict[str, Any]:
    """The settings with every relative dataset `path` of `sources` and `eval_sets` joined to `base`
    (generators untouched)."""
    out = dict(settings)
    for key in ("sources", "eval_sets"):
        entries = [settings[key]] if isinstance(settings.get(key), dict) else settings.get(key)
        if not isinstance(entries, list):
            continue  # absent, or the service names what is wrong with it
        resolved = []
        for entry in entries:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str) and entry["path"]:
                path = Path(entry["path"]).expanduser()
                entry = {**entry, "path": str(path if path.is_absolute() else (base / path).resolve())}
            resolved.append(entry)
        out[key] = resolved
    return out


def has_eval_sets(path: str | Path) -> bool:
    """Whether a (resolved) settings file lists held-out sets: then `m1flow up` starts svc_eval too."""
    return bool(load_settings(Path(path)).get("eval_sets"))


def resolved_sources(path: str | Path, run_dir: str | Path) -> Path:
    """Write the settings of `path`, paths made absolute, to run_dir/sources.resolved.json; return that file."""
    path = Path(path).expanduser().resolve()
    settings = with_absolute_paths(load_settings(path), path.parent)
    out = Path(run_dir).resolve() / "sources.resolved.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(settings, indent=1))
    return out


# the settings svc_source and svc_eval also take from the environment (M1FLOW_<KEY>), which win over the file's
ENV_KEYS = ("sources", "eval_sets", "group_size")


def effective_settings(path: str | Path | None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The sources, held-out sets and group size the services will read: the (resolved) file's, with the
    environment's `M1FLOW_SOURCES`, `M1FLOW_EVAL_SETS`, `M1FLOW_GROUP_SIZE` over them, as they read it."""
    env = os.environ if env is None else env
    settings = load_settings(Path(path)) if path is not None else {}
    for key in ENV_KEYS:
        text = env.get(f"M1FLOW_{key.upper()}")
        if text is not None:
            try:
                settings[key] = json.loads(text)
            except ValueError:
                settings[key] = text  # as the services read it: a string, which the check names
    return settings


def check_sources(path: str | Path | None, env: Mapping[str, str] | None = None, run_id: str = "local",
                  named: str | Path | None = None) -> list[str]:
    """Open every source and held-out set `m1flow up` would hand the services and read their first rows
    (m1flow.source_check), before anything starts; the source names. SourcesFileError: one line naming
    the file as the user gave it (`named`; else `path`, or the variable), the source and why."""
    named = named if named is not None else path
    where = f"--sources {named}" if named is not None else "M1FLOW_SOURCES"
    try:
        return check_settings(effective_settings(path, env), run_id)
    except SourceCheckError as exc:
        raise SourcesFileError(f"{where}: {exc}") from None
