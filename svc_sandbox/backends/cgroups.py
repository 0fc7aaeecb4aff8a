"""Per-run cgroups (v1) under our own cgroup: memory, pids, CPU quota, and the run's CPU time; and
the counters of a container's cgroup, read the same way (v1 or v2).

Why cgroups beside rlimits: rlimits count per process, so N forked processes would get N times
the budget; a run's cgroup holds every process of it, so its memory, process count and CPU time
are the run's total.

Why a container's counters are read here too: the Docker engine's stats API publishes about once a
second (a `one-shot` call waits for the next sample), so a run of N busy processes metered through
it passes its CPU limit by up to N CPU seconds. Where the engine runs on this host (the container's
init is a process here and its cgroup names the container), `RunCgroup.of_container` reads the
cgroup's own counters instead: exact at each read and cheap enough to poll every few milliseconds.
"""
from __future__ import annotations

import os
import re
import signal
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from svc_sandbox.api import Limits


ROOT = Path("/sys/fs/cgroup")
PROC = Path("/proc")
UNIFIED = ""  # the controller name /proc/<pid>/cgroup gives the cgroup v2 hierarchy ("0::/path")


def cgroup_paths(pid: int | str = "self", proc: Path = PROC) -> dict[str, str]:
    """A process's cgroup path per controller, from /proc/<pid>/cgroup (v1 lines and the v2 line)."""
    paths: dict[str, str] = {}
    for line in (proc / str(pid) / "cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(",") if names else [UNIFIED]:
            paths[name] = path
    return paths


def _own_cgroup_dirs(controllers: Sequence[str]) -> dict[str, Path]:
    """Directory of this process's cgroup for each cgroup v1 controller that is mounted."""
    own = cgroup_paths()
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
    """The memory, pids, cpu and cpuacct cgroups of one run (v1), or a container's (v1 or v2)."""

    def __init__(self, dirs: dict[str, Path]):
        self.dirs = dirs

    @classmethod
    def of_container(cls, container_id: str, pid: int, root: Path = ROOT, proc: Path = PROC) -> "RunCgroup | None":
        """The cgroup of the container whose init is `pid` here, or None where its counters cannot
        be read (the engine is elsewhere: a socket proxy, a VM; or the pid is not the container's)."""
        try:
            paths = cgroup_paths(pid, proc) if pid > 0 else {}
        except OSError:
            return None
        if container_id not in paths.get("cpuacct", paths.get(UNIFIED, "")):
            return None
        if "cpuacct" in paths and "memory" in paths:
            group = cls({c: root / c / paths[c].lstrip("/") for c in ("cpuacct", "memory")})
        else:
            group = cls({UNIFIED: root / paths[UNIFIED].lstrip("/")})
        try:
            group.usage()
        except (OSError, ValueError, KeyError):
            return None
        return group

    def usage(self) -> tuple[float, int]:
        """(CPU seconds, memory peak in bytes) of all the cgroup's processes together; raises
        OSError once the cgroup is gone (the caller's sign that the run is over)."""
        if UNIFIED in self.dirs:
            group = self.dirs[UNIFIED]
            stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines() if line.strip())
            peak = group / "memory.peak"  # kernels before 5.19 have only memory.current
            return int(stat["usage_usec"]) / 1e6, int((peak if peak.exists() else group / "memory.current").read_text())
        return (int((self.dirs["cpuacct"] / "cpuacct.usage").read_text()) / 1e9,
                int((self.dirs["memory"] / "memory.max_usage_in_bytes").read_text()))

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
