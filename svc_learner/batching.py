"""ScoredGroups (as the reward service wrote them) into the tensors one learner step trains on."""
from __future__ import annotations

import torch

from m1flow.contracts import events
from m1flow.group_totals import GroupTotals
from m1flow.verdicts import INFRA_FAILURE_STATUSES
from svc_learner.update import Batch, pack_sequences


def to_batch(groups: list[events.ScoredGroup], pad_id: int = 0) -> Batch | None:
    """Right-padded prompt+response sequences; None when no sample can be trained on.

    Samples whose score is an infrastructure failure are left out here: their reward says nothing
    about the sample. Dropped groups are kept and flagged so the update counts them.
    """
    rows = []
    for gi, group in enumerate(groups):
        for s in group.samples:
            if s.status in INFRA_FAILURE_STATUSES or not s.token_ids:
                continue
            rows.append((gi, group.dropped, s))
    if not rows:
        return None
    input_ids, mask, logp = pack_sequences([list(s.prompt_token_ids) for _, _, s in rows],
                                           [list(s.token_ids) for _, _, s in rows],
                                           [list(s.logprobs) for _, _, s in rows], pad_id)
    return Batch(
        input_ids=input_ids, response_mask=mask, rollout_logp=logp,
        advantages=torch.tensor([s.advantage for _, _, s in rows], dtype=torch.float32),
        policy_version=torch.tensor([s.policy_version for _, _, s in rows], dtype=torch.long),
        group_ids=torch.tensor([gi for gi, _, _ in rows], dtype=torch.long),
        dropped=torch.tensor([d for _, d, _ in rows], dtype=torch.bool))


def group_stats(groups: list[events.ScoredGroup]) -> dict[str, float]:
    """Reward, accuracy and length of the samples a batch was made of, for metrics and the monitor."""
    return GroupTotals.of(groups).means()
