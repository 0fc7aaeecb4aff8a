"""A pytest plugin the factory loads (`-p m1flow.data.swe_factory.pytest_outcomes`): each test's node id,
its outcome (the worst of set-up, call and tear-down) and its error line, and, when asked, which of
the project's functions the run called.

Why a plugin and not the log: the factory needs each failure's exception text for the problem
statement and the functions the suite covers, which a log does not hold. The sandbox grades from
the log (svc_sandbox.swe), and `m1flow data validate` checks that both name the tests alike.
Environment: M1FLOW_OUTCOMES (the JSON file written at the end), M1FLOW_COVER (a folder: record the
first line of every function under it that runs). Standard library only: it runs in the project's
interpreter.
"""
from __future__ import annotations

import json
import os
import sys

_SEVERITY = {"passed": 0, "xfailed": 0, "skipped": 1, "xpassed": 2, "failed": 3, "error": 3}
_outcomes: dict[str, dict[str, str]] = {}
_called: set[tuple[str, int]] = set()


def _outcome(report) -> str:  # noqa: ANN001 (pytest's TestReport)
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.failed:
        return "failed" if report.when == "call" else "error"
    return report.outcome


def _error(report) -> str:  # noqa: ANN001
    """The exception lines of a failure (pytest's `E   ...` lines), never the source around them."""
    text = getattr(report, "longreprtext", "") or ""
    lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    return "\n".join(lines[:12])[:1500]


def pytest_runtest_logreport(report) -> None:  # noqa: ANN001
    outcome = _outcome(report)
    known = _outcomes.get(report.nodeid)
    if known is None or _SEVERITY[outcome] > _SEVERITY[known["outcome"]]:
        _outcomes[report.nodeid] = {"outcome": outcome, "error": _error(report) if report.failed else ""}


def _profile(root: str):  # noqa: ANN202
    def profile(frame, event, arg):  # noqa: ANN001, ANN202
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(root):
                _called.add((code.co_filename, code.co_firstlineno))
    return profile


def pytest_sessionstart(session) -> None:  # noqa: ANN001
    root = os.environ.get("M1FLOW_COVER")
    if root:
        import threading

        threading.setprofile(_profile(os.path.abspath(root)))
        sys.setprofile(_profile(os.path.abspath(root)))


def pytest_sessionfinish(session, exitstatus) -> None:  # noqa: ANN001
    sys.setprofile(None)
    path = os.environ.get("M1FLOW_OUTCOMES")
    if path:
        with open(path, "w") as out:
            json.dump({"tests": _outcomes, "called": sorted(_called)}, out)
