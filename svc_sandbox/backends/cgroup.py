"""A container's CPU time and memory peak read from this host's cgroup files.

The engine's stats API publishes about once a second (a `one-shot` call waits for the next
sample), so a run of N busy processes metered through it passes its CPU limit by up to N CPU
seconds. Where the engine runs on this host (the container's init is one of our processes and its
cgroup names the container), the cgroup's own counters are read instead: exact at each read and
cheap enough to poll every few milliseconds. cgroup v1 (cpuacct, memory) and v2 (cpu.stat,
memory.peak) are both read; anywhere else `CgroupStats.of` answers None and the caller keeps the
stats API.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PROC = Path("/proc")


class CgroupStats:
    """Readers of one container's cgroup; `read()` raises OSError once the cgroup is gone."""

    def __init__(self, cpu_file: Path, memory_file: Path, v2: bool):
        self.cpu_file, self.memory_file, self.v2 = cpu_file, memory_file, v2

    @classmethod
    def of(cls, container_id: str, pid: int, root: Path = ROOT, proc: Path = PROC) -> "CgroupStats | None":
        """The cgroup of the container whose init is `pid` here, or None where it cannot be read."""
        try:
            lines = (proc / str(pid) / "cgroup").read_text().splitlines() if pid > 0 else []
        except OSError:
            return None
        paths = {}
        for line in lines:
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path.lstrip("/")
        if container_id not in paths.get("cpuacct", paths.get("", "")):
            return None  # not this container's process: the engine is elsewhere (a socket proxy, a VM)
        if "cpuacct" in paths and "memory" in paths:
            stats = cls(root / "cpuacct" / paths["cpuacct"] / "cpuacct.usage",
                        root / "memory" / paths["memory"] / "memory.max_usage_in_bytes", v2=False)
        else:
            group = root / paths[""]
            peak = group / "memory.peak"
            stats = cls(group / "cpu.stat", peak if peak.exists() else group / "memory.current", v2=True)
        try:
            stats.read()
        except (OSError, ValueError):
            return None
        return stats

    def read(self) -> tuple[float, int]:
        """(CPU seconds, memory peak in bytes) of the whole cgroup, all its processes together."""
        text = self.cpu_file.read_text()
        if self.v2:
            usage = dict(line.split() for line in text.splitlines() if line.strip())
            cpu = int(usage["usage_usec"]) / 1e6
        else:
            cpu = int(text) / 1e9
        return cpu, int(self.memory_file.read_text())
