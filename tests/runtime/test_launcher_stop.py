"""A stopped service takes its whole process group with it, not only the process it was started as.

torchrun (the learner's data-parallel entry) exits on SIGTERM while a rank can still be in its own
shutdown; a stress run found such a rank alive 32 minutes after its test had ended. The stand-in here:
a leader that exits on SIGTERM and a child that ignores it.
"""
from __future__ import annotations

import sys
import time

from ops.launcher import ServiceProcess, group_members

LEADER = """
import signal, subprocess, sys, time
subprocess.Popen([sys.executable, "-c",
                  "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('child', flush=True); "
                  "time.sleep(600)"])
time.sleep(600)
"""


def test_a_child_that_outlives_its_leaders_sigterm_is_killed_with_the_group(tmp_path):
    proc = ServiceProcess("learner", 0, tmp_path, [], {}, [sys.executable, "-c", LEADER]).start()
    deadline = time.monotonic() + 60
    while "child" not in proc.tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(group_members(proc.proc.pid)) == 2, proc.tail()
    started = time.monotonic()
    proc.stop(timeout=1.0)
    assert group_members(proc.proc.pid) == []
    assert time.monotonic() - started < 15  # the leader's exit, a second of grace, then SIGKILL


def test_a_group_that_exits_on_sigterm_is_not_waited_on(tmp_path):
    proc = ServiceProcess("learner", 0, tmp_path, [], {}, [sys.executable, "-c", "import time; time.sleep(600)"]).start()
    started = time.monotonic()
    proc.stop(timeout=30.0)
    assert group_members(proc.proc.pid) == [] and time.monotonic() - started < 10
