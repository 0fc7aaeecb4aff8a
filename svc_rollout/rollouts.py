"""A finished group as the records it becomes: one Rollout per completion, tagged with the policy that
sampled it, and what of its prompt the engine and the verifiers read."""
from __future__ import annotations

import logging

from m1flow import chat
from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.runtime import logs
from svc_rollout.engines.base import Engine, GroupResult

log = logging.getLogger(__name__)


def prompt_input(prompt: events.Prompt) -> chat.PromptInput:
    """What the engine tokenizes: the whole conversation when the prompt carries one, else its text."""
    return chat.conversation(prompt.messages) if prompt.messages else prompt.text


def prompt_text(prompt: events.Prompt) -> str:
    """The Rollout's prompt_text (what verifiers and judges read): the text, else the last user turn."""
    if prompt.text or not prompt.messages:
        return prompt.text
    users = [m.content for m in prompt.messages if m.role == "user"]
    return users[-1] if users else prompt.messages[-1].content


def rollouts_for(prompt: events.Prompt, result: GroupResult, engine: Engine, run_id: str) -> list[events.Rollout]:
    """The group's rollouts; run_id: the service's, for a prompt that names none."""
    request, version = result.request, result.version
    group_id = request.key
    run_id = prompt.header.trace.run_id or run_id
    out = []
    with logs.trace(run_id=run_id, group_id=group_id):
        for i, sample in enumerate(result.samples):
            rollout_id = f"{group_id}/{i}"
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
        log.info("generated group of %s on policy v%s", request.n, version)
    return out
