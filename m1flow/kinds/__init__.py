"""The verifier kinds, each declared once: its spec schema, gold writer, answer styles and fast path
(`m1flow/kinds/<kind>.py`, a `Kind`). svc_reward scores each under the same name
(`svc_reward/verifiers/<kind>.py`); tests/reward/test_kind_parts.py names any part a kind lacks.

    from m1flow.kinds import KINDS, check_verifier, gold_response, kind_of
    KINDS.get(kind_of("logic:sudoku")).styles     # (Style('answer_tag', ...),)

Adding a kind (docs/architecture.md, "Adding a verifier"): its module here, its name in the import
line below, its scorer in svc_reward/verifiers/, and a test.
"""
from m1flow.kinds.base import KINDS, Kind, KindSchema, NoGold, SpecError, Style, Verifier, kind_of, missing_parts
from m1flow.kinds import arith, choice, code, genrm, logic, math, rg, swe, text  # noqa: F401  (each declares its Kind)
from m1flow.kinds.check import check_verifier, fill_from_prompt, gold_answer, gold_response

__all__ = ["KINDS", "Kind", "KindSchema", "NoGold", "SpecError", "Style", "Verifier", "check_verifier",
           "fill_from_prompt", "gold_answer", "gold_response", "kind_of", "missing_parts"]
