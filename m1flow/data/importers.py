"""Row dict -> TaskRecord, by the layout the dataset is published in.

`m1flow`: rows already in TaskRecord form (CSV cells as dotted columns, `verifier.kind`, and JSON
text for nested values). `verl`: the layout most public RL datasets are published in (verl's
docs/preparation/prepare_data.rst): data_source, prompt (chat messages), ability,
reward_model {style, ground_truth}, extra_info {split, index, ...}; the verifier kind comes from
data_source through a table in config (`DatasetConfig.kinds`, defaults in DEFAULT_KINDS), as verl's
`default_compute_score` routes by data_source. `swebench`: SWE-bench instances
(m1flow.data.swebench). `auto`: swebench when the row has instance_id and FAIL_TO_PASS, verl when it
has data_source and a reward_model, else m1flow.
"""
from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from m1flow.data.record import RowError, SpecError, TaskRecord
from m1flow.kinds.base import dotted
from m1flow.registry import Registry

# verl's data_source names (verl/utils/reward_score/__init__.py) -> our verifier kind
DEFAULT_KINDS: dict[str, str] = {
    "openai/gsm8k": "math", "gsm8k": "math",
    "lighteval/MATH": "math", "DigitalLearningGmbH/MATH-lighteval": "math", "HuggingFaceH4/MATH-500": "math",
    "math_dapo": "math", "math": "math", "math_dapo_reasoning": "math",
    "numina_aops_forum": "math", "numina_synthetic_math": "math", "numina_amc_aime": "math",
    "numina_synthetic_amc": "math", "numina_cn_k12": "math", "numina_olympiads": "math",
    "codecontests": "code", "apps": "code", "codeforces": "code", "taco": "code",
}
KIND_PREFIXES: dict[str, str] = {"aime": "math"}  # verl: data_source.startswith("aime") -> math_dapo
# How each source's answers are written, for the math kind's extraction (spec.style)
DEFAULT_STYLES: dict[str, str] = {
    "openai/gsm8k": "gsm8k", "gsm8k": "gsm8k",
    "lighteval/MATH": "boxed", "DigitalLearningGmbH/MATH-lighteval": "boxed", "HuggingFaceH4/MATH-500": "boxed",
    "math_dapo": "math_dapo", "math": "math_dapo", "math_dapo_reasoning": "math_dapo",
}
STYLE_PREFIXES: dict[str, str] = {"aime": "math_dapo"}
GENERAL_ABILITIES = frozenset({"general", "chat", "instruction", "writing", "qa"})


@dataclass(frozen=True)
class ImportContext:
    """What an importer knows besides the row: the source's name and config, and where a row is
    (`locate`: a directory's row -> its data file and its row there, for errors)."""
    source: str
    path: str = ""
    kinds: Mapping[str, str] = field(default_factory=dict)  # data_source -> kind, over DEFAULT_KINDS
    domain: str | None = None  # override
    locate: Callable[[int], tuple[str, int]] | None = None

    def where(self, index: int) -> tuple[str, int]:
        """(file, row in that file) of the source's row `index`."""
        return self.locate(index) if self.locate is not None else (self.path, index)


Importer = Callable[[dict[str, Any], int, ImportContext], TaskRecord]
IMPORTERS: Registry[Importer] = Registry("importer")


def import_row(importer: Importer, row: dict[str, Any], index: int, ctx: ImportContext) -> TaskRecord | RowError:
    """The record of a row, or the RowError that names its bad field; never raises for bad data."""
    try:
        return importer(row, index, ctx)
    except SpecError as exc:
        return RowError(*ctx.where(index), exc.field, exc.why)
    except ValidationError as exc:
        return RowError(*ctx.where(index), *_first_error(exc, row))


def _first_error(exc: ValidationError, row: dict[str, Any]) -> tuple[str, str]:
    """The error to report: for the prompt union, the one of the member the value's type chose."""
    errors = exc.errors()
    prompt = row.get("prompt")
    member = "list[Message]" if isinstance(prompt, list) else "str"
    for err in errors:
        if err["loc"][:1] == ("prompt",) and len(err["loc"]) > 1 and err["loc"][1] != member:
            continue
        return dotted(err["loc"]) or "row", err["msg"]
    return dotted(errors[0]["loc"]) or "row", errors[0]["msg"]


def unflatten(row: dict[str, Any]) -> dict[str, Any]:
    """{"verifier.kind": "math"} -> {"verifier": {"kind": "math"}} (CSV and flattened Parquet columns)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        node = out
        *parents, leaf = str(key).split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SpecError(str(key), "a column and a dotted column under it")
        node[leaf] = value
    return out


def _json_text(value: Any, field_name: str) -> Any:
    """A nested value written as JSON text (a CSV cell), decoded; anything else as it is."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise SpecError(field_name, f"not valid JSON text: {exc}") from None
    return value


def _without_nulls(value: dict[str, Any]) -> dict[str, Any]:
    """A struct column's record with its null members dropped: Parquet and Arrow merge the specs of
    different kinds into one struct type, filling the fields a row does not have with nulls."""
    return {k: _without_nulls(v) if isinstance(v, dict) else v for k, v in value.items() if v is not None}


@IMPORTERS.register("m1flow")
def from_m1flow(row: dict[str, Any], index: int, ctx: ImportContext) -> TaskRecord:
    data = unflatten(row) if any("." in str(k) for k in row) else dict(row)
    data["prompt"] = _json_text(data.get("prompt"), "prompt")
    verifier = _json_text(data.get("verifier"), "verifier")
    if isinstance(verifier, dict):
        verifier = dict(verifier)
        if "spec" in verifier:
            verifier["spec"] = _json_text(verifier["spec"], "verifier.spec")
            if verifier["spec"] in ("", None):
                verifier["spec"] = {}
            elif isinstance(verifier["spec"], dict):
                verifier["spec"] = _without_nulls(verifier["spec"])
        for key in ("gold", "payload_uri"):
            if verifier.get(key) is None:
                verifier.pop(key, None)
            elif key == "gold" and isinstance(verifier[key], (list, tuple)):
                verifier[key] = list(verifier[key])  # accepted answers: the kind takes them or names the field
            elif not isinstance(verifier[key], str):
                verifier[key] = _as_text(verifier[key], f"verifier.{key}")
    elif verifier is None:
        raise SpecError("verifier", "missing")
    data["verifier"] = verifier
    if data.get("difficulty") in ("", None):
        data.pop("difficulty", None)
    for key in ("license", "domain"):
        if data.get(key) in ("", None):
            data.pop(key, None)
    data["id"] = str(data["id"]) if data.get("id") not in (None, "") else str(index)
    data.setdefault("source", ctx.source)
    if not data["source"]:
        data["source"] = ctx.source
    if ctx.domain:
        data["domain"] = ctx.domain
    return TaskRecord.model_validate(data)


@IMPORTERS.register("verl")
def from_verl(row: dict[str, Any], index: int, ctx: ImportContext) -> TaskRecord:
    data = unflatten(row) if any("." in str(k) for k in row) else row
    source = data.get("data_source")
    if not isinstance(source, str) or not source:
        raise SpecError("data_source", "missing: verl rows name their data_source")
    reward = _json_text(data.get("reward_model"), "reward_model")
    if not isinstance(reward, dict):
        raise SpecError("reward_model", "missing: verl rows carry reward_model {style, ground_truth}")
    extra = _json_text(data.get("extra_info"), "extra_info") or {}
    if not isinstance(extra, dict):
        raise SpecError("extra_info", f"a {type(extra).__name__}, not a mapping")
    ability = str(data.get("ability") or "")
    kind = "genrm" if reward.get("style") == "model" else kind_for_source(source, ability, ctx.kinds)
    gold = reward.get("ground_truth")
    verifier = {"kind": kind, "gold": "" if gold is None else gold, "spec": {}}
    if kind == "math":
        verifier["gold"], verifier["spec"] = _math_gold(gold), {"style": style_of(source)}
    elif kind == "code":
        verifier["gold"], verifier["spec"] = "", _code_tests(gold)
    elif isinstance(gold, (list, tuple)):
        verifier["gold"] = [str(g) for g in gold]  # accepted answers (the kind takes a list, or names the field)
    elif not isinstance(verifier["gold"], str):
        verifier["gold"] = json.dumps(gold) if isinstance(gold, dict) else _as_text(gold, GOLD)
    prompt = _json_text(data.get("prompt"), "prompt")
    if hasattr(prompt, "tolist"):  # numpy arrays from pandas-written files
        prompt = prompt.tolist()
    domain = ctx.domain or ("general" if kind == "genrm" or ability.lower() in GENERAL_ABILITIES else "reasoning")
    return TaskRecord.model_validate({
        "id": _verl_id(extra, index), "source": ctx.source, "domain": domain, "prompt": prompt,
        "verifier": verifier, "difficulty": extra.get("difficulty"), "license": str(extra.get("license") or "")})


def kind_for_source(data_source: str, ability: str, kinds: Mapping[str, str]) -> str:
    """The verifier kind of a verl data_source: the config's table, the defaults, then the ability."""
    if data_source in kinds:
        return kinds[data_source]
    if data_source in DEFAULT_KINDS:
        return DEFAULT_KINDS[data_source]
    for prefix, kind in KIND_PREFIXES.items():
        if data_source.startswith(prefix):
            return kind
    if ability == "math":
        return "math"
    raise SpecError("data_source", f"no verifier kind for data_source {data_source!r} (ability {ability!r}): "
                                   f"map it to one: {kinds_hint(data_source)}")


def kinds_hint(data_source: str, kind: str = "math") -> str:
    """How to map a data_source to a kind, in the forms that take it: the `--kinds` flag (JSON, shell
    quoted) and a dataset's `kinds:` in a config (JSON is YAML too)."""
    mapping = json.dumps({data_source: kind})
    return f"--kinds {shlex.quote(mapping)} (or kinds: {mapping} in the dataset's config)"


def style_of(data_source: str) -> str:
    if data_source in DEFAULT_STYLES:
        return DEFAULT_STYLES[data_source]
    return next((s for p, s in STYLE_PREFIXES.items() if data_source.startswith(p)), "auto")


GOLD = "reward_model.ground_truth"


def _as_text(value: Any, field_name: str) -> str:
    """A non-text cell as text; a NaN (how pandas and numpy write a missing value) is refused, never
    turned into the answer 'nan'."""
    if isinstance(value, float) and math.isnan(value):
        raise SpecError(field_name, "NaN: a missing value, not an answer")
    return str(value)


def _math_gold(gold: Any) -> str | list[str]:
    """verl's ground truth as the answer: a gsm8k solution's "#### 72" tail, numbers as text; a list
    of accepted answers as the list of them (the math kind takes it: m1flow.kinds.base.gold_list)."""
    if hasattr(gold, "tolist"):  # a numpy array from a pandas-written file
        gold = gold.tolist()
    if isinstance(gold, (list, tuple)):
        golds = [_math_gold(g) for g in gold]
        return golds[0] if len(golds) == 1 else golds
    if isinstance(gold, (int, float)) and not isinstance(gold, bool):
        return _as_text(gold, GOLD)
    if not isinstance(gold, str):
        raise SpecError(GOLD, f"a {type(gold).__name__}, not an answer")
    if "####" in gold:
        gold = gold.rsplit("####", 1)[1].strip().replace(",", "")
    if not gold.strip():
        raise SpecError(GOLD, "missing: this kind needs a gold answer")
    return gold.strip()


def _code_tests(gold: Any) -> dict[str, Any]:
    """verl's code ground truth ({"inputs": [...], "outputs": [...]}, as JSON text) as stdin/stdout tests."""
    data = _json_text(gold, "reward_model.ground_truth")
    if not isinstance(data, dict) or not isinstance(data.get("inputs"), list) \
            or not isinstance(data.get("outputs"), list):
        raise SpecError("reward_model.ground_truth", 'code rows need {"inputs": [...], "outputs": [...]}')
    if data.get("fn_name"):
        raise SpecError("reward_model.ground_truth", "call-based tests (fn_name) are not supported; "
                                                     "give stdin/stdout tests")
    if len(data["inputs"]) != len(data["outputs"]):
        raise SpecError("reward_model.ground_truth", f"{len(data['inputs'])} inputs, {len(data['outputs'])} outputs")
    return {"tests": [{"stdin": str(i), "expected_stdout": str(o)} for i, o in zip(data["inputs"], data["outputs"])]}


def _verl_id(extra: dict[str, Any], index: int) -> str:
    if extra.get("index") is None:
        return str(index)
    return f"{extra['split']}-{extra['index']}" if extra.get("split") else str(extra["index"])


IMPORTERS.lazy("swebench", "m1flow.data.swebench")  # SWE-bench instances


@IMPORTERS.register("auto")
def from_auto(row: dict[str, Any], index: int, ctx: ImportContext) -> TaskRecord:
    if "instance_id" in row and "FAIL_TO_PASS" in row:  # SWE-bench's instance format
        return IMPORTERS.get("swebench")(row, index, ctx)
    verl = "data_source" in row and ("reward_model" in row or "reward_model.ground_truth" in row)
    return (from_verl if verl else from_m1flow)(row, index, ctx)
