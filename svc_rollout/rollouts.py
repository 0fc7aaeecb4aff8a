"""A finished group as the records it becomes: one Rollout per completion, tagged with the policy that
sampled it."""
from __future__ import annotations

import logging

from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.runtime import logs
from m1flow.trace.ids import rollout_id_for
from m1flow.engines.base import Engine, GroupResult
from m1flow.engines.prompts import prompt_text

log = logging.getLogger(__name__)


def rollouts_for(prompt: events.Prompt, result: GroupResult, engine: Engine, run_id: str) -> list[events.Rollout]:
    """The group's rollouts; run_id: the service's, for a prompt that names none."""
    request, version = result.request, result.version
    group_id = request.key
    run_id = prompt.header.trace.run_id or run_id
    out = []
    with logs.trace(run_id=run_id, group_id=group_id):
        for i, sample in enumerate(result.samples):
            rollout_id = rollout_id_for(group_id, i)
            out.append(events.Rollout(
                header=codec.header("rollout", run_id=run_id, group_id=group_id, rollout_id=rollout_id,
                                    policy_version=version, message_id=f"{rollout_id}@v{version}"),
                rollout_id=rollout_id, group_id=group_id, prompt_id=prompt.prompt_id, index=i,
                group_size=request.n, task_type=prompt.task_type, prompt_text=prompt_text(prompt),
                prompt_token_ids=request.prompt_ids, token_ids=sample.tokens, logprobs=sample.logprobs,
                response_text=engine.decode(sample.tokens), finish_reason=sample.finish_reason,
                policy_version=version, verifier=prompt.verifier, max_new_tokens=request.max_new_tokens,
                engine=engine.name, temperature=request.temperature, top_p=request.top_p,
                source=prompt.source, domain=prompt.domain))
            if sample.routed_experts is not None:
                out[-1].routed_experts.CopyFrom(sample.routed_experts)
        log.info("generated group of %s on policy v%s", request.n, version)
    return out
