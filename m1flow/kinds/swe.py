"""`swe`: a repository snapshot (the task store, `payload_uri`) whose FAIL_TO_PASS tests must pass after
the answer's patch, run in svc_sandbox; the answer is the last fenced diff, the gold a reference patch."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from m1flow.kinds.base import Kind, KindSchema, NoGold, OpenSpec, SpecError, Style, Verifier, declare

NonEmpty = Annotated[str, Field(min_length=1)]
# A patch that changes no code (it adds one empty file): the unfixed tree, run through the same path a
# rollout takes; a task it resolves tests nothing (m1flow.kinds.probe sends it, `m1flow data validate`)
EMPTY_PATCH = "diff --git a/.m1flow-no-change b/.m1flow-no-change\nnew file mode 100644\nindex 0000000..e69de29\n"


class SweSpec(OpenSpec):
    fail_to_pass: Annotated[list[NonEmpty], Field(min_length=1)]
    pass_to_pass: list[NonEmpty] = []
    test_files: list[NonEmpty] = []  # a patch that edits or deletes one scores 0 (besides any test-like path)
    test_command: str | None = None
    limits: dict[str, Any] | None = None
    repo_tar: str | None = None  # base64, prompts from before the task store


class SweSchema(KindSchema):
    """gold: the reference patch (optional)."""
    spec: SweSpec

    @model_validator(mode="after")
    def _snapshot(self) -> "SweSchema":
        if not self.payload_uri and not self.spec.repo_tar:
            raise SpecError("verifier.payload_uri", "no repository snapshot: give payload_uri (task store) "
                                                    "or spec.repo_tar")
        return self


def _gold(verifier: Verifier, style: Style) -> str:
    if not verifier.gold.strip():
        raise NoGold("swe without a reference patch (verifier.gold)")
    return style.write(verifier.gold.rstrip())


SWE = declare(Kind(name="swe", schema=SweSchema, gold=_gold, sandbox=True,
                   styles=(Style("diff", reads="a fenced diff", writes="```diff\n{answer}\n```"),)))
