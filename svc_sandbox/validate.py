"""The API edge: every field of a request checked, and capped by the server's config, before a run.

Why here and not in the backends: a value that is not finite, is negative, absurd or over the
server's cap is the caller's mistake and must come back as INVALID_ARGUMENT naming the field,
before anything (a memory file, a process, a container) is taken on its behalf.
"""
from __future__ import annotations

import math

from pydantic import BaseModel, Field, ValidationError, field_validator

from m1flow.contracts import rpc
from m1flow.data.swe_env import KEY as ENV_KEY
from svc_sandbox.api import MB, ExecRequest, InvalidRequest, Limits, RunTestsRequest, check_path, swe_limits
from svc_sandbox.languages import canonical_language

LIMIT_FIELDS = tuple(name for name in Limits.model_fields if name != "network")  # the wire's Limits fields


def _largest_limits() -> Limits:
    return Limits(cpu_seconds=120, wall_seconds=300, memory_bytes=2048 * MB, max_processes=256,
                  max_file_bytes=256 * MB, max_output_bytes=16 * MB, max_open_files=1024,
                  work_dir_bytes=1024 * MB, cpus=2.0)


class RequestCaps(BaseModel):
    """The most any request may ask for; larger values are refused, never quietly cut."""
    limits: Limits = Field(default_factory=_largest_limits,
                           description="the largest limits a run may have (output: each stream, held in our memory)")
    input_bytes: int = Field(48 * MB, gt=0, description="code, files, stdin, snapshot and patch together")
    files: int = Field(1000, gt=0, description="files in one request")
    argv: int = Field(256, ge=0, description="program arguments in one request")
    arg_bytes: int = Field(4096, gt=0, description="one argument, test id or test command")
    test_ids: int = Field(10_000, ge=0, description="FAIL_TO_PASS and PASS_TO_PASS ids together")

    @field_validator("limits", mode="before")
    @classmethod
    def _over_the_largest(cls, given: object) -> object:
        """Caps given in part (`caps: {limits: {wall_seconds: 60}}`) keep the other caps' defaults."""
        return {**_largest_limits().model_dump(), **given} if isinstance(given, dict) else given

    def check_limits(self, limits: Limits, where: str = "limits") -> None:
        """InvalidRequest naming `where.<field>` for the first limit over its cap."""
        for name in LIMIT_FIELDS:
            value, cap = getattr(limits, name), getattr(self.limits, name)
            if value > cap:
                raise InvalidRequest(f"{where}.{name}", f"{value} is over the server's cap of {cap}")

    def check_defaults(self) -> None:
        """The service's own defaults must fit: a caller who sets nothing is never refused."""
        for where, limits in (("defaults", Limits()), ("SWE defaults", swe_limits())):
            try:
                self.check_limits(limits, where)
            except InvalidRequest as err:
                raise ValueError(f"caps below the {err}") from None


def limits_from_proto(msg: rpc.Limits, base: Limits, caps: RequestCaps, where: str = "limits") -> Limits:
    """Unset (zero) fields keep `base`'s values; NaN, infinities, negatives and values over a cap are refused."""
    given = {}
    for name in LIMIT_FIELDS:
        value = getattr(msg, name)
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidRequest(f"{where}.{name}", f"must be a finite number, not {value}")
        if value < 0:
            raise InvalidRequest(f"{where}.{name}", f"must not be negative ({value})")
        if value:
            given[name] = value
    try:
        limits = Limits(**{**base.model_dump(), **given})
    except ValidationError as err:
        first = err.errors()[0]
        raise InvalidRequest(f"{where}.{first['loc'][0]}", first["msg"]) from None
    caps.check_limits(limits, where)
    return limits


def _check_text(field: str, text: str, caps: RequestCaps) -> None:
    if "\0" in text:
        raise InvalidRequest(field, "holds a NUL byte")
    if len(text.encode()) > caps.arg_bytes:
        raise InvalidRequest(field, f"over the server's cap of {caps.arg_bytes} bytes")


def _check_input_bytes(total: int, caps: RequestCaps) -> None:
    if total > caps.input_bytes:
        raise InvalidRequest("input", f"{total} bytes of code, files and input, over the server's cap of "
                                      f"{caps.input_bytes}")


def request_from_proto(msg: rpc.ExecuteRequest, caps: RequestCaps) -> ExecRequest:
    """The request as the library's type, every field checked; InvalidRequest names the first bad one."""
    language = canonical_language(msg.language or "python")
    if len(msg.files) > caps.files:
        raise InvalidRequest("files", f"{len(msg.files)} files, over the server's cap of {caps.files}")
    files: dict[str, bytes] = {}
    for i, file in enumerate(msg.files):
        try:
            check_path(file.path)
        except ValueError as err:
            raise InvalidRequest(f"files[{i}].path", str(err)) from None
        if file.path in files:
            raise InvalidRequest(f"files[{i}].path", f"{file.path[:100]!r} given twice")
        files[file.path] = file.content
    _check_input_bytes(len(msg.code.encode()) + len(msg.stdin) + sum(map(len, files.values())), caps)
    if len(msg.argv) > caps.argv:
        raise InvalidRequest("argv", f"{len(msg.argv)} arguments, over the server's cap of {caps.argv}")
    for i, arg in enumerate(msg.argv):
        _check_text(f"argv[{i}]", arg, caps)
    limits = limits_from_proto(msg.limits, Limits(), caps)
    return ExecRequest(language=language, code=msg.code, stdin=msg.stdin, argv=list(msg.argv), files=files,
                       limits=limits)


def tests_request_from_proto(msg: rpc.RunTestsRequest, caps: RequestCaps) -> RunTestsRequest:
    """Unset limits (or unset fields of them) are the SWE defaults, not the contest-program ones."""
    _check_input_bytes(len(msg.repo_tar) + len(msg.patch.encode()), caps)
    if msg.test_command:
        _check_text("test_command", msg.test_command, caps)
    if msg.environment and not ENV_KEY.match(msg.environment):
        raise InvalidRequest("environment", f"{msg.environment[:100]!r} is not an environment's key (one plain "
                                            "folder name, as m1flow.data.swe_env makes them)")
    ids = [("fail_to_pass", list(msg.fail_to_pass)), ("pass_to_pass", list(msg.pass_to_pass))]
    if sum(len(values) for _, values in ids) > caps.test_ids:
        raise InvalidRequest("fail_to_pass", f"more than the server's cap of {caps.test_ids} test ids")
    for field, values in ids:
        for i, test_id in enumerate(values):
            _check_text(f"{field}[{i}]", test_id, caps)
    limits = limits_from_proto(msg.limits, swe_limits(), caps) if msg.HasField("limits") else None
    request = RunTestsRequest(repo_tar=msg.repo_tar, patch=msg.patch, fail_to_pass=ids[0][1],
                              pass_to_pass=ids[1][1], limits=limits, environment=msg.environment)
    if msg.test_command:
        request.test_command = msg.test_command
    return request
