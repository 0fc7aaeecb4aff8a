"""Task payloads stored once by content and read back verified; the SWE scorer takes them by URI, and
only as a regular file of its store within the size cap."""
import json
import os

import pytest

from m1flow.source import swe_verifier_spec
from m1flow.task_store import TaskStore, TaskStoreError, sha256_hex
from m1flow.status import Status
from svc_reward.scorers import ScorerRegistry
from svc_reward.verifiers.swe import SweKind


def test_put_is_content_addressed_idempotent_and_verified_on_read(tmp_path):
    store = TaskStore.in_run_dir(tmp_path)
    uri = store.put(b"snapshot bytes")
    assert uri == store.put(b"snapshot bytes") and uri.startswith("file://") and "/tasks/" in uri
    assert store.read(uri) == b"snapshot bytes"
    assert len(list((tmp_path / "tasks").iterdir())) == 1  # no temporary file left behind
    path = next((tmp_path / "tasks").iterdir())
    path.write_bytes(b"snapshot bytez")
    with pytest.raises(TaskStoreError, match="does not match its SHA-256 name"):
        store.read(uri)
    path.unlink()
    with pytest.raises(TaskStoreError, match="cannot be read"):
        store.read(uri)
    with pytest.raises(TaskStoreError, match="scheme 's3'"):
        store.read("s3://bucket/abc")


def test_only_a_regular_file_of_the_store_within_the_cap_is_read(tmp_path):
    """The reader is the attacker's choice of path: a FIFO (which would block a plain read), a
    device, a symlink, a folder outside the store (`..` included), a file over the cap are refused
    at once with the reason; a file that fits is read whole, its hash checked as it streams."""
    store = TaskStore(tmp_path / "tasks", max_payload_bytes=100)
    fits = store.put(b"y" * 100)
    assert store.read(fits) == b"y" * 100 and store.read(fits, keep=False) == b""
    over = store.root / sha256_hex(b"x" * 101)
    over.write_bytes(b"x" * 101)
    fifo = store.root / sha256_hex(b"fifo")
    os.mkfifo(fifo)
    link = store.root / sha256_hex(b"link")
    link.symlink_to("/dev/zero")
    (tmp_path / "elsewhere").mkdir()
    elsewhere = tmp_path / "elsewhere" / sha256_hex(b"e")
    elsewhere.write_bytes(b"e")
    dotdot = f"{store.root.as_uri()}/../elsewhere/{sha256_hex(b'e')}"
    for uri, reason in ((over.as_uri(), "101 bytes, over the cap of 100"),
                        (fifo.as_uri(), r"not a regular file \(a FIFO\)"),
                        (link.as_uri(), "a symlink"), ("file:///dev/zero", "not a SHA-256"),
                        (f"file:///dev/{sha256_hex(b'z')}", "outside the task store"),
                        (elsewhere.as_uri(), "outside the task store"), (dotdot, "outside the task store"),
                        (f"file://host{over}", "names host 'host'")):
        with pytest.raises(TaskStoreError, match=reason):
            store.read(uri)


class Runner:
    """Stands in for the sandbox client: records the snapshot it was handed (and runs nothing)."""

    def __init__(self) -> None:
        self.tars: list[bytes] = []

    def run_tests(self, request):  # noqa: ANN001, ANN201
        self.tars.append(request.repo_tar)
        raise ConnectionError("not a real sandbox")


def test_the_swe_scorer_hands_the_stored_bytes_to_the_sandbox_and_a_bad_payload_is_ours(tmp_path):
    store = TaskStore(tmp_path)
    spec = swe_verifier_spec(store, b"repo.tar", ["test_a"], test_command="pytest -q")
    assert json.loads(spec.spec_json) == {"fail_to_pass": ["test_a"], "pass_to_pass": [], "test_command": "pytest -q"}
    runner = Runner()
    registry = ScorerRegistry()
    registry.register("swe", SweKind(runner.run_tests, store))
    registry.score("```diff\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n```", spec)
    assert runner.tars == [b"repo.tar"]
    next(tmp_path.iterdir()).write_bytes(b"tampered")
    result = registry.score("```diff\n--- a/x\n+++ b/x\n```", spec)
    assert result.status is Status.JUDGE_ERROR and not result.usable and "SHA-256" in result.detail
