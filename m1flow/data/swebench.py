"""SWE-bench instances (JSONL, Parquet or a datasets directory) as task records of the `swe` kind.

Why a mapping and not a copy of SWE-bench's harness: m1flow grades by the same rule (svc_reward's
swe verifier) from a repository snapshot in the task store, so an instance only has to say where
its snapshot is and which tests decide. The instance's fields: `instance_id`, `repo`,
`base_commit`, `patch` (the gold), `test_patch`, `problem_statement` (the prompt), `FAIL_TO_PASS`
and `PASS_TO_PASS` (lists, or JSON text of lists as the Hub's copy writes them), `version`,
`environment_setup_commit`. Nothing here can reach GitHub, so the repository comes by reference:
`payload_uri` names a snapshot in the task store of `repo` at `base_commit` with `test_patch`
applied (`instance_snapshot` makes one from a checkout). The model never sees the tree, only the
problem statement, and the grader refuses a patch that edits a test file, so grading that tree is
SWE-bench's "apply the model patch, then the test patch". m1flow's own fields, all optional:
`test_cmd` (default: pytest with per-test lines), `environment` (the cached environment that runs
the tests, by key), `license`.
"""
from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from m1flow.data.importers import IMPORTERS, ImportContext
from m1flow.data.record import SpecError, TaskRecord
from m1flow.task_store import snapshot_tar

DEFAULT_TEST_COMMAND = "python -m pytest -rA -v -p no:cacheprovider"  # svc_sandbox.api's, without importing it
REQUIRED = ("instance_id", "repo", "base_commit", "patch", "problem_statement", "FAIL_TO_PASS")
SPEC_FIELDS = ("instance_id", "repo", "base_commit", "version", "environment_setup_commit", "environment")
_DIFF_FILES = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)
PROMPT = ("You are working in the repository {repo} (commit {commit}). A user reports:\n\n{issue}\n\n"
          "Fix the problem in the repository's code (not its tests). Answer with one unified diff, "
          "paths relative to the repository root, in a ```diff block.")


def id_list(value: Any, field_name: str) -> list[str]:
    """A FAIL_TO_PASS or PASS_TO_PASS cell: a list, or the JSON text of one (the Hub's parquet)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError as exc:
            raise SpecError(field_name, f"not a list nor JSON text of one: {exc}") from None
    if hasattr(value, "tolist"):  # a numpy array from a pandas-written file
        value = value.tolist()
    if not isinstance(value, list) or not all(isinstance(t, str) and t for t in value):
        raise SpecError(field_name, "must be a list of test ids (non-empty strings)")
    return value


def patch_files(patch: str) -> list[str]:
    """The paths a unified diff touches (both sides of a rename), in order."""
    found: list[str] = []
    for old, new in _DIFF_FILES.findall(patch or ""):
        found += [p for p in (old, new) if p not in found]
    return found


def files_of_tests(test_patch: str, ids: Sequence[str]) -> list[str]:
    """The files the grader treats as tests: those the test patch touches and those the test ids name."""
    named = [t.split("::", 1)[0] for t in ids if "::" in t]
    return list(dict.fromkeys(patch_files(test_patch) + named))


@IMPORTERS.register("swebench")
def from_swebench(row: dict[str, Any], index: int, ctx: ImportContext) -> TaskRecord:
    for name in REQUIRED:
        if row.get(name) in (None, ""):
            raise SpecError(name, "missing: a SWE-bench instance has it")
    uri = row.get("payload_uri")
    if not isinstance(uri, str) or not uri:
        raise SpecError("payload_uri", f"no repository snapshot for {row['repo']}@{row['base_commit']}: nothing "
                                       "here can fetch it; put one in the task store (m1flow.data.swebench."
                                       "instance_snapshot) and name it in payload_uri")
    f2p = id_list(row["FAIL_TO_PASS"], "FAIL_TO_PASS")
    p2p = id_list(row.get("PASS_TO_PASS") or [], "PASS_TO_PASS")
    if not f2p:
        raise SpecError("FAIL_TO_PASS", "empty: nothing decides whether the patch fixes the problem")
    spec: dict[str, Any] = {"fail_to_pass": f2p, "pass_to_pass": p2p,
                            "test_command": row.get("test_cmd") or DEFAULT_TEST_COMMAND,
                            "test_files": files_of_tests(str(row.get("test_patch") or ""), f2p + p2p)}
    spec.update({k: str(row[k]) for k in SPEC_FIELDS if row.get(k) not in (None, "")})
    prompt = PROMPT.format(repo=row["repo"], commit=str(row["base_commit"])[:12], issue=row["problem_statement"])
    return TaskRecord.model_validate({
        "id": str(row["instance_id"]), "source": ctx.source, "domain": ctx.domain or "reasoning", "prompt": prompt,
        "verifier": {"kind": "swe", "gold": row["patch"], "payload_uri": uri, "spec": spec},
        "license": str(row.get("license") or "")})


def instance_snapshot(checkout: str | Path, base_commit: str, test_patch: str = "") -> bytes:
    """The tar the grader runs: `checkout`'s tree at `base_commit` (git archive, no history) with
    `test_patch` applied; ValueError saying which step failed."""
    with tempfile.TemporaryDirectory(prefix="m1flow-instance-") as tmp:
        archive = subprocess.run(["git", "archive", "--format=tar", base_commit], cwd=checkout, capture_output=True)
        if archive.returncode:
            raise ValueError(f"base_commit {base_commit}: {archive.stderr.decode(errors='replace').strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        if test_patch.strip():
            applied = subprocess.run(["git", "apply", "-"], cwd=tmp, input=test_patch.encode(), capture_output=True)
            if applied.returncode:
                raise ValueError(f"test_patch does not apply at {base_commit}: "
                                 f"{applied.stderr.decode(errors='replace').strip()}")
        return snapshot_tar(tmp)
