"""How each language is compiled and run on a backend, once for the jail and Docker alike.

`Sandbox` is callable as `executor(ExecRequest) -> ExecResult` and has `run_tests(RunTestsRequest)`,
the shapes the verifiers take; the gRPC client of svc_sandbox has the same two. A SWE request may name
its repository's environment (m1flow.data.swe_env): the tests then run with that environment's
interpreter, which the backend mounts read-only; one this sandbox does not hold is a SANDBOX_ERROR
(ours: the task's environment was not provisioned here), never a failing test.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from m1flow.data.swe_env import EnvCache
from m1flow.status import Status
from svc_sandbox import swe
from svc_sandbox.api import ExecRequest, ExecResult, InvalidRequest, Limits, RunTestsRequest, RunTestsResult
from svc_sandbox.backends.base import Backend, Cancel
from svc_sandbox.languages import canonical_language


@dataclass(frozen=True)
class LanguagePlan:
    main_file: str
    compile_cmd: str | None  # a shell line run in WORK_DIR that writes the binary to ./prog
    run_cmd: tuple[str, ...]  # "{python}" and "{main}" are filled in
    probe: str = ""  # a program that must compile: when it does not, the toolchain is broken


PLANS: dict[str, LanguagePlan] = {
    "python": LanguagePlan("main.py", None, ("{python}", "{main}")),
    "bash": LanguagePlan("main.sh", None, ("/bin/bash", "{main}")),
    "c": LanguagePlan("main.c", "gcc -O2 -pipe -std=gnu11 -o prog main.c -lm", ("./prog",),
                      "#include <stdio.h>\n#include <math.h>\nint main(void){printf(\"%f\", sqrt(2.0));}\n"),
    "cpp": LanguagePlan("main.cpp", "g++ -O2 -pipe -std=gnu++17 -o prog main.cpp", ("./prog",),
                        "#include <iostream>\n#include <vector>\nint main(){std::vector<int> v{1};std::cout<<v[0];}\n"),
}


class Sandbox:
    """Runs ExecRequests on a backend: writes the sources, compiles (cached), runs."""

    def __init__(self, backend: Backend, compile_cache_size: int = 64, envs: EnvCache | None = None):
        self.backend = backend
        self.envs = envs  # the repository environments SWE requests may name
        self._binaries: OrderedDict[str, ExecResult] = OrderedDict()
        self._cache_size = compile_cache_size
        self._toolchains_ok: set[str] = set()  # compile commands that built their probe
        self._lock = threading.Lock()

    def __call__(self, request: ExecRequest) -> ExecResult:
        return self.execute(request)

    def execute(self, request: ExecRequest, cancel: Cancel | None = None, env_dir: Path | None = None,
                python: str | None = None) -> ExecResult:
        """InvalidRequest for the caller's mistakes (language, entry file); a verdict otherwise.
        env_dir, python: a repository environment to mount read-only and its interpreter (run_tests')."""
        plan = PLANS[canonical_language(request.language)]
        files = dict(request.files)
        main = request.main or plan.main_file
        if request.code:
            files[plan.main_file] = request.code.encode()
            main = plan.main_file
        if main not in files and plan.compile_cmd is None:
            field = "main" if request.main else "code"  # no code, and no default entry file either
            raise InvalidRequest(field, f"entry file {main[:100]!r} is not among the files")
        if plan.compile_cmd is not None:
            built = self._compile(plan, files, request.compile_limits, cancel)
            if not built.ok:
                return built
            files["prog"] = built.stdout
        argv = [part.format(python=python or self.backend.python, main=main) for part in plan.run_cmd]
        extra = {"env_dir": env_dir} if env_dir is not None else {}
        return self.backend.run(argv + list(request.argv), files, request.stdin, request.limits, cancel, **extra)

    def run_tests(self, request: RunTestsRequest, cancel: Cancel | None = None) -> RunTestsResult:
        """Apply the patch to the snapshot and run its tests in one sandboxed run (svc_sandbox.swe), in the
        repository's environment when the request names one."""
        if not request.environment:
            return swe.run_tests(lambda exec_request: self.execute(exec_request, cancel), request)
        env = self.envs.find(request.environment) if self.envs is not None else None
        if env is None:
            where = f"under {self.envs.root}" if self.envs is not None else "(its swe_envs is not set)"
            return RunTestsResult(status=Status.SANDBOX_ERROR, detail=f"the environment {request.environment!r} "
                                  f"is not built on this sandbox {where}: build it with `m1flow data swe-make --envs`")
        python = str(env.python)
        return swe.run_tests(lambda exec_request: self.execute(exec_request, cancel, env.path, python), request)

    def _compile(self, plan: LanguagePlan, files: Mapping[str, bytes], limits: Limits,
                 cancel: Cancel | None) -> ExecResult:
        """Compile in a sandbox of its own; the binary comes back on stdout. Cached by source."""
        digest = hashlib.sha256(plan.compile_cmd.encode())
        for name in sorted(files):
            digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
        key = digest.hexdigest()
        with self._lock:
            if key in self._binaries:
                self._binaries.move_to_end(key)
                return self._binaries[key]
        result = self._build(plan.compile_cmd, files, limits, cancel)
        if result.status is Status.COMPILE_ERROR and not self._toolchain_works(plan, limits, cancel):
            return ExecResult.sandbox_error(f"the sandbox's toolchain is broken ({plan.compile_cmd.split()[0]} "
                                            f"cannot build a trivial program): {result.stderr_text[-500:]}")
        if result.status in (Status.OK, Status.COMPILE_ERROR):
            with self._lock:
                self._binaries[key] = result
                while len(self._binaries) > self._cache_size:
                    self._binaries.popitem(last=False)
        return result

    def _build(self, compile_cmd: str, files: Mapping[str, bytes], limits: Limits,
               cancel: Cancel | None) -> ExecResult:
        result = self.backend.run(["/bin/sh", "-c", f"{compile_cmd} >&2 && cat prog"], files, b"", limits, cancel)
        if result.status in (Status.RUNTIME_ERROR, Status.MEMORY_LIMIT, Status.TIME_LIMIT):
            result = result.model_copy(update={"status": Status.COMPILE_ERROR, "stdout": b"",
                                               "detail": f"compile: {result.status.name} {result.detail}"})
        return result

    def _toolchain_works(self, plan: LanguagePlan, limits: Limits, cancel: Cancel | None) -> bool:
        """Whether the compiler builds a trivial program; asked after a compile error until it does once.

        Why: "gcc: not found" or a missing header of the C library is our image's fault, not the
        program's, and must not score 0.
        """
        if plan.compile_cmd in self._toolchains_ok:
            return True
        probe = self._build(plan.compile_cmd, {plan.main_file: plan.probe.encode()}, limits, cancel)
        if probe.status is Status.OK:
            with self._lock:
                self._toolchains_ok.add(plan.compile_cmd)
        return probe.status is not Status.COMPILE_ERROR
