"""What a caller of the sandbox sends and gets back: limits, requests, results.

Why one module: every backend (local jail, Docker), the gRPC server and every caller (code and SWE
rewards, through `svc_sandbox.client`) must agree on the same limits and the same verdicts. Field
names follow `Limits`, `ExecuteRequest`, `ExecuteReply`, `RunTestsRequest` and `RunTestsReply` in
proto/m1flow/v1/services.proto, so the gRPC layer is a field-by-field copy. Verdicts are the
contract's one `Status` enum. Defaults are small: they suit a 2-core shared machine.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, field_validator

from m1flow.status import Status

MB = 1 << 20
MAX_PATH_BYTES = 1024  # a file path inside the work dir
MAX_NAME_BYTES = 255  # one component of it (the kernel's NAME_MAX)


class InvalidRequest(ValueError):
    """The caller's mistake (a bad field, an unsupported language), never the sandbox's failure.

    The service answers it with INVALID_ARGUMENT naming `field`; the client raises it again.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class Limits(BaseModel):
    """Hard limits of one run. Enforced by cgroups (where available), rlimits and a wall deadline."""
    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    cpu_seconds: float = Field(2.0, gt=0, description="CPU time of the whole run (cgroup), and per process (RLIMIT_CPU)")
    wall_seconds: float = Field(5.0, gt=0, description="wall-clock deadline of the whole run")
    memory_bytes: int = Field(256 * MB, gt=0, description="address space per process and cgroup memory")
    max_processes: int = Field(64, gt=0, description="processes/threads of the run (pids cgroup, RLIMIT_NPROC)")
    max_file_bytes: int = Field(16 * MB, gt=0, description="largest file the run may write (RLIMIT_FSIZE)")
    max_output_bytes: int = Field(1 * MB, gt=0, description="stdout and stderr are each cut here")
    max_open_files: int = Field(64, gt=3, description="open file descriptors (RLIMIT_NOFILE)")
    work_dir_bytes: int = Field(64 * MB, gt=0, description="size of the private writable directory")
    cpus: float = Field(1.0, gt=0, description="CPU share of the run (cgroup quota) where available")
    network: bool = Field(False, description="False: a network namespace with no route out (never on the wire)")


def compile_limits() -> Limits:
    """Limits of a compile step: compilers need more memory and time than the programs they build."""
    return Limits(cpu_seconds=10, wall_seconds=20, memory_bytes=1024 * MB, max_processes=32,
                  max_file_bytes=64 * MB, max_output_bytes=64 * MB, max_open_files=256)


def swe_limits() -> Limits:
    """Test suites need more than a contest program: a minute of CPU, 1 GB, a 512 MB tree."""
    return Limits(cpu_seconds=60, wall_seconds=120, memory_bytes=1024 * MB, max_processes=64,
                  max_file_bytes=64 * MB, max_output_bytes=4 * MB, max_open_files=512,
                  work_dir_bytes=512 * MB, cpus=1.0)


def check_path(name: str) -> str:
    """A file lands inside the work dir only: relative, no '..', no NUL, names the kernel accepts."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\0" in name:
        raise ValueError(f"file path must be relative, without '..' or NUL, inside the work dir: {name[:100]!r}")
    if len(name.encode()) > MAX_PATH_BYTES or any(len(p.encode()) > MAX_NAME_BYTES for p in path.parts):
        raise ValueError(f"file path over {MAX_PATH_BYTES} bytes or a name over {MAX_NAME_BYTES}: {name[:100]!r}")
    return name


class ExecRequest(BaseModel):
    """Run `code` (or `files` with `main` as the entry point) in `language` on `stdin`."""
    language: str = Field("python", description="python, c, cpp or bash (or an alias, see languages.py)")
    code: str = Field("", description="the main source; written as the language's main file")
    files: dict[str, bytes] = Field(default_factory=dict, description="relative path -> content")
    main: str = Field("", description="entry file among `files` when `code` is empty")
    stdin: bytes = b""
    argv: list[str] = Field(default_factory=list, description="arguments after the program")
    limits: Limits = Field(default_factory=Limits)
    compile_limits: Limits = Field(default_factory=compile_limits)

    @field_validator("files")
    @classmethod
    def _relative_paths(cls, files: dict[str, bytes]) -> dict[str, bytes]:
        for name in files:
            check_path(name)
        return files

    @field_validator("argv")
    @classmethod
    def _no_nul(cls, argv: list[str]) -> list[str]:
        """execve cannot pass a NUL byte: refuse it here rather than fail inside the sandbox."""
        if any("\0" in arg for arg in argv):
            raise ValueError("an argument holds a NUL byte")
        return argv


class ExecResult(BaseModel):
    """The verdict of one run. SANDBOX_ERROR means our infrastructure failed, not the program."""
    status: Status
    exit_code: int | None = None
    signal: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    wall_seconds: float = 0.0
    cpu_seconds: float = Field(0.0, description="the whole run's CPU time; 0 when unknown")
    memory_peak_bytes: int = Field(0, description="cgroup high-water mark; 0 when unknown")
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")

    @classmethod
    def sandbox_error(cls, detail: str) -> ExecResult:
        return cls(status=Status.SANDBOX_ERROR, detail=detail[:2000])


DEFAULT_TEST_COMMAND = "python -m pytest -rA -v -p no:cacheprovider"


@dataclass
class RunTestsRequest:
    """Mirrors RunTestsRequest in proto/m1flow/v1/services.proto."""
    repo_tar: bytes
    patch: str
    fail_to_pass: list[str]
    pass_to_pass: list[str] = field(default_factory=list)
    test_command: str = DEFAULT_TEST_COMMAND
    limits: Limits | None = None  # None: swe_limits()
    environment: str = ""  # key of a built m1flow.data.swe_env environment the tests run in; "": none


@dataclass
class RunTestsResult:
    """Mirrors RunTestsReply: per-test statuses; the grade is the caller's."""
    status: Status  # OK when the tests ran (whatever they reported)
    patch_applied: bool = False
    apply_method: str = ""
    tests: dict[str, str] = field(default_factory=dict)  # test id -> PASSED, FAILED, ...
    detail: str = ""
    log: str = ""


Executor = Callable[[ExecRequest], ExecResult]  # the local `Sandbox` and `SandboxClient` both are one
TestsRunner = Callable[[RunTestsRequest], RunTestsResult]  # `Sandbox.run_tests`, `SandboxClient.run_tests`
