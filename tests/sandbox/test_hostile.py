"""Hostile programs are contained by the local jail: right verdict, and the host is unaffected.

Limits are small (1 s CPU, 3 s wall, 32 processes, 128 MB) so the suite is quick and cannot hurt a
2-core machine shared with others. Every program gets a unique token in its argv so the test can
look for its processes on the host afterwards.
"""
from __future__ import annotations

import errno
import io
import os
import socket
import threading
import time
import uuid
import zipfile

import psutil
import pytest

from m1flow.status import Status
from svc_sandbox.api import MB, ExecRequest, ExecResult, Limits
from svc_sandbox.backends.jail import JailBackend, JailConfig
from svc_sandbox.sandbox import Sandbox

LIMITS = Limits(cpu_seconds=1, wall_seconds=3, memory_bytes=128 * MB, max_processes=32,
                max_file_bytes=16 * MB, work_dir_bytes=64 * MB, max_output_bytes=256 * 1024)


def host_processes_with(token: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(token in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def hostile(sandbox: Sandbox, code: str, limits: Limits = LIMITS, **kw) -> tuple[ExecResult, str]:
    token = f"m1flow-hostile-{uuid.uuid4().hex}"
    result = sandbox(ExecRequest(code=code, argv=[token], limits=limits, **kw))
    return result, token


def assert_no_leftovers(token: str) -> None:
    """Checked right away: a run returns only once every process it started is gone."""
    assert host_processes_with(token) == [], "a jailed process outlived its run"


# The daemons the programs below start run SLEEP with the run's token as their argument. A process
# counts once it has exec'd that command line: a forked child that has not exec'd yet still carries
# its parent's argv (the token too), and counting it was a race (issue 40).
COUNT_MINE = """
SLEEP = "import time; time.sleep(300)"
def count_mine():
    import glob, sys
    mark = (SLEEP + "\\0" + sys.argv[1] + "\\0").encode()
    count = 0
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            count += mark in open(path, "rb").read()
        except OSError:
            pass
    return count
"""


@pytest.fixture(params=["cgroups", "rlimits-only"])
def any_jail(request, jail_sandbox) -> Sandbox:
    """The jail as configured here, and without cgroups (the fallback on other machines)."""
    if request.param == "cgroups":
        return jail_sandbox
    return Sandbox(JailBackend(JailConfig(use_cgroups=False)))


FORK_BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""

COUNTED_FORKS = """
import os, time
children = 0
for _ in range(1000):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children += 1
print(children)
"""


def test_fork_bomb_is_capped_and_killed(any_jail):
    result, token = hostile(any_jail, FORK_BOMB)
    assert result.status is Status.TIME_LIMIT, result
    assert result.wall_seconds < LIMITS.wall_seconds + 2
    assert_no_leftovers(token)


def test_process_count_is_limited(any_jail):
    result, token = hostile(any_jail, COUNTED_FORKS)
    assert result.status is Status.OK, result
    children = int(result.stdout_text)
    assert 0 < children < LIMITS.max_processes  # the sleeping children died with the run
    assert_no_leftovers(token)


def test_memory_bomb_in_one_process(jail_sandbox):
    result, _ = hostile(jail_sandbox, "x = []\nwhile True:\n    x.append(bytearray(10 << 20))")
    assert result.status is Status.MEMORY_LIMIT, result


def test_memory_bomb_spread_over_processes_hits_the_cgroup(jail_sandbox):
    """Each child stays under the per-process address-space limit; together they do not."""
    jail = jail_sandbox.backend
    if not (jail.cgroups and "memory" in jail.cgroups.bases):
        pytest.skip(f"no memory cgroup here: {jail.note}")
    code = """
import os, sys
kids = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        block = bytearray(100 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        os._exit(0)
    kids.append(pid)
statuses = [os.waitpid(pid, 0)[1] for pid in kids]
sys.exit(1 if any(os.WIFSIGNALED(s) for s in statuses) else 0)
"""
    result, token = hostile(jail_sandbox, code)
    assert result.status is Status.MEMORY_LIMIT, result
    cap = LIMITS.memory_bytes + LIMITS.work_dir_bytes + jail.config.tmp_bytes
    assert 0 < result.memory_peak_bytes <= cap
    assert_no_leftovers(token)


def test_infinite_loop_hits_the_cpu_limit(jail_sandbox):
    result, _ = hostile(jail_sandbox, "while True:\n    pass")
    assert result.status is Status.TIME_LIMIT, result
    assert result.cpu_seconds <= LIMITS.cpu_seconds + 1.0


def test_sleeping_past_the_deadline(jail_sandbox):
    result, token = hostile(jail_sandbox, "import time\ntime.sleep(60)")
    assert result.status is Status.TIME_LIMIT
    assert LIMITS.wall_seconds <= result.wall_seconds < LIMITS.wall_seconds + 1.5
    assert_no_leftovers(token)


def test_background_process_does_not_outlive_its_run(any_jail):
    code = COUNT_MINE + """
import os, subprocess, sys, time
SLEEPER = [sys.executable, "-c", SLEEP, sys.argv[1]]
subprocess.Popen(SLEEPER, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
middle = os.fork()          # a classic double-forked daemon too
if middle == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, SLEEPER)
    os._exit(0)
os.waitpid(middle, 0)
while count_mine() < 2:    # both daemons exec'd before the parent leaves (the run's wall limit bounds it)
    time.sleep(0.02)
print("daemons", count_mine())
"""
    result, token = hostile(any_jail, code, LIMITS.model_copy(update={"wall_seconds": 10}))
    assert result.status is Status.OK and result.stdout_text == "daemons 2\n", result
    assert_no_leftovers(token)


def test_daemon_is_killed_at_the_deadline_too(any_jail):
    code = COUNT_MINE + """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", SLEEP, sys.argv[1]], start_new_session=True)
while count_mine() < 1:
    time.sleep(0.02)
print("daemon up", flush=True)
time.sleep(60)
"""
    result, token = hostile(any_jail, code)
    assert result.status is Status.TIME_LIMIT and result.stdout_text == "daemon up\n"
    assert_no_leftovers(token)


def test_no_network_to_the_host_or_outside(jail_sandbox):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    code = f"""
import socket
for host, port in [("127.0.0.1", {port}), ("1.1.1.1", 53), ("8.8.8.8", 443)]:
    try:
        socket.create_connection((host, port), timeout=1).close()
        print("connected", host)
    except OSError as err:
        print("blocked", host)
"""
    try:
        result, _ = hostile(jail_sandbox, code)
        assert result.status is Status.OK, result
        assert result.stdout_text.split("\n")[:3] == ["blocked 127.0.0.1", "blocked 1.1.1.1", "blocked 8.8.8.8"]
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


def test_writes_outside_the_work_dir_fail_and_the_host_is_untouched(jail_sandbox, tmp_path):
    open_dir = tmp_path / "world-writable"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    token = uuid.uuid4().hex
    targets = [str(open_dir / "pwned"), "/usr/pwned", "/etc/pwned", "/pwned", "/root/pwned",
               "/proc/sys/kernel/hostname"]
    code = f"""
for path in {targets!r}:
    try:
        with open(path, "w") as f:
            f.write("x")
        print("wrote", path)
    except OSError:
        print("refused", path)
open("/tmp/{token}", "w").write("private tmp is fine")
open("/sandbox/{token}", "w").write("work dir is fine")
"""
    result = jail_sandbox(ExecRequest(code=code, limits=LIMITS))
    assert result.status is Status.OK, result
    assert result.stdout_text.split("\n")[:-1] == [f"refused {t}" for t in targets]
    assert not (open_dir / "pwned").exists()
    assert not os.path.exists(f"/tmp/{token}") and not os.path.exists(f"/sandbox/{token}")


def test_runs_cannot_read_each_others_files(jail_sandbox):
    token = uuid.uuid4().hex
    writer = f"""
import time
open("/sandbox/secret-{token}", "w").write("s3cret")
open("/tmp/secret-{token}", "w").write("s3cret")
print("written", flush=True)
time.sleep(2)
"""
    reader = f"""
import glob, os
hits = glob.glob("/sandbox/*{token}*") + glob.glob("/tmp/*{token}*") + glob.glob("/proc/*/root/*/*{token}*")
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        hits += [e for e in os.listdir(f"/proc/{{pid}}/cwd") if "{token}" in e]
    except OSError:
        pass
print(len(hits))
"""
    slow = LIMITS.model_copy(update={"wall_seconds": 5})
    results: dict[str, ExecResult] = {}
    thread = threading.Thread(target=lambda: results.update(w=jail_sandbox(ExecRequest(code=writer, limits=slow))))
    thread.start()
    time.sleep(1.0)
    results["r"] = jail_sandbox(ExecRequest(code=reader, limits=LIMITS))
    thread.join()
    assert results["w"].stdout_text == "written\n"
    assert results["r"].status is Status.OK and results["r"].stdout_text == "0\n", results["r"]


def test_secret_host_files_stay_unreadable(jail_sandbox):
    code = """
for path in ["/etc/shadow", "/root/.bash_history", "/work/shared/notes/rewards.md"]:
    try:
        open(path).read()
        print("read", path)
    except OSError:
        print("refused", path)
"""
    result = jail_sandbox(ExecRequest(code=code, limits=LIMITS))
    assert result.stdout_text.split() == ["refused", "/etc/shadow", "refused", "/root/.bash_history",
                                          "refused", "/work/shared/notes/rewards.md"]


def test_100_mb_of_output_is_cut(jail_sandbox):
    code = "import sys\nchunk = b'y' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.buffer.write(chunk)"
    result, token = hostile(jail_sandbox, code)
    assert result.status is Status.OUTPUT_LIMIT
    assert len(result.stdout) == LIMITS.max_output_bytes and set(result.stdout) == {ord("y")}
    assert result.wall_seconds < LIMITS.wall_seconds
    assert_no_leftovers(token)


def zip_bomb(entries: int, entry_bytes: int) -> bytes:
    buffer = io.BytesIO()
    zeros = b"\0" * entry_bytes
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for i in range(entries):
            archive.writestr(f"zeros-{i}.bin", zeros)
    return buffer.getvalue()


def test_zip_bomb_is_bounded_by_file_size_and_work_dir_size(jail_sandbox):
    bomb = zip_bomb(entries=6, entry_bytes=24 * MB)  # 144 MB unpacked, a few hundred KB packed
    assert len(bomb) < 2 * MB
    code = """
import errno, os, zipfile
seen = set()
with zipfile.ZipFile("bomb.zip") as archive:
    for name in archive.namelist():
        try:
            archive.extract(name, "out")
        except OSError as err:
            seen.add(err.errno)
sizes = [os.path.getsize(os.path.join("out", n)) for n in os.listdir("out")]
print(max(sizes), sum(sizes), sorted(seen))
"""
    result = jail_sandbox(ExecRequest(code=code, files={"bomb.zip": bomb}, limits=LIMITS))
    assert result.status is Status.OK, result
    largest, total, errors = result.stdout_text.split(maxsplit=2)
    assert int(largest) <= LIMITS.max_file_bytes
    assert int(total) <= LIMITS.work_dir_bytes
    assert str(errno.EFBIG) in errors and str(errno.ENOSPC) in errors


SPREAD_CPU = """
import os
for _ in range(3):          # four busy processes, each far under the per-process CPU rlimit
    if os.fork() == 0:
        break
while True:
    pass
"""


def test_cpu_time_is_the_whole_runs_not_each_processes(jail_sandbox):
    """Four processes share one CPU budget: the run stops when their sum reaches it, not 4x later."""
    jail = jail_sandbox.backend
    if not (jail.cgroups and "cpuacct" in jail.cgroups.bases):
        pytest.skip(f"no cpuacct cgroup here: {jail.note}")
    limits = LIMITS.model_copy(update={"cpu_seconds": 1.0, "wall_seconds": 60.0, "cpus": 2.0})
    result, token = hostile(jail_sandbox, SPREAD_CPU, limits=limits)
    assert result.status is Status.TIME_LIMIT and "CPU time of the run" in result.detail, result
    assert 1.0 <= result.cpu_seconds < 2.0, result  # the run's total, over the limit by at most a poll
    assert_no_leftovers(token)


FAILED_SETUPS = """
import os, sys
from m1flow.status import Status
from svc_sandbox.backends.jail import JailBackend
from tests.sandbox.test_hostile import LIMITS

jail = JailBackend()
before = len(os.listdir("/proc/self/fd"))
for files in ({"ok.py": b"1", "nul\\0name": b"x"}, {"ok.py": b"1", "n" * 300: b"x"}):
    for _ in range(20):
        assert jail.run(["/bin/true"], files, b"", LIMITS).status is Status.SANDBOX_ERROR
huge = LIMITS.model_copy(update={"wall_seconds": 1e300, "cpu_seconds": 1e300})
for _ in range(10):
    jail.run(["/bin/true"], {"ok.py": b"1"}, b"", huge)
print(before, len(os.listdir("/proc/self/fd")))
"""


def test_a_failed_setup_releases_every_descriptor():
    """Bad input that slips past validation fails the run, and takes nothing with it. Counted in a
    process of its own: in the test worker, other tests' clients open and close sockets meanwhile."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", FAILED_SETUPS], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    before, after = map(int, out.stdout.split())
    assert after == before
