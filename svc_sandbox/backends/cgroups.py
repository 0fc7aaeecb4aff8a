"""Per-run cgroups (v1) under our own cgroup: memory, pids, CPU quota, and the run's CPU time.

Why cgroups beside rlimits: rlimits count per process, so N forked processes would get N times
the budget; a run's cgroup holds every process of it, so its memory, process count and CPU time
are the run's total.
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
