"""What a sandboxed run may use, and what it reports back.

Why one module: every backend (local jail, Docker) and every caller (code and SWE rewards, the
gRPC server) must agree on the same limits and the same verdicts. The field names follow the
`Limits`, `ExecuteRequest` and `ExecuteReply` messages in proto/m1flow/v1/services.proto, so the
gRPC layer is a field-by-field copy. Defaults are small: they suit a 2-core shared machine.
"""
from __future__ import annotations

from enum import Enum
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, field_validator

MB = 1 << 20


class Limits(BaseModel):
    """Hard limits of one run. Enforced by rlimits, cgroups (where available) and a wall deadline."""
    model_config = ConfigDict(frozen=True)

    cpu_seconds: float = Field(2.0, gt=0, description="CPU time per process (RLIMIT_CPU)")
    wall_seconds: float = Field(5.0, gt=0, description="wall-clock deadline of the whole run")
    memory_bytes: int = Field(256 * MB, gt=0, description="address space per process and cgroup memory")
    max_processes: int = Field(64, gt=0, description="processes/threads of the run (pids cgroup, RLIMIT_NPROC)")
    max_file_bytes: int = Field(16 * MB, gt=0, description="largest file the run may write (RLIMIT_FSIZE)")
    max_output_bytes: int = Field(1 * MB, gt=0, description="stdout and stderr are each cut here")
    max_open_files: int = Field(64, gt=3, description="open file descriptors (RLIMIT_NOFILE)")
    work_dir_bytes: int = Field(64 * MB, gt=0, description="size of the private writable directory")
    cpus: float = Field(1.0, gt=0, description="CPU share of the run (cgroup quota) where available")
    network: bool = Field(False, description="False: a network namespace with no route out")
    uid: int = Field(65534, ge=1, description="unprivileged user the program runs as")


def compile_limits() -> Limits:
    """Limits of a compile step: compilers need more memory and time than the programs they build."""
    return Limits(cpu_seconds=10, wall_seconds=20, memory_bytes=1024 * MB, max_processes=32,
                  max_file_bytes=64 * MB, max_output_bytes=64 * MB, max_open_files=256)


class ExecStatus(str, Enum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    SANDBOX_ERROR = "sandbox_error"


class ExecRequest(BaseModel):
    """Run `code` (or `files` with `main` as the entry point) in `language` on `stdin`."""
    language: str = Field("python", description="python, c, cpp or bash")
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
        """Files land inside the work dir only: no absolute paths, no '..'."""
        for name in files:
            path = PurePosixPath(name)
            if not name or path.is_absolute() or ".." in path.parts:
                raise ValueError(f"file path must be relative and stay inside the work dir: {name!r}")
        return files


class ExecResult(BaseModel):
    """The verdict of one run. `sandbox_error` means our infrastructure failed, not the program."""
    status: ExecStatus
    exit_code: int | None = None
    signal: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    memory_peak_bytes: int = Field(0, description="cgroup high-water mark; 0 when unknown")
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is ExecStatus.OK

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")

    @classmethod
    def sandbox_error(cls, detail: str) -> ExecResult:
        return cls(status=ExecStatus.SANDBOX_ERROR, detail=detail[:2000])
