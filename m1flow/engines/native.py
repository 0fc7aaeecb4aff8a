"""`native`: the hybrid model's own cached decoding (m1flow.model.sample_batch), batched across
prompts: each step prefills the prompts of a batch of groups and decodes all their samples together.

Runs the project's hybrid lightning-attention model only (any other architecture: `hf` or `vllm`).
With `record_routing` every sample carries the experts each MoE layer chose for it (R3,
m1flow.routed_experts), which the learner can replay.
"""
from __future__ import annotations

from pathlib import Path

from m1flow import checkpoint
from m1flow.contracts import events
from m1flow.device import resolve
from m1flow.model import sample_batch
from m1flow.routed_experts import encode
from m1flow.sampling import generator
from m1flow.engines.base import BatchEngine, GroupRequest, Sample

FINISH = {"stop": events.FINISH_REASON_STOP, "length": events.FINISH_REASON_LENGTH,
          "repetition": events.FINISH_REASON_REPETITION}


class NativeEngine(BatchEngine):
    name = "native"

    def __init__(self, batch_groups: int = 8, group_size: int = 8, device: str = "auto",
                 record_routing: bool = False) -> None:
        super().__init__(batch_groups, group_size)
        self.device = resolve(device)
        self.record_routing = record_routing

    def _load_whole(self, directory: Path) -> None:
        if not checkpoint.is_hybrid(directory):
            raise checkpoint.PolicyLoadError(f"{directory}: the native engine runs the hybrid model only; use hf or vllm")
        self.model = checkpoint.load_model(directory, self.device)
        self.tokenizer = checkpoint.load_tokenizer(directory)

    def generate(self, batch: list[GroupRequest]) -> list[list[Sample]]:
        first = batch[0]
        completions = sample_batch(
            self.model, [r.prompt_ids for r in batch], n=first.n, max_new_tokens=[r.max_new_tokens for r in batch],
            temperature=first.temperature, top_p=first.top_p, eos_id=self.eos_id, early_stop_run=first.early_stop_run,
            early_stop_prob=first.early_stop_prob, generators=[generator(r.seed, self.device) for r in batch],
            record_routing=self.record_routing)
        experts = self.model.config.num_local_experts
        return [[Sample(c.tokens, c.logprobs, FINISH[c.finish_reason],
                        encode(c.experts, experts) if c.experts is not None else None) for c in group]
                for group in completions]
