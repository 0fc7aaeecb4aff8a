"""Policy checkpoints as the services exchange them: a directory with the model (safetensors),
its config and tokenizer, named by a URI and verified by the SHA-256 of the weights file."""
from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import urlparse

import torch

from m1flow.model import MiniMaxM1ForCausalLM
from m1flow.tokenizer import CharTokenizer
from m1flow.warmstart import TOKENIZER_FILE

WEIGHTS_FILE = "model.safetensors"
LEARNER_CHECKPOINTS = Path("learner") / "checkpoints"  # under a run directory: the live learner's


def version_dir(root: str | Path, version: int) -> Path:
    """Where the learner writes the checkpoint of `version` under its checkpoint root."""
    return Path(root) / f"v{version:06d}"


class PolicyLoadError(RuntimeError):
    pass


def uri_for(directory: str | Path) -> str:
    return Path(directory).resolve().as_uri()


def path_of(uri: str) -> Path:
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise PolicyLoadError(f"unsupported checkpoint URI scheme {parsed.scheme!r} in {uri}")
    return Path(parsed.path)


def weights_sha256(directory: str | Path) -> str:
    digest = hashlib.sha256()
    with open(Path(directory) / WEIGHTS_FILE, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_policy(uri: str, sha256: str = "") -> tuple[MiniMaxM1ForCausalLM, CharTokenizer]:
    """Load a policy for inference, refusing weights whose checksum differs from the announced one."""
    directory = path_of(uri)
    if sha256 and weights_sha256(directory) != sha256:
        raise PolicyLoadError(f"checksum mismatch for {uri}")
    model = MiniMaxM1ForCausalLM.from_pretrained(directory)
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model, CharTokenizer.from_file(directory / TOKENIZER_FILE)


def seed_for(*parts: object) -> int:
    """A stable 63-bit seed from strings/ints, so a redelivered prompt resamples the same completions."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def generator(seed: int) -> torch.Generator:
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen
