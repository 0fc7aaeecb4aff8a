"""`m1flow feed`: a one-shot publish of prompts for small jobs and tests, beside the prompt source.

Arithmetic problems (`publish`) or a file's first rows in file order (`publish_dataset`), through the
same record -> Prompt path svc_source takes (m1flow.source.prompt_for), acknowledged before it
returns. It keeps no position and follows no mixture: what needs those is svc_source.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from m1flow.bus import Producer, codec
from m1flow.bus.topics import DLQ, PROMPTS
from m1flow.contracts import events
from m1flow.data.dataset import open_source
from m1flow.data.record import RowError
from m1flow.source import prompt_for, row_letter
from m1flow.tasks.arith import ArithProblem

if TYPE_CHECKING:
    from m1flow.data.dataset import DatasetConfig


def arith_prompt(problem: ArithProblem, group_size: int, run_id: str = "local") -> events.Prompt:
    """One generated arithmetic problem as a Prompt (kind `arith`, the integer result as gold)."""
    return events.Prompt(header=codec.header("source", run_id=run_id), prompt_id=problem.prompt_id,
                         task_type="arith", text=problem.text, group_size=group_size,
                         verifier=events.VerifierSpec(kind="arith", gold=problem.answer))


def publish(producer: Producer, problems: list[ArithProblem], group_size: int, run_id: str = "local") -> list[str]:
    """Publish and wait for the broker's acknowledgement; return the prompt ids."""
    for problem in problems:
        producer.send(PROMPTS, problem.prompt_id, arith_prompt(problem, group_size, run_id))
    producer.flush()
    return [p.prompt_id for p in problems]


def publish_dataset(producer: Producer, cfg: "DatasetConfig", n: int | None, group_size: int,
                    run_id: str = "local") -> tuple[list[str], list[str]]:
    """`m1flow feed --dataset`: the first n rows in file order, published and acknowledged; bad rows
    go to `dlq`. Returns (prompt ids, bad-row reasons)."""
    source = open_source(cfg)
    stop = len(source) if n is None else min(n, len(source))
    ids, bad = [], []
    for row, item in source.records(0, stop):
        try:
            if isinstance(item, Exception):
                raise item
            prompt = prompt_for(item, group_size, run_id, path=cfg.path or source.name, row=row)
        except (ValueError, RowError) as exc:
            producer.send(DLQ, f"source:{source.name}", row_letter(exc, source.name, row, 0, "feed", "m1flow-feed", run_id))
            bad.append(str(exc))
            continue
        producer.send(PROMPTS, prompt.prompt_id, prompt)
        ids.append(prompt.prompt_id)
    producer.flush()
    return ids, bad
