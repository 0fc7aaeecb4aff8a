"""The local jail runs ordinary programs correctly and reports what happened to them."""
from __future__ import annotations

import signal

import pytest

from m1flow.status import Status
from svc_sandbox.api import ExecRequest, InvalidRequest, Limits, RunTestsRequest
from svc_sandbox.backends.jail import JailBackend, JailConfig
from svc_sandbox.sandbox import Sandbox
from m1flow.task_store import snapshot_tar

SMALL = Limits(cpu_seconds=1, wall_seconds=4, memory_bytes=256 << 20, max_processes=32)


def run(sandbox: Sandbox, code: str, **kw) -> object:
    kw.setdefault("limits", SMALL)
    return sandbox(ExecRequest(code=code, **kw))


def test_python_echo_stdin_and_argv(jail_sandbox):
    r = run(jail_sandbox, "import sys\nprint(input()[::-1], sys.argv[1:])", stdin=b"abc\n", argv=["x", "y z"])
    assert r.status is Status.OK, r
    assert r.exit_code == 0 and r.signal is None
    assert r.stdout_text == "cba ['x', 'y z']\n"
    assert r.wall_seconds > 0 and r.cpu_seconds > 0


def test_exit_code_and_stderr_are_reported(jail_sandbox):
    r = run(jail_sandbox, "import sys\nsys.stderr.write('bad input')\nsys.exit(3)")
    assert r.status is Status.RUNTIME_ERROR
    assert r.exit_code == 3 and r.stderr_text == "bad input"


def test_uncaught_exception_is_runtime_error(jail_sandbox):
    r = run(jail_sandbox, "raise ValueError('nope')")
    assert r.status is Status.RUNTIME_ERROR and b"ValueError: nope" in r.stderr


def test_killed_by_signal(jail_sandbox):
    r = run(jail_sandbox, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert r.status is Status.RUNTIME_ERROR and r.signal == signal.SIGSEGV


def test_extra_files_and_nested_paths(jail_sandbox):
    r = jail_sandbox(ExecRequest(files={"main.py": b"import helper.util as u\nprint(u.VALUE, open('data/in.txt').read())",
                                        "helper/util.py": b"VALUE = 41 + 1", "data/in.txt": b"hello"},
                                 limits=SMALL))
    assert r.status is Status.OK, r.stderr_text
    assert r.stdout_text.split() == ["42", "hello"]


def test_runs_as_unprivileged_user_without_capabilities_under_the_filter(jail_sandbox):
    code = ("import os\nprint(os.getuid(), os.getgid(), os.getgroups())\n"
            "status = [l for l in open('/proc/self/status') if l.startswith(('Cap', 'Seccomp:', 'NoNewPrivs'))]\n"
            "print(all(l.split()[1] == '0000000000000000' for l in status if l.startswith(('CapEff', 'CapPrm', 'CapBnd'))))\n"
            "print(*[l.split()[1] for l in status if l.startswith(('Seccomp:', 'NoNewPrivs'))])\n"
            "try:\n    os.setuid(0)\nexcept PermissionError:\n    print('setuid refused')\n")
    r = run(jail_sandbox, code)
    ids, *rest = r.stdout_text.splitlines()
    uid, gid, groups = ids.split(maxsplit=2)
    uids = jail_sandbox.backend.config.uids
    assert uid == gid and uids.first <= int(uid) < uids.first + uids.count and groups == "[]", r
    assert rest == ["True", "1 2", "setuid refused"], r.stderr_text  # no_new_privs, seccomp filter mode


def test_own_pid_namespace_hides_host_processes(jail_sandbox):
    r = run(jail_sandbox, "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    pids = eval(r.stdout_text)  # our own test program's output, not model output
    assert max(pids) < 20, pids


def check_c_and_cpp(sandbox: Sandbox, limits: Limits) -> None:
    """C and C++ programs compile and run on `sandbox` (any backend)."""
    c = '#include <stdio.h>\nint main(){int a,b;scanf("%d %d",&a,&b);printf("%d\\n",a+b);return 0;}'
    r = sandbox(ExecRequest(language="c", code=c, stdin=b"2 40", limits=limits))
    assert (r.status, r.stdout) == (Status.OK, b"42\n"), r
    cpp = '#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a*b<<"\\n";}'
    r = sandbox(ExecRequest(language="cpp", code=cpp, stdin=b"6 7", limits=limits))
    assert (r.status, r.stdout) == (Status.OK, b"42\n"), r


def test_c_and_cpp_compile_and_run(jail_sandbox):
    check_c_and_cpp(jail_sandbox, SMALL)


def test_compile_error_is_reported_with_compiler_messages(jail_sandbox):
    r = jail_sandbox(ExecRequest(language="c", code="int main( { return 0; }", limits=SMALL))
    assert r.status is Status.COMPILE_ERROR
    assert b"error" in r.stderr and r.stdout == b""


def test_unsupported_language_is_the_callers_mistake_not_a_sandbox_error(jail_sandbox):
    with pytest.raises(InvalidRequest) as refused:
        jail_sandbox(ExecRequest(language="cobol", code="x"))
    assert refused.value.field == "language"
    with pytest.raises(InvalidRequest) as refused:
        jail_sandbox(ExecRequest(files={"data.txt": b"1"}))
    assert refused.value.field == "code"


def test_paths_escaping_the_work_dir_are_rejected():
    with pytest.raises(ValueError):
        ExecRequest(files={"../evil.py": b""})
    with pytest.raises(ValueError):
        ExecRequest(files={"/etc/passwd": b""})


def test_broken_jail_setup_is_a_sandbox_error_not_a_program_failure(jail_sandbox):
    broken = JailBackend(JailConfig(extra_ro_paths=[], bwrap="bwrap"))
    broken._mounts = broken._mounts + ["--ro-bind", "/nonexistent-m1flow", "/x"]
    r = Sandbox(broken)(ExecRequest(code="print(1)", limits=SMALL))
    assert r.status is Status.SANDBOX_ERROR and "setup failed" in r.detail


def test_program_cannot_fake_the_started_marker_to_hide_a_failure(jail_sandbox):
    """A program printing what looks like jail errors still gets a program verdict, never sandbox_error."""
    r = run(jail_sandbox, "import sys\nsys.stderr.write('bwrap: Can\\'t find source path')\nsys.exit(1)")
    assert r.status is Status.RUNTIME_ERROR


def test_auto_choice_falls_back_to_the_jail_without_an_engine_or_the_run_image(jail_sandbox, tmp_path):
    from svc_sandbox.backends import choose_backend
    from svc_sandbox.backends.docker import DockerConfig
    no_engine = DockerConfig(engine=f"unix://{tmp_path}/no-engine.sock", ping_timeout_s=1)
    assert choose_backend("auto", docker=no_engine).name == "jail"
    assert choose_backend("auto", docker=DockerConfig(image="m1flow-no-such-image:0")).name == "jail"


def test_a_missing_compiler_is_the_sandboxs_failure_not_a_compile_error(jail_sandbox, monkeypatch):
    """'gcc: not found' says nothing about the program: SANDBOX_ERROR (dropped), never a 0."""
    from svc_sandbox import sandbox as plans
    broken = plans.PLANS["c"].__class__("main.c", "gcc-m1flow-missing -o prog main.c", ("./prog",), plans.PLANS["c"].probe)
    monkeypatch.setitem(plans.PLANS, "c", broken)
    r = Sandbox(jail_sandbox.backend)(ExecRequest(language="c", code="int main(){return 0;}", limits=SMALL))
    assert r.status is Status.SANDBOX_ERROR and "toolchain is broken" in r.detail, r


def test_a_missing_interpreter_is_the_sandboxs_failure(jail_sandbox):
    broken = JailBackend()
    broken.python = "/usr/bin/python-m1flow-missing"
    r = Sandbox(broken)(ExecRequest(code="print(1)", limits=SMALL))
    assert r.status is Status.SANDBOX_ERROR and "not found in the sandbox" in r.detail, r


@pytest.mark.parametrize("command,lacks", [("python -m m1flow_no_such_module -x", "m1flow_no_such_module"),
                                           ("m1flow-no-such-tool -x", "m1flow-no-such-tool")])
def test_a_test_command_the_sandbox_lacks_is_the_sandboxs_failure(jail_sandbox, tmp_path, command, lacks):
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    result = jail_sandbox.run_tests(RunTestsRequest(repo_tar=snapshot_tar(tmp_path), patch="", fail_to_pass=["x"],
                                                    test_command=command, limits=SMALL))
    assert result.status is Status.SANDBOX_ERROR and lacks in result.detail, result
