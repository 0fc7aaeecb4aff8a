"""The local jail: bubblewrap namespaces + rlimits + per-run cgroups, for machines without Docker.

How a run is built, outermost first (all execs, no Python in the child):

  sh (joins the run's cgroups)  ->  bwrap (new pid, net, ipc, uts, mount namespaces; read-only
  system; private tmpfs work dir and /tmp)  ->  setpriv (drop to uid 65534, no capabilities)  ->
  prlimit (CPU, address space, file size, open files, processes)  ->  sh (reports "started")  ->
  the program.

Why bwrap runs as root without a user namespace: bwrap 0.8 only sets a uid through a user
namespace, and one created by root maps the sandbox user onto host root, which would make
RLIMIT_NPROC void and every root-owned file the program's own. Dropping to the real uid 65534
inside the jail keeps the program an ordinary unprivileged user of the host kernel.
Why a "started" byte: a setup failure is our fault (sandbox_error, dropped by the learner) while a
program failure scores 0; the program cannot fake the byte because its pipe is closed before exec.
The whole tree dies at the deadline: we SIGKILL bwrap's process group, bwrap's pid 1 in the
namespace has PDEATHSIG, and when a pid namespace loses its pid 1 the kernel kills every process
in it, daemons included; the run's cgroup is emptied as well.
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
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field

from svc_sandbox.backend import WORK_DIR, BoundedOutput, RunOutcome, announce_start, classify
from svc_sandbox.limits import MB, ExecResult, Limits

_SYSTEM_PATHS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_READ_CHUNK = 1 << 16


class JailConfig(BaseModel):
    bwrap: str = Field("bwrap", description="bubblewrap binary")
    python: str = Field(sys.executable, description="interpreter offered to Python programs")
    extra_ro_paths: list[str] = Field(default_factory=list, description="more host paths, read-only")
    tmp_bytes: int = Field(16 * MB, gt=0, description="size of the private /tmp")
    use_cgroups: bool = Field(True, description="per-run memory/pids/cpu cgroups where cgroup v1 allows")
    cgroup_name: str = Field("m1flow-sandbox", description="parent of the run cgroups, under our own")


# ---------------------------------------------------------------- cgroups (v1)

def _own_cgroup_dirs(controllers: Sequence[str]) -> dict[str, Path]:
    """Directory of this process's cgroup for each cgroup v1 controller that is mounted."""
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(","):
            own[name] = path
    found: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        fstype, options = fields[sep + 1], fields[sep + 3].split(",")
        root, mountpoint = fields[3], fields[4]
        for name in controllers:
            if fstype == "cgroup" and name in options and name in own and name not in found:
                rel = os.path.relpath(own[name], root) if own[name].startswith(root) else None
                if rel is not None:
                    found[name] = Path(mountpoint, rel).resolve()
    return found


class RunCgroup:
    """The memory, pids, cpu and cpuacct cgroups of one run."""

    def __init__(self, dirs: dict[str, Path]):
        self.dirs = dirs

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def _read(self, controller: str, name: str) -> str:
        try:
            return (self.dirs[controller] / name).read_text()
        except (KeyError, OSError):
            return ""

    def oom_kills(self) -> int:
        found = re.search(r"oom_kill (\d+)", self._read("memory", "memory.oom_control"))
        return int(found.group(1)) if found else 0

    def memory_peak(self) -> int:
        text = self._read("memory", "memory.max_usage_in_bytes").strip()
        return int(text) if text.isdigit() else 0

    def cpu_seconds(self) -> float | None:
        text = self._read("cpuacct", "cpuacct.usage").strip()
        return int(text) / 1e9 if text.isdigit() else None

    def kill_all(self) -> None:
        """SIGKILL whatever is left in the run's cgroups (belt and braces after the pid namespace)."""
        for _ in range(50):
            pids = {int(p) for d in self.dirs.values() for p in _read_lines(d / "cgroup.procs")}
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs.values():
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the last processes are being reaped
                    time.sleep(0.01)


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


class CgroupManager:
    """Creates per-run cgroups under our own cgroup (never above it: that would escape our limits)."""

    CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")

    def __init__(self, name: str):
        self.bases: dict[str, Path] = {}
        self.note = ""
        try:
            for controller, own in _own_cgroup_dirs(self.CONTROLLERS).items():
                base = own / name
                base.mkdir(exist_ok=True)
                self.bases[controller] = base
            probe = self.create(Limits())
            probe.remove()
        except OSError as err:
            self.bases, self.note = {}, f"no cgroups ({err}); rlimits only"
        if not self.bases:
            self.note = self.note or "no cgroup v1 memory/pids controllers; rlimits only"

    @property
    def has_pids(self) -> bool:
        return "pids" in self.bases

    def create(self, limits: Limits, extra_bytes: int = 0) -> RunCgroup:
        """A fresh cgroup per controller; memory covers the program plus its tmpfs files."""
        run = f"run-{uuid.uuid4().hex[:12]}"
        dirs: dict[str, Path] = {}
        cgroup = RunCgroup(dirs)
        try:
            for controller, base in self.bases.items():
                d = base / run
                d.mkdir()
                dirs[controller] = d
            if "memory" in dirs:
                memory = str(limits.memory_bytes + extra_bytes)
                (dirs["memory"] / "memory.limit_in_bytes").write_text(memory)
                swap = dirs["memory"] / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(memory)
            if "pids" in dirs:  # + bwrap's monitor and its pid 1
                (dirs["pids"] / "pids.max").write_text(str(limits.max_processes + 2))
            if "cpu" in dirs:
                (dirs["cpu"] / "cpu.cfs_quota_us").write_text(str(int(limits.cpus * 100_000)))
        except OSError:
            cgroup.remove()
            raise
        return cgroup


# ---------------------------------------------------------------- the jail

def _python_prefixes(python: str) -> list[str]:
    """Directories the interpreter needs (venv and base installation) so the jail can mount them."""
    out = subprocess.run([python, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                         capture_output=True, text=True, timeout=30, check=True).stdout.split()
    return [os.path.realpath(p) for p in out] + [os.path.dirname(os.path.realpath(python))]


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _mount_args(config: JailConfig) -> list[str]:
    """Read-only system plus the interpreter; the parents of deep mounts are made traversable."""
    args: list[str] = []
    mounted: list[str] = []
    for path in _SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
            mounted.append(path)
    extra = [os.path.realpath(p) for p in _python_prefixes(config.python) + config.extra_ro_paths]
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
    """Runs each command in a fresh bubblewrap jail. Needs root (to drop to uid 65534) and bwrap."""

    name = "jail"

    def __init__(self, config: JailConfig | None = None):
        self.config = config or JailConfig()
        self.python = self.config.python
        self._mounts = _mount_args(self.config)
        self.cgroups = CgroupManager(self.config.cgroup_name) if self.config.use_cgroups else None

    @staticmethod
    def missing(config: JailConfig | None = None) -> list[str]:
        """What this machine lacks for the jail (empty when it can run)."""
        config = config or JailConfig()
        needed = [config.bwrap, "setpriv", "prlimit", "sh"]
        lacks = [tool for tool in needed if shutil.which(tool) is None]
        if os.geteuid() != 0:
            lacks.append("root (the jail drops to an unprivileged uid itself)")
        return lacks

    @property
    def note(self) -> str:
        return self.cgroups.note if self.cgroups else "cgroups disabled; rlimits only"

    def _bwrap_args(self, argv: Sequence[str], file_fds: Mapping[str, int], limits: Limits,
                    use_nproc: bool, status_fd: int) -> list[str]:
        namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        if not limits.network:
            namespaces.append("--unshare-net")
        args = [self.config.bwrap, *namespaces, "--die-with-parent", "--new-session",
                "--json-status-fd", str(status_fd),
                "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
                *self._mounts, "--proc", "/proc", "--dev", "/dev",
                "--size", str(self.config.tmp_bytes), "--tmpfs", "/tmp", "--chmod", "1777", "/tmp",
                "--size", str(limits.work_dir_bytes), "--tmpfs", WORK_DIR]
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
        uid = str(limits.uid)
        cpu = max(1, math.ceil(limits.cpu_seconds))
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--",
                 "prlimit", f"--cpu={cpu}:{cpu + 1}", f"--as={limits.memory_bytes}",
                 f"--fsize={limits.max_file_bytes}", f"--nofile={limits.max_open_files}", "--core=0"]
        if use_nproc:
            args.append(f"--nproc={limits.max_processes}")
        return args + ["--", *announce_start(argv)]

    def run(self, argv: Sequence[str], files: Mapping[str, bytes], stdin: bytes,
            limits: Limits) -> ExecResult:
        cgroup: RunCgroup | None = None
        fds: list[int] = []
        try:
            if self.cgroups and self.cgroups.bases:
                cgroup = self.cgroups.create(limits, self.config.tmp_bytes + limits.work_dir_bytes)
            file_fds = {name: _memfd(name, data) for name, data in files.items()}
            fds += file_fds.values()
            stdin_fd = _memfd("stdin", stdin)
            status_r, status_w = os.pipe()
            fds += [stdin_fd, status_r, status_w]
            use_nproc = not (self.cgroups and self.cgroups.has_pids)
            args = self._bwrap_args(argv, file_fds, limits, use_nproc, status_w)
            env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
            if cgroup is not None:  # join before bwrap starts, so nothing can fork outside
                join = 'for f in $M1_CGROUP_PROCS; do echo $$ > "$f" || exit 1; done; exec "$@"'
                args = ["/bin/sh", "-c", join, "sh", *args]
                env["M1_CGROUP_PROCS"] = " ".join(cgroup.procs_files)
            start = time.monotonic()
            proc = subprocess.Popen(args, stdin=stdin_fd, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, pass_fds=[*file_fds.values(), status_w],
                                    env=env, start_new_session=True)
            return self._supervise(proc, start, limits, cgroup, status_r)
        except (OSError, subprocess.SubprocessError, ValueError) as err:
            return ExecResult.sandbox_error(f"jail: {type(err).__name__}: {err}")
        finally:
            for fd in fds:
                os.close(fd)
            if cgroup is not None:
                cgroup.remove()

    def _supervise(self, proc: subprocess.Popen, start: float, limits: Limits,
                   cgroup: RunCgroup | None, status_fd: int) -> ExecResult:
        """Collect bounded output until exit or deadline, kill the tree if needed, classify."""
        try:
            out = _Collector(proc, limits.max_output_bytes)
            timed_out = out.collect(start + limits.wall_seconds)
        except BaseException:
            _kill_tree(proc, cgroup)
            os.waitpid(proc.pid, 0)
            raise
        if timed_out or out.overflow:
            _kill_tree(proc, cgroup)
        _, status = os.waitpid(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - start
        _wait_for_namespace_end(status_fd)
        out.drain()
        if cgroup is not None:
            cgroup.kill_all()
        cpu = cgroup.cpu_seconds() if cgroup else None
        cpu = 0.0 if cpu is None else cpu  # rusage cannot see inside: bwrap never reaps its pid 1
        return classify(RunOutcome(
            started=out.started, timed_out=timed_out, overflow=out.overflow,
            exit_code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            stdout=bytes(out.stdout), stderr=bytes(out.stderr), wall=wall, cpu=cpu,
            memory_peak=cgroup.memory_peak() if cgroup else 0,
            oom_killed=bool(cgroup and cgroup.oom_kills()), note=self.note), limits)


class _Collector(BoundedOutput):
    """Reads a run's stdout and stderr, keeping at most `limit` bytes of each.

    The first stdout byte is the jail's own "started" marker, written before the program is exec'd.
    """

    def __init__(self, proc: subprocess.Popen, limit: int):
        super().__init__(limit)
        self.proc = proc
        self.exited = False
        self.sel = selectors.DefaultSelector()
        self.sel.register(proc.stdout, selectors.EVENT_READ, self.stdout)
        self.sel.register(proc.stderr, selectors.EVENT_READ, self.stderr)
        self.pidfd = os.pidfd_open(proc.pid)
        self.sel.register(self.pidfd, selectors.EVENT_READ, None)

    def _read(self, key: selectors.SelectorKey) -> None:
        data = os.read(key.fd, _READ_CHUNK)
        if not data:
            self.sel.unregister(key.fileobj)
            return
        self.add(key.data, data)

    def _streams(self) -> list[selectors.SelectorKey]:
        return [key for key in self.sel.get_map().values() if key.data is not None]

    def collect(self, deadline: float) -> bool:
        """Read until the process exits and its pipes close, or the deadline; True on timeout."""
        while not self.overflow:
            if self.exited and not self._streams():
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            for key, _ in self.sel.select(left):
                if key.data is None:
                    self.exited = True
                    self.sel.unregister(key.fileobj)
                else:
                    self._read(key)
        return False

    def drain(self) -> None:
        """Pick up what is left in the pipes once the tree is gone; never block."""
        while not self.overflow and self._streams():
            ready = [key for key, _ in self.sel.select(0) if key.data is not None]
            if not ready:
                break
            for key in ready:
                self._read(key)
        self.sel.close()
        os.close(self.pidfd)
        self.proc.stdout.close()
        self.proc.stderr.close()


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
