"""The error for a task name that does not exist, shared by every task family."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


def unknown(what: str, name: str, known: Iterable[str]) -> ValueError:
    """A ValueError naming the closest known names first (105 names are too many to read)."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(known)}"
    return ValueError(f"unknown {what} {name!r}; {hint} ({len(known)} known)")
