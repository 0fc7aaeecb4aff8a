"""scripts/docker_engine.sh degrades clearly: where no engine can be had it exits 3 with one line
saying why (the cluster tests then skip with that line); with an engine answering it does nothing."""
from __future__ import annotations

import os
import shutil
import subprocess

from ops import ROOT

SCRIPT = str(ROOT / "scripts" / "docker_engine.sh")


def test_no_engine_and_no_way_to_install_one_is_exit_3_with_the_reason(tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with the script's basic tools and no docker, dockerd or apt-get
    bin_dir.mkdir()
    for tool in ("mkdir", "flock", "id", "timeout"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    out = subprocess.run([shutil.which("bash"), SCRIPT], capture_output=True, text=True,
                         env={"PATH": str(bin_dir), "HOME": str(tmp_path), "M1FLOW_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 3
    assert out.stderr.strip() == ("docker_engine: cannot run a Docker engine here: "
                                  "no dockerd and no apt-get to install docker.io")


def test_a_second_call_with_an_engine_answering_does_nothing(docker_engine):
    out = subprocess.run(["bash", SCRIPT], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""  # nothing installed, started or built
