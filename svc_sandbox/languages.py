"""The languages the sandbox runs and every name they go by, in one table.

Why here and public: callers name a language in a task spec and find a program in a code fence
tagged with one of these names (svc_reward's code verifier); the sandbox must accept exactly the
names the callers look for. How each language is compiled and run stays inside the sandbox.
"""
from __future__ import annotations

from svc_sandbox.api import InvalidRequest

NAMES: dict[str, frozenset[str]] = {  # canonical name -> every name it goes by (itself included)
    "python": frozenset({"python", "python3", "py"}),
    "bash": frozenset({"bash", "sh", "shell"}),
    "c": frozenset({"c"}),
    "cpp": frozenset({"cpp", "c++", "cc", "cxx"}),
}
_CANONICAL = {alias: name for name, aliases in NAMES.items() for alias in aliases}


def canonical_language(language: str) -> str:
    """'Python3' -> 'python'; InvalidRequest (field `language`) for a language the sandbox cannot run."""
    name = _CANONICAL.get(language.strip().lower())
    if name is None:
        raise InvalidRequest("language", f"unsupported language {language[:50]!r}; supported: {sorted(NAMES)}")
    return name


def fence_tags(language: str) -> frozenset[str]:
    """Code-fence tags that mark a block as `language` (lower case); just the name when unknown."""
    try:
        return NAMES[canonical_language(language)]
    except InvalidRequest:
        return frozenset({language.strip().lower()})
