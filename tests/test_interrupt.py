"""ops.interrupt: a stop signal raises where the main thread is (the reason `m1flow up` now stops during a
warm start or a broker's start), waits for the end of a deferred section, and exits at once the second
time. Real signals, sent to this process (or to a child running the same code)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ops import ROOT
from ops.interrupt import Interrupted, deferred, received, stop_signals


def test_a_stop_signal_raises_in_the_main_thread_wherever_it_waits():
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals("test"):
        with pytest.raises(Interrupted) as caught:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # a blocking wait: interrupted, not sat out
        assert (caught.value.name, caught.value.exit_code, received()) == ("SIGTERM", 143, signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before and received() is None  # the handlers are put back


def test_a_signal_inside_a_deferred_section_is_raised_as_it_ends():
    done = []
    with stop_signals("test"):
        with pytest.raises(Interrupted) as caught:
            with deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)  # the handler runs here, and must not raise yet
                done.append("recorded")
        assert done == ["recorded"] and caught.value.exit_code == 130


def test_a_second_signal_exits_at_once_with_its_code():
    """The first starts a graceful stop that takes long; the second ends the process there."""
    code = ("import os, signal, time\n"
            "from ops.interrupt import Interrupted, stop_signals\n"
            "with stop_signals('prog'):\n"
            "    try:\n"
            "        os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)\n"
            "    except Interrupted:\n"
            "        os.kill(os.getpid(), signal.SIGINT); time.sleep(30)  # a stop that would take long\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=25)
    assert (out.returncode, out.stderr) == (130, "prog: second SIGINT: exiting now\n")


def test_a_signal_during_a_deferred_stop_waits_for_it_and_a_second_one_does_not():
    """The stop under way finishes, then the signal is raised; a second signal meanwhile exits at once."""
    code = ("import os, signal, sys, time\n"
            "from ops.interrupt import Interrupted, deferred, stop_signals\n"
            "with stop_signals('prog'):\n"
            "    try:\n"
            "        with deferred():\n"
            "            os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.2); print('stop finished', flush=True)\n"
            "    except Interrupted as stop:\n"
            "        print('raised after it', stop.name, flush=True)\n"
            "    with deferred():\n"
            "        os.kill(os.getpid(), signal.SIGINT); time.sleep(30)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=25)
    assert out.stdout == "stop finished\nraised after it SIGTERM\n"
    assert (out.returncode, out.stderr) == (130, "prog: second SIGINT: exiting now\n")
