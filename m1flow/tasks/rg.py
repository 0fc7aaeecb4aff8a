"""reasoning-gym's generators as task records of the verifier kind `rg:<task>`.

Why a prompt carries (task, config, seed, index) and not the entry: reasoning-gym items are pure
functions of those four, so the reward service regenerates the entry (its metadata included, which
some tasks score against instead of a gold answer) and scores with the library's own
`score_answer`, partial credit kept. The dataset objects are cached per (task, config, seed), so
regenerating item i costs one item, not i.

`reasoning_gym` is an optional extra (1.4 s to import, eager): it is imported on first use only.

    fields = record_fields("leg_counting", seed=0, index=41, level=2)  # m1flow.data.generators.rg_record
    item = entry("leg_counting", fields["verifier"]["spec"]["config"], 0, 41)
    score(item, "<answer>292</answer>")  # -> 1.0 when 292 is the count
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from functools import lru_cache
from typing import Any

from m1flow.chat import after_reasoning
from m1flow.tasks.logic.base import ANSWER_NOTE
from m1flow.tasks.names import unknown

LICENSE = "Apache-2.0 (reasoning-gym)"
# Tasks whose items are precomputed for `size` in the constructor (measured on 0.1.25): item i exists
# only below size, and for acre which items exist depends on size, so size is part of their config.
SIZE_BOUND = frozenset({"acre", "gsm_symbolic", "list_functions", "word_ladder"})
# Tasks with answer=None (scored from metadata) whose metadata holds one valid answer.
EXAMPLE_ANSWER = {"graph_color": "possible_answer", "propositional_logic": "example_answer",
                  "rubiks_cube": "example_correct_answer"}
# Tasks whose items do not regenerate identically in another process (measured with
# scripts/rg_gold.py on 0.1.25: codeio draws from unseeded randomness, the others iterate sets of
# strings, whose order follows the process's hash seed). Their spec carries the entry itself.
CARRY_ENTRY = frozenset({"codeio", "isomorphic_strings", "list_functions", "polynomial_multiplication",
                         "ransom_note"})
UNSUPPORTED = {"composite": "it mixes other tasks; give each task as its own source"}


def _factory() -> Any:
    try:
        from reasoning_gym import factory
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the rg:<task> kind needs the reasoning-gym extra (pip install reasoning-gym)") from exc
    return factory


def library_version() -> str:
    """reasoning-gym's installed version ('' without it): its items, and whatever is cached from them, follow it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reasoning-gym")
    except PackageNotFoundError:
        return ""


def task_names() -> list[str]:
    """Every generator this kind serves (reasoning-gym's registry less `composite`)."""
    return sorted(set(_factory().DATASETS) - set(UNSUPPORTED))


def check_task(task: str) -> None:
    """ValueError, naming close matches, for a task reasoning-gym does not have."""
    if task in UNSUPPORTED:
        raise ValueError(f"rg task {task!r} is not supported: {UNSUPPORTED[task]}")
    if task not in _factory().DATASETS:
        raise unknown("reasoning-gym task", task, task_names())


def _jsonable(value: Any) -> Any:
    """Config values as JSON gives them back (tuples become lists), so both ends build the same config."""
    return json.loads(json.dumps(value))


def task_config(task: str, config: dict[str, Any] | None = None, level: int | None = None) -> dict[str, Any]:
    """The constructor arguments that differ from the task's defaults: the curriculum's at `level`
    (1 = its first level; above its top clamps to the top), then `config` over them.

    Raises ValueError for an unknown task or field, a level on a task without a curriculum, a value
    the task's own validation refuses, or one JSON cannot carry.
    """
    check_task(task)
    factory = _factory()
    config_cls = factory.DATASETS[task][1]
    fields = {f.name for f in dataclasses.fields(config_cls)}
    given = dict(config or {})
    if "seed" in given:
        raise ValueError(f"rg:{task}: give the seed as the seed argument, not in config")
    bad = sorted(set(given) - fields)
    if bad:
        raise ValueError(f"rg:{task}: config fields {bad} do not exist; known: {sorted(fields - {'seed'})}")
    chosen: dict[str, Any] = {}
    if level is not None:
        if not factory.has_curriculum(task):
            raise ValueError(f"rg:{task} has no curriculum, so no levels; leave level unset or give config")
        curriculum = factory.create_curriculum(task)
        curriculum.set_global_level(max(int(level), 1) - 1)
        leveled, defaults = curriculum.generate_configuration(), config_cls()
        chosen = {f: getattr(leveled, f) for f in fields - {"seed"} if getattr(leveled, f) != getattr(defaults, f)}
    chosen.update(given)
    if task in SIZE_BOUND and "size" not in chosen:
        chosen["size"] = config_cls().size
    try:
        carried = _jsonable(chosen)
    except TypeError as exc:
        raise ValueError(f"rg:{task}: config cannot travel as JSON: {exc}") from None
    _dataset(task, json.dumps(carried, sort_keys=True), 0)  # the task's own validation, now, not at scoring
    return carried


@lru_cache(maxsize=256)
def _dataset(task: str, config_json: str, seed: int) -> Any:
    check_task(task)
    try:
        return _factory().create_dataset(task, seed=seed, **json.loads(config_json))
    except (AssertionError, TypeError) as exc:  # reasoning-gym validates configs with asserts
        raise ValueError(f"rg:{task}: config {config_json} refused: {exc or type(exc).__name__}") from None


def dataset(task: str, config: dict[str, Any], seed: int) -> Any:
    """The task's dataset object for (config, seed), built once per process."""
    return _dataset(task, json.dumps(config, sort_keys=True), int(seed))


def entry(task: str, config: dict[str, Any], seed: int, index: int) -> dict[str, Any]:
    """Item `index` of the task's stream (config, seed): question, answer (None for some), metadata."""
    data = dataset(task, config, seed)
    if index < 0 or (task in SIZE_BOUND and index >= data.size):
        raise ValueError(f"rg:{task}: index {index} is outside 0..{data.size - 1}; this task precomputes "
                         f"config size items, so give a size above the items wanted")
    return data[index]


def reference_answer(item: dict[str, Any]) -> str | None:
    """The gold answer, or for tasks without one an example valid answer from the metadata; None if neither."""
    if item.get("answer") is not None:
        return str(item["answer"])
    meta = item.get("metadata", {})
    key = EXAMPLE_ANSWER.get(meta.get("source_dataset", ""))
    if key is None:
        return None
    example = meta.get(key)
    if not example:
        return None
    return example if isinstance(example, str) else json.dumps({str(k): v for k, v in example.items()})


def fingerprint(item: dict[str, Any]) -> str:
    """What the spec remembers of its item, so a regeneration that differs (a task with hidden
    randomness, such as codeio's; another reasoning-gym version) is caught instead of scored."""
    text = f"{item['question']}\0{item.get('answer')!r}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def extract(response: str) -> str | None:
    """The last <answer> after the reasoning, read by reasoning-gym's own extract_answer."""
    from reasoning_gym.utils import extract_answer

    return extract_answer(after_reasoning(response))


def score_answer(task: str, config: dict[str, Any], seed: int, item: dict[str, Any], answer: str | None) -> float:
    """The dataset's own score of an extracted answer: 1.0 right, partial credit in between."""
    return float(dataset(task, config, seed).score_answer(answer, item))


def score(item: dict[str, Any], response: str) -> float:
    """A whole response scored against an entry of default config (tests, notebooks)."""
    task = item["metadata"]["source_dataset"]
    return score_answer(task, {}, 0, item, extract(response))


def _record_id(seed: int, index: int, config: dict[str, Any]) -> str:
    if not config:
        return f"{seed}-{index}"
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:8]
    return f"{seed}-{index}-{digest}"


def record_fields(task: str, seed: int, index: int, config: dict[str, Any] | None = None,
                  level: int | None = None) -> dict[str, Any]:
    """Item `index` of rg task `task` as a task record's fields (m1flow.data.generators.rg_record
    builds the record); its spec regenerates the item, nothing more (and a fingerprint that tells
    whether the regenerated item is the one the prompt showed), except for the CARRY_ENTRY tasks,
    whose items cannot be regenerated: there it is the entry."""
    carried = task_config(task, config, level)
    item = entry(task, carried, seed, index)
    spec = {"task": task, "config": carried, "seed": int(seed), "index": int(index), "fingerprint": fingerprint(item)}
    if task in CARRY_ENTRY:
        spec["entry"] = _jsonable(item)
    return {"id": _record_id(seed, index, carried), "source": f"rg:{task}",
            "prompt": f"{item['question'].rstrip()}\n\n{ANSWER_NOTE}",
            "verifier": {"kind": f"rg:{task}", "gold": reference_answer(item) or "", "spec": spec},
            "difficulty": None if level is None else float(max(int(level), 1)), "license": LICENSE}
