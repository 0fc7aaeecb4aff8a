"""The real third-party rows of tests/fixtures/golds/ (LICENSES.md there) as m1flow task rows, the way a
user maps them: each evals set to the kind and answer style its prompt asks for (docs/tasks.md,
"What the prompt must ask for"), reasoning-gym question/answer exports to the math kind (as the
user of issue 38 did) or the text kind, MMLU in the evals MultipleChoice prompt.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GOLDS = Path(__file__).resolve().parent.parent / "fixtures" / "golds"
# evals set -> (kind, answer style): what each set's prompt asks the answer to be
EVALS_KINDS = {
    "math-derivatives": ("math", "bare"),              # "present the final derivative result as '{answer here}'"
    "chinese-remainder-theorem": ("text", "auto"),     # "Final answer: x is congruent to a modulo b"
    "aime_evaluation": ("math", "bare"),               # "format your answer as a string with three digits"
    "determinant": ("math", "bare"),                   # "Reply ONLY with the answer approximated to 2 decimals"
    "probabilities-word-problems": ("math", "bare"),   # "enclosed in brackets like so {answer here}"
    "probability_questions": ("math", "bare"),         # "only the numerical answer rounded to 4 decimal places"
    "logiqa": ("choice", "bare"),                      # "you generate the answer 'A'"
    "medmcqa": ("choice", "bare"),                     # "Only write the answer down."
    "jee-math": ("choice", "auto"),                    # "end your response with ... the correct answer is (Letter)"
}


def read(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (GOLDS / name).read_text(encoding="utf-8").splitlines()]


def evals_row(item: dict[str, Any], kind: str | None = None, style: str | None = None,
              gold: Any = None) -> dict[str, Any]:
    """An evals sample as an m1flow row: its messages the prompt, its ideal (a list stays a list) the gold."""
    default_kind, default_style = EVALS_KINDS[item["set"]]
    return {"id": f"{item['set']}-{item['line']}", "source": item["set"], "prompt": item["sample"]["input"],
            "verifier": {"kind": kind or default_kind, "gold": item["sample"]["ideal"] if gold is None else gold,
                         "spec": {"style": style or default_style}}}


def evals_rows(name: str) -> list[dict[str, Any]]:
    return [evals_row(item) for item in read("evals.jsonl") if item["set"] == name]


def rg_row(item: dict[str, Any], kind: str = "math", style: str = "bare") -> dict[str, Any]:
    """A reasoning-gym question/answer export as a row of `kind` (the prompts ask for the bare answer)."""
    return {"id": f"{item['task']}-{item['index']}", "source": f"rg-export/{item['task']}", "prompt": item["question"],
            "verifier": {"kind": kind, "gold": item["answer"], "spec": {"style": style}}}


def mmlu_row(item: dict[str, Any], style: str = "bare") -> dict[str, Any]:
    """An MMLU row in the evals MultipleChoice prompt (options unshuffled), the gold its letter."""
    options = "\n".join(f"{chr(65 + i)}) {choice}" for i, choice in enumerate(item["choices"]))
    prompt = f"\nPlease answer with the letter of the correct answer.\n\n{item['question']}\n{options}"
    return {"id": f"{item['subject']}-{item['row']}", "source": "mmlu", "prompt": prompt,
            "verifier": {"kind": "choice", "gold": chr(65 + item["answer"]), "spec": {"style": style}}}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path
