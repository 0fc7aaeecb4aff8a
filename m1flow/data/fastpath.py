"""One pass over an m1flow-form row that proves it well formed without pydantic, and its prompt's
body bytes, for the kinds most rows are (those whose declaration has a fast check: arith, math, genrm).

Why: the importer, `TaskRecord` and the kind's schema cost the prompt source ~20 us a row, four
times what reading it costs (bench/source.py). This pass checks the same rules with plain type
tests, and where it has any doubt (another kind, a key it does not know, a type it does not expect,
JSON text in a cell, a dotted column, a value the schema might refuse) it answers None and the row
takes the importer's path, which gives the error with its field. So it accepts a subset of what the
slow path accepts and gives the same Prompt for it (tests/data/test_fastpath.py checks both on the
fixtures' good and bad rows and on mutated rows).
"""
from __future__ import annotations

import json
from typing import Any

from m1flow.kinds import KINDS
from m1flow.prompt_wire import BodyWriter

ROW_KEYS = frozenset({"id", "source", "domain", "prompt", "verifier", "difficulty", "license"})
VERIFIER_KEYS = frozenset({"kind", "gold", "spec", "payload_uri"})
ROLES = frozenset({"system", "user", "assistant"})
DOMAINS = frozenset({"reasoning", "general"})
EMPTY = ("", None)
# The kinds' fast checks by the whole kind string: "logic:<family>" and the like have none.
FAST = {name: kind.fast for name in KINDS.names() if (kind := KINDS.get(name)).fast is not None}


def _spec_fits(kind: str, gold: str, spec: dict[str, Any]) -> bool:
    """The kind's schema (m1flow/kinds/) on the common shapes; False: let the schema say."""
    fits = FAST.get(kind)
    return fits is not None and fits(gold, spec)


def _without_nulls(value: dict[str, Any]) -> dict[str, Any]:
    """The importer's rule for struct columns: null members dropped (m1flow.data.importers)."""
    return {k: _without_nulls(v) if isinstance(v, dict) else v for k, v in value.items() if v is not None}


def _text_of(prompt: Any) -> tuple[str, list[tuple[str, str]]] | None:
    """(the user turn, the chat messages) of a prompt the record accepts as it is; None: defer."""
    if type(prompt) is str:
        if not prompt or prompt.strip()[:1] in ("{", "["):  # empty, or JSON text the importer decodes
            return None
        return prompt, []
    if type(prompt) is not list or not prompt:
        return None
    text = None
    for m in prompt:
        if type(m) is not dict or m.keys() != {"role", "content"} or type(m["role"]) is not str \
                or m["role"] not in ROLES or type(m["content"]) is not str:
            return None
        if m["role"] == "user":
            text = m["content"]
    if not text:  # no user turn, or an empty one: the slow path names it
        return None
    return text, [(m["role"], m["content"]) for m in prompt]


def quick_body(row: dict[str, Any], index: int, source: str, writer: BodyWriter,
               domain: str | None = None) -> tuple[str, bytes] | None:
    """(prompt id, the Prompt's fields 2-10 serialized by `writer`) of an m1flow-form row this pass
    proves well formed; None when it cannot tell (the importer's path then decides). source and
    domain: the dataset's name and domain override, as m1flow.data.importers.ImportContext has them."""
    if type(row) is not dict or not ROW_KEYS.issuperset(row):
        return None
    verifier = _verifier(row.get("verifier"))
    named = _names(row, index, source, domain)
    if verifier is None or named is None:
        return None
    kind, gold, spec, uri = verifier
    rid, name, dom = named
    difficulty, license_ = row.get("difficulty"), row.get("license")
    if difficulty not in EMPTY and type(difficulty) not in (int, float):
        return None
    if license_ not in EMPTY and type(license_) is not str:
        return None
    turn = _text_of(row.get("prompt"))
    if turn is None:
        return None
    try:
        spec_json = json.dumps(spec, sort_keys=True) if spec else "{}"
        prompt_id = f"{name}/{rid}"
        body = writer.body(prompt_id, kind, turn[0], kind, gold, spec_json, uri, name, dom, turn[1])
    except (ValueError, TypeError):  # not JSON, not UTF-8 (a lone surrogate): the slow path names the field
        return None
    return prompt_id, body


def _verifier(verifier: Any) -> tuple[str, str, dict[str, Any], str] | None:
    """(kind, gold, spec, payload_uri) of a verifier whose kind's fast check accepts it; None: defer."""
    if type(verifier) is not dict or not VERIFIER_KEYS.issuperset(verifier):
        return None
    kind, gold, spec, uri = verifier.get("kind"), verifier.get("gold"), verifier.get("spec"), verifier.get("payload_uri")
    if type(kind) is not str:
        return None
    if gold is None:
        gold = ""
    elif type(gold) is int:
        gold = str(gold)
    elif type(gold) is not str:
        return None
    if uri is None:
        uri = ""
    elif type(uri) is not str:
        return None
    if spec in EMPTY:
        spec = {}
    elif type(spec) is dict:
        spec = _without_nulls(spec)
    else:
        return None
    return (kind, gold, spec, uri) if _spec_fits(kind, gold, spec) else None


def _names(row: dict[str, Any], index: int, source: str, domain: str | None) -> tuple[str, str, str] | None:
    """(record id, source, domain) as the importer would set them; None: defer."""
    rid, name, dom = row.get("id"), row.get("source"), row.get("domain")
    if rid in EMPTY:
        rid = str(index)
    elif type(rid) is int:
        rid = str(rid)
    elif type(rid) is not str:
        return None
    if name in EMPTY:
        name = source
    elif type(name) is not str:
        return None
    if domain:
        dom = domain
    elif dom in EMPTY:
        dom = "reasoning"
    elif type(dom) is not str or dom not in DOMAINS:
        return None
    return rid, name, dom
