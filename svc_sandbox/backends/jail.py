"""The local jail: bubblewrap namespaces + seccomp + rlimits + per-run cgroups, for machines without Docker.

How a run is built, outermost first (all execs, no Python in the child):

  sh (joins the run's cgroups)  ->  bwrap (new pid, net, ipc, uts, mount namespaces; read-only
  system; private tmpfs work dir and /tmp; the seccomp filter)  ->  setpriv (drop to the run's
  own uid, no capabilities)  ->  prlimit (CPU, address space, file size, open files, processes)
  ->  sh (reports "started")  ->  the program.

Why bwrap runs as root without a user namespace: bwrap 0.8 only sets a uid through a user
namespace, and one created by root maps the sandbox user onto host root, which would make
RLIMIT_NPROC void and every root-owned file the program's own. Dropping to a real, unprivileged
uid inside the jail keeps the program an ordinary user of the host kernel; each run has a uid of
its own (`UidPool`), so nothing the kernel keys by uid is shared between runs.
Why a "started" byte: a setup failure is our fault (SANDBOX_ERROR, dropped by the learner) while a
program failure scores 0; the program cannot fake the byte because it is written before exec.
The whole tree dies at the deadline, when the run's CPU time (its cgroup's, all processes
together) reaches the limit, and when the caller stops waiting: we SIGKILL bwrap's process group,
bwrap's pid 1 in the namespace has PDEATHSIG, and when a pid namespace loses its pid 1 the kernel
kills every process in it, daemons included; the run's cgroup is emptied as well.
"""
from __future__ import annotations

import math
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field

from m1flow.data.swe_env import Env
from svc_sandbox.api import MB, ExecResult, Limits
from svc_sandbox.backends import seccomp
from svc_sandbox.backends.base import (WORK_DIR, BoundedOutput, Cancel, RunOutcome, UidPool, UidRange,
                                       announce_start, classify)
from svc_sandbox.backends.cgroups import CgroupManager, RunCgroup

_SYSTEM_PATHS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_READ_CHUNK = 1 << 16
_MAX_WAIT_S = 60.0  # one select() at most; the loop goes on (and epoll cannot take huge timeouts)


class JailConfig(BaseModel):
    bwrap: str = Field("bwrap", description="bubblewrap binary")
    python: str = Field(sys.executable, description="interpreter offered to Python programs")
    extra_ro_paths: list[str] = Field(default_factory=list, description="more host paths, read-only")
    tmp_bytes: int = Field(16 * MB, gt=0, description="size of the private /tmp")
    use_cgroups: bool = Field(True, description="per-run memory/pids/cpu cgroups where cgroup v1 allows")
    cgroup_name: str = Field("m1flow-sandbox", description="parent of the run cgroups, under our own")
    seccomp: bool = Field(True, description="the system-call filter (backends/seccomp.py); needs libseccomp")
    uids: UidRange = Field(default_factory=UidRange, description="each run's own uid comes from here")


def _python_prefixes(python: str) -> list[str]:
    """Directories the interpreter needs (venv and base installation) so the jail can mount them."""
    out = subprocess.run([python, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                         capture_output=True, text=True, timeout=30, check=True).stdout.split()
    return [os.path.realpath(p) for p in out] + [os.path.dirname(os.path.realpath(python))]


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _mount_args(config: JailConfig, more: Sequence[str] = ()) -> list[str]:
    """Read-only system plus the interpreter (and `more`: a run's environment); the parents of deep
    mounts are made traversable."""
    args: list[str] = []
    mounted: list[str] = []
    for path in _SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
            mounted.append(path)
    extra = [os.path.realpath(p) for p in [*_python_prefixes(config.python), *config.extra_ro_paths, *more]]
    for path in sorted(set(extra), key=len):
        if _under(path, mounted) or not os.path.exists(path):
            continue
        for parent in reversed(PurePosixPath(path).parents[:-1]):
            args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", path, path]
        mounted.append(path)
    return args


def _memfd(name: str, data: bytes) -> int:
    """An anonymous in-memory file holding data: bwrap copies it into the jail's tmpfs."""
    fd = os.memfd_create(name, 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class JailBackend:
    """Runs each command in a fresh bubblewrap jail. Needs root (to drop to the run's uid) and bwrap."""

    name = "jail"

    def __init__(self, config: JailConfig | None = None):
        self.config = config or JailConfig()
        self.python = self.config.python
        self._mounts = _mount_args(self.config)
        self._env_mounts: dict[Path, list[str]] = {}  # an environment's folder -> the mounts of its runs
        self._filter = seccomp.filter_bpf() if self.config.seccomp else None
        self.uids = UidPool(self.config.uids)
        self.cgroups = CgroupManager(self.config.cgroup_name) if self.config.use_cgroups else None

    @staticmethod
    def missing(config: JailConfig | None = None) -> list[str]:
        """What this machine lacks for the jail (empty when it can run)."""
        config = config or JailConfig()
        needed = [config.bwrap, "setpriv", "prlimit", "sh"]
        lacks = [tool for tool in needed if shutil.which(tool) is None]
        if config.seccomp and (why := seccomp.available()):
            lacks.append(why)
        if os.geteuid() != 0:
            lacks.append("root (the jail drops to an unprivileged uid itself)")
        return lacks

    @property
    def note(self) -> str:
        return self.cgroups.note if self.cgroups else "cgroups disabled; rlimits only"

    def _mounts_with(self, env_dir: Path | None) -> list[str]:
        """The read-only mounts of a run: the system and interpreter, and a repository environment with
        the base installation and site-packages its interpreter needs (Env.host_paths), read-only too."""
        if env_dir is None:
            return self._mounts
        if env_dir not in self._env_mounts:
            if len(self._env_mounts) >= 256:
                self._env_mounts.clear()
            paths = Env(Path(env_dir), Path(env_dir).name, built=False).host_paths()
            self._env_mounts[env_dir] = _mount_args(self.config, [str(p) for p in paths])
        return self._env_mounts[env_dir]

    def _bwrap_args(self, argv: Sequence[str], file_fds: Mapping[str, int], limits: Limits, uid: int,
                    use_nproc: bool, status_fd: int, filter_fd: int | None,
                    env_dir: Path | None = None) -> list[str]:
        namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        if not limits.network:
            namespaces.append("--unshare-net")
        args = [self.config.bwrap, *namespaces, "--die-with-parent", "--new-session",
                "--json-status-fd", str(status_fd),
                "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
                # the private /tmp first, then the read-only mounts: an interpreter under /tmp (a venv
                # cached there) stays visible instead of being covered by the tmpfs
                "--size", str(self.config.tmp_bytes), "--tmpfs", "/tmp", *self._mounts_with(env_dir),
                "--chmod", "1777", "/tmp",
                "--proc", "/proc", "--dev", "/dev",
                "--size", str(limits.work_dir_bytes), "--tmpfs", WORK_DIR]
        if filter_fd is not None:
            args += ["--seccomp", str(filter_fd)]
        made: set[str] = set()
        for name, fd in file_fds.items():
            for parent in reversed(PurePosixPath(name).parents[:-1]):
                if str(parent) not in made:
                    made.add(str(parent))
                    args += ["--perms", "0777", "--dir", f"{WORK_DIR}/{parent}"]
            args += ["--perms", "0777", "--file", str(fd), f"{WORK_DIR}/{name}"]
        args += ["--chmod", "0777", WORK_DIR, "--chdir", WORK_DIR, "--clearenv",
                 "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", WORK_DIR,
                 "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8",
                 "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--"]
        cpu = max(1, math.ceil(limits.cpu_seconds))
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--",
                 "prlimit", f"--cpu={cpu}:{cpu + 1}", f"--as={limits.memory_bytes}",
                 f"--fsize={limits.max_file_bytes}", f"--nofile={limits.max_open_files}", "--core=0"]
        if use_nproc:
            args.append(f"--nproc={limits.max_processes}")
        return args + ["--", *announce_start(argv)]

    def run(self, argv: Sequence[str], files: Mapping[str, bytes], stdin: bytes,
            limits: Limits, cancel: Cancel | None = None, env_dir: Path | None = None) -> ExecResult:
        """Every fd, the cgroup and the uid this takes are released on every path, errors included."""
        with ExitStack() as held:
            try:
                uid = held.enter_context(self.uids.lease())
                cgroup: RunCgroup | None = None
                if self.cgroups and self.cgroups.bases:
                    cgroup = self.cgroups.create(limits, self.config.tmp_bytes + limits.work_dir_bytes)
                    held.callback(cgroup.remove)
                file_fds = {name: held.enter_context(_Fd(_memfd("file", data))) for name, data in files.items()}
                stdin_fd = held.enter_context(_Fd(_memfd("stdin", stdin)))
                filter_fd = held.enter_context(_Fd(_memfd("seccomp", self._filter))) if self._filter else None
                status_r, status_w = (held.enter_context(_Fd(fd)) for fd in os.pipe())
                use_nproc = not (self.cgroups and self.cgroups.has_pids)
                args = self._bwrap_args(argv, file_fds, limits, uid, use_nproc, status_w, filter_fd, env_dir)
                env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
                if cgroup is not None:  # join before bwrap starts, so nothing can fork outside
                    join = 'for f in $M1_CGROUP_PROCS; do echo $$ > "$f" || exit 1; done; exec "$@"'
                    args = ["/bin/sh", "-c", join, "sh", *args]
                    env["M1_CGROUP_PROCS"] = " ".join(cgroup.procs_files)
                passed = [*file_fds.values(), status_w] + ([filter_fd] if filter_fd is not None else [])
                start = time.monotonic()
                proc = subprocess.Popen(args, stdin=stdin_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        pass_fds=passed, env=env, start_new_session=True)
                return self._supervise(proc, start, limits, cgroup, status_r, cancel)
            except (OSError, subprocess.SubprocessError, ValueError) as err:
                return ExecResult.sandbox_error(f"jail: {type(err).__name__}: {err}")

    def _supervise(self, proc: subprocess.Popen, start: float, limits: Limits,
                   cgroup: RunCgroup | None, status_fd: int, cancel: Cancel | None) -> ExecResult:
        """Collect bounded output until exit, a limit or cancellation; kill the tree if needed; classify.

        The process is reaped and its pipes closed on every path, exceptions included.
        """
        out: _Collector | None = None
        status: int | None = None
        try:
            out = _Collector(proc, limits.max_output_bytes)
            stopped = out.collect(start + limits.wall_seconds, limits, cgroup, cancel)
            if stopped or out.overflow:
                _kill_tree(proc, cgroup)
            _, status = os.waitpid(proc.pid, 0)
            wall = time.monotonic() - start
            _wait_for_namespace_end(status_fd)
            out.drain()
        finally:
            if status is None:
                _kill_tree(proc, cgroup)
                os.waitpid(proc.pid, 0)
            proc.returncode = -1 if status is None else os.waitstatus_to_exitcode(status)
            if out is not None:
                out.close()
            proc.stdout.close()
            proc.stderr.close()
        if cgroup is not None:
            cgroup.kill_all()
        cpu = cgroup.cpu_seconds() if cgroup else None
        cpu = 0.0 if cpu is None else cpu  # rusage cannot see inside: bwrap never reaps its pid 1
        return classify(RunOutcome(
            started=out.started, timed_out=stopped == "wall", overflow=out.overflow,
            exit_code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            stdout=bytes(out.stdout), stderr=bytes(out.stderr), wall=wall, cpu=cpu,
            memory_peak=cgroup.memory_peak() if cgroup else 0, cpu_exceeded=stopped == "cpu",
            cancelled=stopped == "cancel", oom_killed=bool(cgroup and cgroup.oom_kills()), note=self.note), limits)


class _Fd:
    """An open file descriptor as a context manager: closed on exit, whatever happened."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


class _Collector(BoundedOutput):
    """Reads a run's stdout and stderr, keeping at most `limit` bytes of each.

    The first stdout byte is the jail's own "started" marker, written before the program is exec'd.
    """

    def __init__(self, proc: subprocess.Popen, limit: int):
        super().__init__(limit)
        self.exited = False
        self.sel = selectors.DefaultSelector()
        self.pidfd: int | None = None
        try:
            self.sel.register(proc.stdout, selectors.EVENT_READ, self.stdout)
            self.sel.register(proc.stderr, selectors.EVENT_READ, self.stderr)
            self.pidfd = os.pidfd_open(proc.pid)
            self.sel.register(self.pidfd, selectors.EVENT_READ, None)
        except BaseException:
            self.close()
            raise

    def _read(self, key: selectors.SelectorKey) -> None:
        data = os.read(key.fd, _READ_CHUNK)
        if not data:
            self.sel.unregister(key.fileobj)
            return
        self.add(key.data, data)

    def _streams(self) -> list[selectors.SelectorKey]:
        return [key for key in self.sel.get_map().values() if key.data is not None]

    def collect(self, deadline: float, limits: Limits, cgroup: RunCgroup | None,
                cancel: Cancel | None) -> str:
        """Read until the process exits and its pipes close (""), or why we must stop it:
        "wall" (deadline), "cpu" (the run's CPU time reached the limit) or "cancel"."""
        cpu_rate = limits.cpus if cgroup is not None and "cpu" in cgroup.dirs else float(os.cpu_count() or 1)
        cpu_check = time.monotonic() + limits.cpu_seconds / cpu_rate  # the first moment the limit can be hit
        while not self.overflow:
            if self.exited and not self._streams():
                return ""
            now = time.monotonic()
            if now >= deadline:
                return "wall"
            if cancel is not None and cancel.is_set():
                return "cancel"
            if cgroup is not None and now >= cpu_check:
                used = cgroup.cpu_seconds()
                if used is not None and used >= limits.cpu_seconds:
                    return "cpu"
                cpu_check = now + max(0.01, (limits.cpu_seconds - (used or 0.0)) / cpu_rate)
            wait = min(deadline, cpu_check if cgroup is not None else deadline) - now
            wait = min(wait, Cancel.POLL_S if cancel is not None else _MAX_WAIT_S)
            for key, _ in self.sel.select(max(wait, 0.0)):
                if key.data is None:
                    self.exited = True
                    self.sel.unregister(key.fileobj)
                else:
                    self._read(key)
        return ""

    def drain(self) -> None:
        """Pick up what is left in the pipes once the tree is gone; never block."""
        while not self.overflow and self._streams():
            ready = [key for key, _ in self.sel.select(0) if key.data is not None]
            if not ready:
                break
            for key in ready:
                self._read(key)

    def close(self) -> None:
        self.sel.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def _wait_for_namespace_end(status_fd: int, timeout: float = 2.0) -> None:
    """Wait until the namespace's pid 1 is gone: it exits only after every process inside it.

    bwrap's outer process reports the exit code as soon as pid 1 sends it, slightly before the
    kernel has killed the namespace's leftovers; returning earlier would let daemons linger.
    """
    os.set_blocking(status_fd, False)
    try:
        text = os.read(status_fd, 4096).decode(errors="replace")
    except (BlockingIOError, OSError):
        return
    found = re.search(r'"child-pid"\s*:\s*(\d+)', text)
    if not found:
        return
    try:
        pidfd = os.pidfd_open(int(found.group(1)))
    except OSError:  # already gone
        return
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(pidfd, selectors.EVENT_READ)
            sel.select(timeout)
    finally:
        os.close(pidfd)


def _kill_tree(proc: subprocess.Popen, cgroup: RunCgroup | None) -> None:
    """SIGKILL bwrap's group; its namespace pid 1 dies with it and takes every process inside."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if cgroup is not None:
        cgroup.kill_all()
