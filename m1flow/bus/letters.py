"""What a dead letter says about why: one line, no traceback, no host path.

`dlq` is read by whoever may read the topic (the monitor, its dashboard, an operator's tools), and a
letter's record can be an attacker's on purpose; the reason there names the failure (the exception's
type and message, a row's file name, field and why), while the traceback and the full paths stay in
the service's own log, which logs the same failure in full.
"""
from __future__ import annotations

import re

MAX_REASON = 1000
# an absolute path (or a file:// URI): its folders go, its last part (a file's name) stays
_PATH = re.compile(r"(?<![\w.~/-])(?:file://)?/(?:[^\s/'\"`,;:()\[\]{}<>]+/)+")


def reason(error: str | BaseException) -> str:
    """The text a dead letter carries for `error`: its first line, host folders cut from every
    path, at most MAX_REASON characters."""
    text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return _PATH.sub("", first)[:MAX_REASON]
