"""The sandbox's CPU meter reads a container's cgroup counters on this host (v1 and v2 layouts), and
declines (None: the engine's stats are used) where the pid's cgroup is not the container's."""
from __future__ import annotations

from pathlib import Path

from svc_sandbox.backends.cgroups import RunCgroup

CID = "c1962a3661a4301a1d2cc0399c248298a727c25cde9679ab5a04d6acd3d48635"
V1 = "".join(f"{i}:{c}:/docker/{CID}\n" for i, c in enumerate(["cpu", "cpuacct", "cpuset", "memory", "pids"]))


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_v1_reads_cpuacct_and_the_memory_peak(tmp_path):
    write(tmp_path / "proc/42/cgroup", V1 + f"0::/docker/{CID}\n")
    write(tmp_path / f"cg/cpuacct/docker/{CID}/cpuacct.usage", "2500000000\n")
    write(tmp_path / f"cg/memory/docker/{CID}/memory.max_usage_in_bytes", "4317184\n")
    stats = RunCgroup.of_container(CID, 42, root=tmp_path / "cg", proc=tmp_path / "proc")
    assert stats is not None and stats.usage() == (2.5, 4317184)
    (tmp_path / f"cg/cpuacct/docker/{CID}/cpuacct.usage").write_text("2600000000\n")
    assert stats.usage()[0] == 2.6  # each read is the counter now


def test_v2_reads_cpu_stat_usage_and_memory_peak(tmp_path):
    write(tmp_path / "proc/7/cgroup", f"0::/system.slice/docker-{CID}.scope\n")
    group = tmp_path / f"cg/system.slice/docker-{CID}.scope"
    write(group / "cpu.stat", "usage_usec 1250000\nuser_usec 1000000\nsystem_usec 250000\n")
    write(group / "memory.peak", "1048576\n")
    write(group / "memory.current", "4096\n")
    stats = RunCgroup.of_container(CID, 7, root=tmp_path / "cg", proc=tmp_path / "proc")
    assert stats is not None and stats.usage() == (1.25, 1048576)


def test_declines_another_containers_or_a_missing_process(tmp_path):
    write(tmp_path / "proc/42/cgroup", V1.replace(CID, "f" * 64))
    assert RunCgroup.of_container(CID, 42, root=tmp_path / "cg", proc=tmp_path / "proc") is None  # a remote engine's pid
    assert RunCgroup.of_container(CID, 43, root=tmp_path / "cg", proc=tmp_path / "proc") is None
    assert RunCgroup.of_container(CID, 0, root=tmp_path / "cg", proc=tmp_path / "proc") is None
    write(tmp_path / "proc/44/cgroup", V1)  # the process is the container's, its counters unreadable
    assert RunCgroup.of_container(CID, 44, root=tmp_path / "cg", proc=tmp_path / "proc") is None
