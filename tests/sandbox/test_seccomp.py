"""Runs share nothing through the kernel: the system-call filter, and a uid of each run's own.

The filter is checked call by call as root (where a permission check would not explain an
EPERM) and inside the jail; each uid-keyed channel is shown to exist without the protections
(so the test would catch a leak) and to be closed with them.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from m1flow.status import Status
from svc_sandbox.api import ExecRequest, ExecResult, Limits
from svc_sandbox.backends import seccomp
from svc_sandbox.backends.base import Cancel, UidRange
from svc_sandbox.backends.jail import JailBackend, JailConfig
from svc_sandbox.sandbox import Sandbox
from tests.sandbox.test_hostile import host_processes_with

PROBE = Path(__file__).with_name("seccomp_probe.py")
ROOT = Path(__file__).parents[2]
LIMITS = Limits(cpu_seconds=2, wall_seconds=30, max_processes=64)
TEST_UIDS = 1_999_000_000  # a range of the tests' own, below the service's default one

KEYS = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
USER_KEYRING, USER_SESSION_KEYRING = -4, -5
def call(*args):
    ctypes.set_errno(0)
    value = libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return value if value != -1 else -ctypes.get_errno()
action, name = sys.argv[1], sys.argv[2].encode()
if action == "write":
    for ring in (USER_KEYRING, USER_SESSION_KEYRING):
        print(call(248, ctypes.c_char_p(b"user"), ctypes.c_char_p(name), ctypes.c_char_p(b"secret"), 6, ring))
elif action == "read":
    for ring in (USER_KEYRING, USER_SESSION_KEYRING):
        print(call(250, 10, ring, ctypes.c_char_p(b"user"), ctypes.c_char_p(name), 0))  # KEYCTL_SEARCH
else:
    for ring in (USER_KEYRING, USER_SESSION_KEYRING):
        print(call(250, 7, ring))  # KEYCTL_CLEAR
"""


def probe(*flags: str) -> dict[str, int]:
    """errno of each denied call, from a fresh root process with no controlling terminal."""
    done = subprocess.run([sys.executable, str(PROBE), *flags], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL,
                          start_new_session=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def root_only():
    if os.geteuid() != 0 or seccomp.available():
        pytest.skip(f"needs root and libseccomp: {seccomp.available() or 'not root'}")


def test_every_denied_call_fails_with_eperm_under_the_filter_even_for_root(root_only):
    filtered, plain = probe("--filter"), probe()
    resolvable = {name for name in seccomp.DENIED if seccomp._lib().seccomp_syscall_resolve_name(name.encode()) >= 0}
    probed = {label.split()[0] for label in filtered}
    assert resolvable - {"create_module", "lookup_dcookie", "uselib", "ustat", "_sysctl", "get_kernel_syms",
                         "query_module", "nfsservctl", "quotactl_fd"} <= probed  # the obsolete ones: ENOSYS anyway
    assert {label: code for label, code in filtered.items() if code != errno.EPERM} == {"clone3": errno.ENOSYS}
    assert [label for label, code in plain.items() if code == errno.EPERM] == [], plain  # so the filter did it
    assert plain["add_key"] == 0 and plain["unshare"] == 0 and plain["clone3"] != errno.ENOSYS


def test_ordinary_programs_and_fork_still_work_under_the_filter(jail_sandbox):
    code = ("import os, subprocess, threading\n"
            "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n    os._exit(7)\n"
            "print('child', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
            "print(subprocess.run(['/bin/sh', '-c', 'echo spawned'], capture_output=True, text=True).stdout.strip())\n")
    r = jail_sandbox(ExecRequest(code=code, limits=LIMITS))
    assert (r.status, r.stdout_text) == (Status.OK, "thread\nchild 7\nspawned\n"), r


def test_32_bit_and_x32_system_calls_are_killed(jail_sandbox):
    """Other entry points number calls differently; the filter kills them rather than misread them."""
    code = r"""
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(int argc, char **argv) {
    long r;
    if (argv[1][0] == 'i') __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");  /* i386 getpid */
    else r = syscall(0x40000000L | 39);  /* x32 getpid */
    printf("survived %ld\n", r);
    return 0;
}
"""
    for entry in ("i386", "x32"):
        r = jail_sandbox(ExecRequest(language="c", code=code, argv=[entry], limits=LIMITS))
        assert (r.status, r.signal, r.stdout) == (Status.RUNTIME_ERROR, signal.SIGSYS, b""), r


def keyring_run(sandbox: Sandbox, action: str, name: str) -> list[int]:
    r = sandbox(ExecRequest(code=KEYS, argv=[action, name], limits=LIMITS))
    assert r.status is Status.OK, r
    return [int(line) for line in r.stdout_text.split()]


def test_keyring_data_left_by_a_run_is_invisible_to_the_next(jail_sandbox):
    name = f"m1flow-{uuid.uuid4().hex}"
    assert keyring_run(jail_sandbox, "write", name) == [-errno.EPERM, -errno.EPERM]
    assert keyring_run(jail_sandbox, "read", name) == [-errno.EPERM, -errno.EPERM]


def test_without_the_filter_the_keyring_is_a_channel_between_runs_of_one_uid_only():
    """The channel is real (same uid, no filter: the next run reads the key); a uid per run closes it."""
    if JailBackend.missing():
        pytest.skip(f"local jail unavailable: {JailBackend.missing()}")
    name = f"m1flow-{uuid.uuid4().hex}"
    one_uid = Sandbox(JailBackend(JailConfig(seccomp=False, uids=UidRange(first=TEST_UIDS, count=1))))
    try:
        assert all(key > 0 for key in keyring_run(one_uid, "write", name))
        assert all(key > 0 for key in keyring_run(one_uid, "read", name))  # leaked to the next run
    finally:
        keyring_run(one_uid, "clear", name)
    assert keyring_run(one_uid, "read", name) == [-errno.ENOKEY, -errno.ENOKEY]
    two_uids = Sandbox(JailBackend(JailConfig(seccomp=False, uids=UidRange(first=TEST_UIDS + 10, count=2))))
    try:
        assert all(key > 0 for key in keyring_run(two_uids, "write", name))  # uid A
        assert keyring_run(two_uids, "read", name) == [-errno.ENOKEY, -errno.ENOKEY]  # uid B sees nothing
    finally:
        keyring_run(two_uids, "clear", name)  # uid A again: leave the kernel as we found it


def test_runs_at_once_and_runs_in_a_row_have_different_uids(jail_sandbox):
    code = "import os, sys, time\nprint(os.getuid(), os.getgid())\nsys.stdout.flush()\ntime.sleep(float(sys.argv[1]))"
    results: list[ExecResult] = []

    def run(pause: str) -> None:
        results.append(jail_sandbox(ExecRequest(code=code, argv=[pause], limits=LIMITS)))

    threads = [threading.Thread(target=run, args=("1.0",)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run("0")
    run("0")
    uids = [r.stdout_text.split() for r in results]
    assert all(r.status is Status.OK for r in results), results
    assert all(uid == gid for uid, gid in uids) and len({uid for uid, _ in uids}) == 4, uids


class OneUidForAll:
    """What the jail did before uids per run: every run, even at once, as the same uid."""

    def __init__(self, uid: int) -> None:
        self.uid = uid

    @contextmanager
    def lease(self) -> Iterator[int]:
        yield self.uid


def forks_beside_a_hog(sandbox: Sandbox) -> int:
    """How many processes a run can fork while another run holds 21 (the limit is 24 each)."""
    limits = Limits(cpu_seconds=5, wall_seconds=60, max_processes=24)
    token = f"m1flow-hog-{uuid.uuid4().hex}"
    hog = ("import os, time\nfor _ in range(20):\n    if os.fork() == 0:\n        time.sleep(60)\n        os._exit(0)\n"
           "time.sleep(60)")
    counter = ("import os, time\nn = 0\nwhile n < 100:\n    try:\n        pid = os.fork()\n    except OSError:\n"
               "        break\n    if pid == 0:\n        time.sleep(3)\n        os._exit(0)\n    n += 1\nprint(n)")
    stop = Cancel()
    hog_thread = threading.Thread(target=sandbox.execute, args=(ExecRequest(code=hog, argv=[token], limits=limits), stop))
    hog_thread.start()
    try:
        give_up = time.monotonic() + 30
        while len(host_processes_with(token)) < 21 and time.monotonic() < give_up:  # the hog and its 20 children
            time.sleep(0.05)
        assert len(host_processes_with(token)) >= 21
        counted = sandbox(ExecRequest(code=counter, limits=limits))
    finally:
        stop.set()
        hog_thread.join()
    assert counted.status is Status.OK, counted
    return int(counted.stdout_text)


def test_process_limit_of_one_run_is_not_eaten_by_another():
    """Without a pids cgroup the process limit is RLIMIT_NPROC, counted per uid: a uid per run keeps it per run."""
    if JailBackend.missing():
        pytest.skip(f"local jail unavailable: {JailBackend.missing()}")
    jail = JailBackend(JailConfig(use_cgroups=False, uids=UidRange(first=TEST_UIDS + 20, count=4)))
    assert forks_beside_a_hog(Sandbox(jail)) >= 20
    jail.uids = OneUidForAll(TEST_UIDS + 30)
    assert forks_beside_a_hog(Sandbox(jail)) < 5  # the channel the uid per run closes
