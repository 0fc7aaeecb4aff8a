"""The backend interface, the language plans shared by all backends, and the choice of backend.

Why split this way: a backend only knows how to run one command line in a fresh, limited sandbox
with some files and stdin (`Backend.run`). Everything language-specific (file names, compile step,
the compile cache) lives once here in `Sandbox`, so the local jail and Docker behave the same.
`Sandbox` is callable as `executor(ExecRequest) -> ExecResult`, the shape the verifiers take; the
gRPC client of svc_sandbox has the same shape.
"""
from __future__ import annotations

import hashlib
import signal
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from svc_sandbox.limits import ExecRequest, ExecResult, ExecStatus, Limits

WORK_DIR = "/sandbox"
STARTED = b"s"
Executor = Callable[[ExecRequest], ExecResult]
_MEMORY_ERRORS = (b"MemoryError", b"std::bad_alloc", b"Cannot allocate memory", b"out of memory")


class Backend(Protocol):
    name: str
    python: str  # the Python interpreter as seen inside the sandbox

    def run(self, argv: Sequence[str], files: Mapping[str, bytes], stdin: bytes,
            limits: Limits) -> ExecResult:
        """Run argv in a fresh sandbox whose work dir (WORK_DIR, also the cwd) holds `files`."""
        ...


def announce_start(argv: Sequence[str]) -> list[str]:
    """Prefix argv so the sandbox writes STARTED on stdout right before exec'ing the program.

    Why: a setup failure is ours (sandbox_error, dropped by the learner) while a program failure
    scores 0. The program cannot forge the byte: it is on stdout before the program exists.
    """
    return ["/bin/sh", "-c", f'printf {STARTED.decode()} && exec "$@"', "sh", *argv]


class BoundedOutput:
    """A run's stdout and stderr, each kept to `limit` bytes, with the STARTED marker stripped.

    Both backends read their streams through it, so output limits and start detection are one rule.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.stdout, self.stderr = bytearray(), bytearray()
        self.started = self.overflow = False

    def add(self, buffer: bytearray, data: bytes) -> bool:
        """Append `data` to `buffer` (self.stdout or self.stderr); True when this call first overflowed."""
        if buffer is self.stdout and not self.started:
            self.started, data = data[:1] == STARTED, data[1:]
        room = self.limit - len(buffer)
        buffer.extend(data[:max(room, 0)])
        first = len(data) > room and not self.overflow
        self.overflow = self.overflow or len(data) > room
        return first


@dataclass
class RunOutcome:
    """What a backend saw of one run; `classify` turns it into a verdict alike for all backends."""
    started: bool  # STARTED was read first on stdout (and stripped from `stdout`)
    timed_out: bool  # we killed it at the wall deadline
    overflow: bool  # we killed it for writing past max_output_bytes
    exit_code: int | None  # of the sandbox's top process; a program killed by signal n shows 128+n
    stdout: bytes
    stderr: bytes
    wall: float
    cpu: float = 0.0
    memory_peak: int = 0
    oom_killed: bool = False
    note: str = ""


def _says_out_of_memory(stderr: bytes) -> bool:
    """An allocation refused under RLIMIT_AS surfaces as an error message, not as a signal."""
    return any(marker in stderr[-2000:] for marker in _MEMORY_ERRORS)


def classify(run: RunOutcome, limits: Limits) -> ExecResult:
    def verdict(status: ExecStatus, detail: str = "", **codes: int | None) -> ExecResult:
        return ExecResult(status=status, detail=detail, stdout=run.stdout, stderr=run.stderr, wall_seconds=run.wall,
                          cpu_seconds=run.cpu, memory_peak_bytes=run.memory_peak, **codes)

    if not run.started:
        why = "did not start before the deadline" if run.timed_out else "setup failed"
        return verdict(ExecStatus.SANDBOX_ERROR, f"sandbox {why}: {run.stderr[-500:].decode(errors='replace')}")
    if run.timed_out:
        return verdict(ExecStatus.TIMEOUT, f"wall time over {limits.wall_seconds}s")
    if run.overflow:
        return verdict(ExecStatus.OUTPUT_LIMIT, f"output over {limits.max_output_bytes} bytes")
    if run.exit_code is None:  # the sandbox itself was killed, and not by us
        status = ExecStatus.MEMORY_LIMIT if run.oom_killed else ExecStatus.SANDBOX_ERROR
        return verdict(status, "sandbox killed from outside")
    code = run.exit_code
    sig = code - 128 if code > 128 and (code - 128) in signal.valid_signals() else None
    out_of_memory = run.oom_killed or _says_out_of_memory(run.stderr)
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and run.cpu >= limits.cpu_seconds):
        return verdict(ExecStatus.TIMEOUT, f"CPU time over {limits.cpu_seconds}s", exit_code=code, signal=sig)
    if code != 0:
        status = ExecStatus.MEMORY_LIMIT if out_of_memory else ExecStatus.RUNTIME_ERROR
        detail = {signal.SIGXFSZ: "file size limit"}.get(sig, f"killed by signal {sig}" if sig else "")
        return verdict(status, detail or (run.note if out_of_memory else ""), exit_code=code, signal=sig)
    return verdict(ExecStatus.OK, exit_code=0)


@dataclass(frozen=True)
class LanguagePlan:
    main_file: str
    compile_cmd: str | None  # a shell line run in WORK_DIR that writes the binary to ./prog
    run_cmd: tuple[str, ...]  # "{python}" and "{main}" are filled in


LANGUAGES: dict[str, LanguagePlan] = {
    "python": LanguagePlan("main.py", None, ("{python}", "{main}")),
    "bash": LanguagePlan("main.sh", None, ("/bin/bash", "{main}")),
    "c": LanguagePlan("main.c", "gcc -O2 -pipe -std=gnu11 -o prog main.c -lm", ("./prog",)),
    "cpp": LanguagePlan("main.cpp", "g++ -O2 -pipe -std=gnu++17 -o prog main.cpp", ("./prog",)),
}
_ALIASES = {"python3": "python", "py": "python", "sh": "bash", "c++": "cpp", "cxx": "cpp"}


def canonical_language(language: str) -> str:
    """'Python3' -> 'python'; raises ValueError for a language we cannot run."""
    name = _ALIASES.get(language.lower(), language.lower())
    if name not in LANGUAGES:
        raise ValueError(f"unsupported language {language!r}; supported: {sorted(LANGUAGES)}")
    return name


def language_plan(language: str) -> LanguagePlan:
    return LANGUAGES[canonical_language(language)]


class Sandbox:
    """Runs ExecRequests on a backend: writes the sources, compiles (cached), runs."""

    def __init__(self, backend: Backend, compile_cache_size: int = 64):
        self.backend = backend
        self._binaries: OrderedDict[str, ExecResult] = OrderedDict()
        self._cache_size = compile_cache_size
        self._lock = threading.Lock()

    def __call__(self, request: ExecRequest) -> ExecResult:
        return self.execute(request)

    def execute(self, request: ExecRequest) -> ExecResult:
        try:
            plan = language_plan(request.language)
        except ValueError as err:
            return ExecResult.sandbox_error(str(err))
        files = dict(request.files)
        main = request.main or plan.main_file
        if request.code:
            files[plan.main_file] = request.code.encode()
            main = plan.main_file
        if main not in files and plan.compile_cmd is None:
            return ExecResult.sandbox_error(f"entry file {main!r} is not among the files")
        if plan.compile_cmd is not None:
            built = self._compile(plan, files, request.compile_limits)
            if not built.ok:
                return built
            files["prog"] = built.stdout
        argv = [part.format(python=self.backend.python, main=main) for part in plan.run_cmd]
        return self.backend.run(argv + list(request.argv), files, request.stdin, request.limits)

    def _compile(self, plan: LanguagePlan, files: Mapping[str, bytes], limits: Limits) -> ExecResult:
        """Compile in a sandbox of its own; the binary comes back on stdout. Cached by source."""
        digest = hashlib.sha256(plan.compile_cmd.encode())
        for name in sorted(files):
            digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
        key = digest.hexdigest()
        with self._lock:
            if key in self._binaries:
                self._binaries.move_to_end(key)
                return self._binaries[key]
        line = f"{plan.compile_cmd} >&2 && cat prog"
        result = self.backend.run(["/bin/sh", "-c", line], files, b"", limits)
        if result.status in (ExecStatus.RUNTIME_ERROR, ExecStatus.MEMORY_LIMIT, ExecStatus.TIMEOUT):
            result = result.model_copy(update={"status": ExecStatus.COMPILE_ERROR, "stdout": b"",
                                               "detail": f"compile: {result.status.value} {result.detail}"})
        if result.status in (ExecStatus.OK, ExecStatus.COMPILE_ERROR):
            with self._lock:
                self._binaries[key] = result
                while len(self._binaries) > self._cache_size:
                    self._binaries.popitem(last=False)
        return result


def choose_backend(kind: Literal["auto", "docker", "jail"] = "auto") -> Backend:
    """Docker where an engine answers (production), else the local bubblewrap jail."""
    from svc_sandbox.docker_backend import DockerBackend
    from svc_sandbox.jail import JailBackend
    if kind == "docker" or (kind == "auto" and DockerBackend.available()):
        return DockerBackend()
    if kind in ("jail", "auto"):
        missing = JailBackend.missing()
        if missing:
            raise RuntimeError(f"no sandbox backend: no Docker engine and the jail lacks {missing} "
                               "(run scripts/system_deps.sh)")
        return JailBackend()
    raise ValueError(f"unknown backend {kind!r}")
