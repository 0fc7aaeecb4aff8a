"""Task payloads stored once by content and read back verified; the SWE scorer takes them by URI."""
import json

import pytest

from m1flow.source import swe_verifier_spec
from m1flow.task_store import TaskStore, TaskStoreError, read_payload
from m1flow.status import Status
from svc_reward.scorers import ScorerRegistry
from svc_reward.verifiers.swe import SweKind


def test_put_is_content_addressed_idempotent_and_verified_on_read(tmp_path):
    store = TaskStore.in_run_dir(tmp_path)
    uri = store.put(b"snapshot bytes")
    assert uri == store.put(b"snapshot bytes") and uri.startswith("file://") and "/tasks/" in uri
    assert read_payload(uri) == b"snapshot bytes"
    assert len(list((tmp_path / "tasks").iterdir())) == 1  # no temporary file left behind
    path = next((tmp_path / "tasks").iterdir())
    path.write_bytes(b"snapshot bytez")
    with pytest.raises(TaskStoreError, match="does not match its SHA-256 name"):
        read_payload(uri)
    path.unlink()
    with pytest.raises(TaskStoreError, match="cannot be read"):
        read_payload(uri)
    with pytest.raises(TaskStoreError, match="scheme 's3'"):
        read_payload("s3://bucket/abc")


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
    registry.register("swe", SweKind(runner.run_tests))
    registry.score("```diff\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n```", spec)
    assert runner.tars == [b"repo.tar"]
    next(tmp_path.iterdir()).write_bytes(b"tampered")
    result = registry.score("```diff\n--- a/x\n+++ b/x\n```", spec)
    assert result.status is Status.JUDGE_ERROR and not result.usable and "SHA-256" in result.detail
