"""Environments per repository and version: built once with a build log, reused by key, a requirement
that cannot be had refused naming it (pip with no index: nothing here is fetched)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from m1flow.data.swe_env import EnvCache, EnvError, EnvSpec


def test_an_environment_is_built_once_and_reused_by_its_key(tmp_path):
    cache = EnvCache(tmp_path / "envs")
    spec = EnvSpec(repo="example/calc", version="0.1")
    first = cache.ensure(spec)
    assert first.built and first.log.exists() and "venv" in first.log.read_text()
    ran = subprocess.run([str(first.python), "-c", "import sys, pytest; print(sys.prefix)"], capture_output=True,
                         text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == str(first.path), ran.stderr  # its own, pytest layered
    again = cache.ensure(EnvSpec(repo="example/calc", version="0.1"))
    assert (again.built, again.path) == (False, first.path)
    assert EnvSpec(repo="example/calc", version="0.2").key != spec.key
    assert EnvSpec(repo="example/calc", version="0.1", requirements=["attrs"]).key != spec.key


def test_a_requirement_that_cannot_be_had_is_named_and_leaves_nothing(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    cache = EnvCache(tmp_path / "envs", pip_args=("--no-index", "--find-links", str(wheels)))
    spec = EnvSpec(repo="example/calc", version="0.1", requirements=["m1flow-absent-dependency>=1"])
    with pytest.raises(EnvError, match=r"cannot install 'm1flow-absent-dependency>=1'.*build log") as err:
        cache.ensure(spec)
    assert "No matching distribution" in str(err.value) or "from versions: none" in str(err.value)
    assert not (tmp_path / "envs" / spec.key).exists() and not list((tmp_path / "envs").glob("*.building"))
    assert (tmp_path / "envs" / f"{spec.key}.build.log").exists()


def test_the_sandbox_finds_a_built_environment_by_key_and_mounts_only_what_it_needs(tmp_path):
    import sys
    import sysconfig

    cache = EnvCache(tmp_path / "envs")
    env = cache.ensure(EnvSpec(repo="example/calc", version="0.1"))
    assert cache.find(env.key).path == env.path
    for missing in ("../envs", "/etc", ".hidden", "example__calc-0.2-000000000000"):
        assert cache.find(missing) is None
    (tmp_path / "envs" / "link").symlink_to(env.path)
    assert cache.find("link") is None  # a link could point anywhere
    site = next(env.path.glob("lib/python*/site-packages"))
    (site / "evil.pth").write_text(str(tmp_path) + "\n")  # a package's own .pth is not a mount
    paths = env.host_paths()
    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert paths[0] == env.path.resolve() and Path(sys.base_prefix).resolve() in paths and purelib in paths
    assert tmp_path.resolve() not in paths and len(paths) == 3
