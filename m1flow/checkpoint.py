"""The on-disk form of a policy and of a learner checkpoint; the one module that knows its files.

A policy is a Hugging Face model directory: `config.json`, safetensors weights (one file, or shards
with `model.safetensors.index.json` when large), `tokenizer.json` + `tokenizer_config.json` with the
chat template, `generation_config.json`. Any causal LM of that form loads through transformers'
Auto classes (the hybrid model registers itself with them). A hybrid policy also carries
self-contained modeling files and an `auto_map` (m1flow.model.remote_code), so it opens in plain
transformers with `trust_remote_code=True` where m1flow is not installed; vLLM opens it through
the out-of-tree model in m1flow.engines.vllm_hybrid. transformers' own MiniMax directories
load as the hybrid model (m1flow.model.interop), or are refused where the two differ in meaning. A learner checkpoint is a policy plus what resuming needs:
`optimizer.pt` and `learner_state.json` (version, step, the Kafka offsets consumed, the groups
applied and those skipped as having nothing to teach). Checkpoints are written atomically (temp dir
+ rename), the newest K kept, and a superseded one survives a grace period for readers that were
handed it when it was current.

Loading a policy for inference needs only this module (and transformers); nothing of the cold-start
trainer or the learner.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

import m1flow.model  # registers the hybrid model with the Auto classes
from m1flow.model import interop, remote_code
from m1flow.model.modeling import CONFIG_FILE, MAX_SHARD_BYTES, WEIGHTS_FILE, WEIGHTS_INDEX

STATE_FILE = "learner_state.json"
OPTIMIZER_FILE = "optimizer.pt"
LEARNER_CHECKPOINTS = Path("learner") / "checkpoints"  # under a run directory: the live learner's


class PolicyLoadError(RuntimeError):
    pass


# ---- names ---------------------------------------------------------------------------------
def uri_for(directory: str | Path) -> str:
    return Path(directory).resolve().as_uri()


def path_of(uri: str | Path) -> Path:
    """The local directory a checkpoint URI (file:// or a plain path) names."""
    parsed = urlparse(str(uri))
    if parsed.scheme not in ("", "file"):
        raise PolicyLoadError(f"unsupported checkpoint URI scheme {parsed.scheme!r} in {uri}")
    return Path(parsed.path)


def weight_files(directory: str | Path) -> list[Path]:
    """The files holding the weights: the index and its shards, or the single file."""
    directory = Path(directory)
    index = directory / WEIGHTS_INDEX
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [index, *(directory / s for s in shards)]
    return [directory / WEIGHTS_FILE]


def has_weights(directory: str | Path) -> bool:
    """Whether every weight file of the directory is there (a checkpoint still on disk)."""
    return all(path.exists() for path in weight_files(directory))


def weights_sha256(directory: str | Path) -> str:
    """Checksum of the weights (every shard, in order), announced with each policy version."""
    digest = hashlib.sha256()
    for path in weight_files(directory):
        digest.update(path.name.encode())
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def model_config(directory: str | Path) -> dict[str, Any]:
    return json.loads((Path(directory) / CONFIG_FILE).read_text())


def is_hybrid(directory: str | Path) -> bool:
    """Whether the directory holds the hybrid lightning-attention model: m1flow's (the released
    format) or transformers' `minimax`, which loads as m1flow's (m1flow.model.interop)."""
    kind = model_config(directory).get("model_type")
    return kind in (m1flow.model.MiniMaxM1HFConfig.model_type, interop.TRANSFORMERS_MODEL_TYPE)


# ---- policies ------------------------------------------------------------------------------
def save_policy(directory: str | Path, model: nn.Module, tokenizer: Any, temperature: float = 1.0,
                top_p: float = 0.95, max_shard_bytes: int = MAX_SHARD_BYTES) -> Path:
    """Write model, tokenizer and generation defaults as a Hugging Face model directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, max_shard_size=max_shard_bytes)
    if is_hybrid(directory):  # opens in plain transformers too (trust_remote_code), as the release does
        remote_code.install(directory, CONFIG_FILE)
    tokenizer.save_pretrained(directory, save_jinja_files=False)  # the chat template in tokenizer_config.json
    generation = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, do_sample=True, temperature=temperature, top_p=top_p)
    generation.save_pretrained(directory)
    return directory


def load_model(directory: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
               trainable: bool = False) -> nn.Module:
    """Any causal LM directory through AutoModelForCausalLM (transformers' MiniMax as m1flow's hybrid);
    frozen and in eval mode unless trainable."""
    directory = Path(directory)
    if not (directory / CONFIG_FILE).exists():
        raise PolicyLoadError(f"{directory} is not a model directory (no {CONFIG_FILE})")
    if interop.is_transformers_minimax(model_config(directory)):  # as m1flow's hybrid, not transformers' class
        model: nn.Module = m1flow.model.MiniMaxM1ForCausalLM.from_pretrained(directory, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype)
    model.to(device)
    model.train(trainable)
    if not trainable:
        for param in model.parameters():
            param.requires_grad_(False)
    return model


def load_tokenizer(directory: str | Path) -> Any:
    return AutoTokenizer.from_pretrained(Path(directory))


def verify(directory: Path, sha256: str) -> None:
    if sha256 and weights_sha256(directory) != sha256:
        raise PolicyLoadError(f"checksum mismatch for {directory}")


def load_policy(uri: str | Path, sha256: str = "", device: str | torch.device = "cpu",
                dtype: torch.dtype = torch.float32) -> tuple[nn.Module, Any]:
    """(model, tokenizer) for inference, refusing weights whose checksum differs from the announced one."""
    directory = path_of(uri)
    verify(directory, sha256)
    return load_model(directory, device, dtype), load_tokenizer(directory)


# ---- learner checkpoints -------------------------------------------------------------------
@dataclass
class LearnerState:
    version: int = 0
    step: int = 0
    offsets: dict[str, int] = field(default_factory=dict)  # "topic/partition" -> next offset
    applied_groups: list[list[str]] = field(default_factory=list)  # per step, the group ids applied
    skipped_groups: list[list[str]] = field(default_factory=list)  # per step, the ids skipped since the last
    samples_dropped_stale: int = 0


def version_dir(root: str | Path, version: int) -> Path:
    """Where the learner writes the checkpoint of `version` under its checkpoint root."""
    return Path(root) / f"v{version:06d}"


def save_checkpoint(root: Path, model: nn.Module, tokenizer: Any, optimizer: torch.optim.Optimizer | None,
                    state: LearnerState, keep: int = 3, grace_s: float = 60.0,
                    max_shard_bytes: int = MAX_SHARD_BYTES) -> tuple[Path, str]:
    """Write checkpoint `v{version}` under root atomically; return its directory and weights checksum."""
    root.mkdir(parents=True, exist_ok=True)
    final = version_dir(root, state.version)
    tmp = root / f".tmp-v{state.version:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    save_policy(tmp, model, tokenizer, max_shard_bytes=max_shard_bytes)
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
    (tmp / STATE_FILE).write_text(json.dumps(asdict(state)))
    for path in tmp.iterdir():
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    _fsync_dir(root)
    rotate(root, keep, grace_s)
    return final, weights_sha256(final)


def rotate(root: Path, keep: int, grace_s: float) -> list[Path]:
    """Remove checkpoints older than the newest `keep`, but only those superseded more than
    `grace_s` ago: a reader that was handed a checkpoint when it was current (a rollout replica
    loading the announced version) has that long to read it before it may vanish."""
    done = sorted(p for p in root.glob("v*") if p.is_dir())
    removed = []
    now = time.time()
    for old, successor in zip(done[:-keep], done[1:]):
        superseded = (successor / STATE_FILE).stat().st_mtime if (successor / STATE_FILE).exists() else now
        if now - superseded >= grace_s:
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old)
    return removed


def latest(root: Path) -> Path | None:
    done = sorted(p for p in root.glob("v*") if (p / STATE_FILE).exists())
    return done[-1] if done else None


def load_state(directory: Path) -> LearnerState:
    return LearnerState(**json.loads((directory / STATE_FILE).read_text()))


def load_optimizer(directory: Path, optimizer: torch.optim.Optimizer) -> None:
    path = directory / OPTIMIZER_FILE
    if path.exists():
        optimizer.load_state_dict(torch.load(path, weights_only=True))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
