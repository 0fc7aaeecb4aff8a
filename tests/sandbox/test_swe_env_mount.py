"""An SWE instance's tests run in its repository's environment (m1flow.data.swe_env), mounted read-only
in the jail: an instance whose code needs a package only that environment has passes with it, fails
naming the missing module without it, and a sandbox that lacks the environment says so (ours, not the
patch's). The Docker backend binds the same folder read-only (checked without an engine here), and the
socket proxy lets that bind through only under an allowed root."""
from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest

from m1flow.data.swe_env import Env, EnvCache, EnvSpec
from m1flow.status import Status
from svc_reward.verifiers.swe import SweTask, SweVerifier
from svc_sandbox.api import ExecRequest, InvalidRequest, Limits, RunTestsRequest
from svc_sandbox.backends.jail import JailBackend
from svc_sandbox.docker_proxy import Refused, check_create
from svc_sandbox.sandbox import Sandbox
from svc_sandbox import validate, wire
from svc_sandbox.validate import RequestCaps
from m1flow.task_store import snapshot_tar

DEP = "m1flow_probe_dep"
LIMITS = Limits(cpu_seconds=30, wall_seconds=60, memory_bytes=1 << 30, max_processes=64, max_open_files=256,
                work_dir_bytes=64 << 20, max_output_bytes=1 << 20)
CALC = f"from {DEP} import scale\n\n\ndef area(w, h):\n    return scale(w * h + 1)\n"
TESTS = ("from calc import area\n\n\ndef test_area():\n    assert area(2, 3) == 12\n\n\n"
         "def test_zero():\n    assert area(0, 5) in (0, 2)\n")
F2P, P2P = ["test_calc.py::test_area"], ["test_calc.py::test_zero"]


def probe_wheel(folder: Path) -> Path:
    """A real wheel of a one-module package that only the environment will have (pip installs it offline)."""
    files = {f"{DEP}/__init__.py": b"def scale(x):\n    return 2 * x\n",
             f"{DEP}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {DEP}\nVersion: 1.0\n".encode(),
             f"{DEP}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: m1flow-test\nRoot-Is-Purelib: true\n"
                                           b"Tag: py3-none-any\n"}

    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record = "".join(f"{name},sha256={digest(data)},{len(data)}\n" for name, data in files.items())
    path = folder / f"{DEP}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        record += f"{DEP}-1.0.dist-info/RECORD,,\n"
        for name, data in {**files, f"{DEP}-1.0.dist-info/RECORD": record.encode()}.items():
            whl.writestr(name, data)
    return path


def probe_env(root: Path) -> tuple[EnvCache, Env]:
    """An environment under root/envs holding the probe package (pip, offline, from its wheel)."""
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    probe_wheel(wheels)
    envs = EnvCache(root / "envs", pip_args=("--no-index", "--find-links", str(wheels)))
    return envs, envs.ensure(EnvSpec(repo="example/area", version="1.0", requirements=[DEP]))


def area_repo(root: Path) -> tuple[Path, str]:
    """A git repository whose code imports the probe package, with a bug; and the gold patch."""
    repo = root / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(TESTS)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "bug"], cwd=repo, check=True)
    (repo / "calc.py").write_text(CALC.replace("w * h + 1", "w * h"))
    gold = subprocess.run(["git", "diff"], cwd=repo, capture_output=True, text=True, check=True).stdout
    subprocess.run(["git", "checkout", "-q", "calc.py"], cwd=repo, check=True)
    return repo, gold


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if JailBackend.missing():
        pytest.skip(f"local jail unavailable here: missing {JailBackend.missing()}")
    root = tmp_path_factory.mktemp("swe-env")
    envs, env = probe_env(root)
    repo, gold = area_repo(root)
    return envs, env, snapshot_tar(repo), gold


def task(tar: bytes, environment: str) -> SweTask:
    return SweTask(repo_tar=tar, fail_to_pass=F2P, pass_to_pass=P2P, limits=LIMITS, environment=environment)


def test_the_gold_passes_in_the_repositorys_environment(setup):
    envs, env, tar, gold = setup
    result = SweVerifier(Sandbox(JailBackend(), envs=envs).run_tests).score_patch(gold, task(tar, env.key))
    assert (result.reward, result.status, result.reason) == (1.0, Status.OK, "resolved"), result.detail


def test_without_the_environment_the_missing_module_is_named(setup):
    envs, env, tar, gold = setup
    sandbox = Sandbox(JailBackend(), envs=envs)
    run = sandbox.run_tests(RunTestsRequest(repo_tar=tar, patch=gold, fail_to_pass=F2P, pass_to_pass=P2P,
                                            limits=LIMITS))
    assert run.status is Status.OK and f"No module named '{DEP}'" in run.log, run.log[-2000:]
    result = SweVerifier(sandbox.run_tests).score_patch(gold, task(tar, ""))
    assert (result.reward, result.reason) == (0.0, "does_not_import"), result.detail


def test_a_sandbox_without_the_environment_says_so_and_it_is_ours(setup):
    envs, env, tar, gold = setup
    for sandbox in (Sandbox(JailBackend()), Sandbox(JailBackend(), envs=EnvCache(envs.root.parent / "elsewhere"))):
        result = SweVerifier(sandbox.run_tests).score_patch(gold, task(tar, env.key))
        assert (result.status, result.reason) == (Status.SANDBOX_ERROR, "sandbox_error"), result.detail
        assert env.key in result.detail and "not built on this sandbox" in result.detail


def test_the_environment_is_read_only_inside_the_jail(setup):
    envs, env, tar, gold = setup
    code = (f"import sys, {DEP}\nprint(sys.prefix)\n"
            f"try:\n    open({str(env.path / 'x')!r}, 'w')\nexcept OSError as e:\n    print('refused', e.errno)\n")
    result = Sandbox(JailBackend()).execute(ExecRequest(code=code, limits=LIMITS), env_dir=env.path,
                                            python=str(env.python))
    assert result.status is Status.OK, (result.detail, result.stderr_text)
    assert result.stdout_text.split() == [str(env.path), "refused", "30"]  # EROFS
    assert not (env.path / "x").exists()


def test_the_environment_crosses_the_wire_and_a_path_is_refused():
    request = RunTestsRequest(repo_tar=b"t", patch="p", fail_to_pass=F2P, environment="example__area-1.0-0123abcd")
    assert validate.tests_request_from_proto(wire.tests_request_to_proto(request), RequestCaps()).environment == request.environment
    for bad in ("../etc", "/root/env", ".hidden", "a/b"):
        with pytest.raises(InvalidRequest, match="^environment: "):
            validate.tests_request_from_proto(wire.tests_request_to_proto(
                RunTestsRequest(repo_tar=b"t", patch="p", fail_to_pass=F2P, environment=bad)), RequestCaps())


def test_docker_binds_the_environment_read_only_and_the_proxy_allows_it_only_under_its_root(tmp_path):
    import docker
    from docker.models.containers import _create_container_args

    from svc_sandbox.backends.docker import DockerBackend
    api = docker.APIClient(base_url="unix:///nonexistent/docker.sock", version="1.41")
    backend = DockerBackend(client=docker.DockerClient(base_url="unix:///nonexistent/docker.sock", version="1.41"))
    env_dir = tmp_path / "envs" / "example__area-1.0-0123abcd"
    body = api.create_container_config(**_create_container_args(
        {**backend.container_kwargs(["python3", "main.py"], LIMITS, 2_000_000_007, env_dir), "version": api._version}))
    assert body["HostConfig"]["Binds"] == [f"{env_dir}:{env_dir}:ro"]
    body = {**body, "Image": backend.config.image}
    check_create(body, [backend.config.image], "m1flow.sandbox", [str(tmp_path / "envs")])
    envs = str(tmp_path / "envs")
    for roots, binds in (([], None), ([str(tmp_path)], None), ([envs], [f"{env_dir}:{env_dir}:rw"]),
                         ([envs], [f"{tmp_path}/envs/../..:/x:ro"]), ([envs], ["/:/:ro"])):
        hostile = {**body, "HostConfig": {**body["HostConfig"], "Binds": binds or body["HostConfig"]["Binds"]}}
        with pytest.raises(Refused):
            check_create(hostile, [backend.config.image], "m1flow.sandbox", roots)
    plain = backend.container_kwargs(["python3", "main.py"], LIMITS, 2_000_000_007)
    assert "volumes" not in plain
