"""The prompt source: generated tasks published on `prompts`."""
from __future__ import annotations

from m1flow.bus import Producer, codec
from m1flow.bus.topics import PROMPTS
from m1flow.contracts import events
from m1flow.tasks.arith import ArithProblem


def arith_prompt(problem: ArithProblem, group_size: int, run_id: str = "local") -> events.Prompt:
    return events.Prompt(header=codec.header("source", run_id=run_id), prompt_id=problem.prompt_id,
                         task_type="arith", text=problem.text, group_size=group_size,
                         verifier=events.VerifierSpec(kind="arith", gold=problem.answer))


def publish(producer: Producer, problems: list[ArithProblem], group_size: int, run_id: str = "local") -> list[str]:
    """Publish and wait for the broker's acknowledgement; return the prompt ids."""
    for problem in problems:
        producer.send(PROMPTS, problem.prompt_id, arith_prompt(problem, group_size, run_id))
    producer.flush()
    return [p.prompt_id for p in problems]
