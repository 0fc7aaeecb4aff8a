"""The shipped SWE set's parts (scripts/swe_factory.sh): one project's made and validated instances,
carried from another set that made them with the same inputs instead of made again.

Why: a set's folder is keyed by all its inputs, so adding a project is a new folder; the projects it
shares with an older set (the same name, version, mutations tried, seed and format: `parts/NAME.inputs`)
need not be made and validated again, minutes of CPU each. What grading reads is content-addressed: a
snapshot by its SHA-256 (copied into this set's task store, the instance's payload_uri renamed to it)
and an environment by its content key (its folder copied as it is), so the carried instances grade as
they did where they were validated; their validate result comes with them, saying where from.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from m1flow.task_store import TaskStore

PARTS = "parts"


def find_part(cache: Path, here: Path, name: str, inputs: str) -> Path | None:
    """Another complete-or-not set under `cache` holding a validated part of `name` made with `inputs`."""
    for other in sorted(cache.glob("swe-set-*")):
        part = other / PARTS / f"{name}.jsonl"
        marker = other / PARTS / f"{name}.inputs"
        if other.resolve() != here.resolve() and part.is_file() and marker.is_file() and \
                marker.read_text().strip() == inputs.strip():
            return other
    return None


def carry_part(source: Path, dest: Path, name: str) -> int:
    """Copy `name`'s part from set `source` into set `dest`: its snapshots, environments, log, inputs and
    validate result; the part's JSONL last (its presence says the part is whole). Returns its rows."""
    src_store, dst_store = TaskStore(source / "tasks"), TaskStore(dest / "tasks")
    rows = [json.loads(line) for line in (source / PARTS / f"{name}.jsonl").read_text().splitlines()]
    for row in rows:
        row["payload_uri"] = dst_store.put(src_store.read(row["payload_uri"]))
        env = row.get("environment")
        if env and not (dest / "envs" / env).exists():
            tmp = dest / "envs" / f".{env}.carry-{os.getpid()}"
            shutil.copytree(source / "envs" / env, tmp, symlinks=True)
            tmp.rename(dest / "envs" / env)
    (dest / PARTS).mkdir(parents=True, exist_ok=True)
    for suffix in (".log", ".inputs"):
        shutil.copyfile(source / PARTS / f"{name}{suffix}", dest / PARTS / f"{name}{suffix}")
    validated = (source / PARTS / f"{name}.validate").read_text()
    (dest / PARTS / f"{name}.validate").write_text(validated + f"(carried from {source.name}, validated there)\n")
    tmp = dest / PARTS / f"{name}.jsonl.carry"
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tmp.rename(dest / PARTS / f"{name}.jsonl")
    return len(rows)


def main(argv: list[str]) -> int:
    """python -m m1flow.data.swe_factory.shipped CACHE SET NAME INPUTS: carry the part if some set has
    it (exit 0, a line saying so), else exit 1."""
    cache, here, name, inputs = Path(argv[0]), Path(argv[1]), argv[2], argv[3]
    source = find_part(cache, here, name, inputs)
    if source is None:
        return 1
    print(f"{name}: {carry_part(source, here, name)} validated instances carried from {source.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
