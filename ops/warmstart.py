"""The cold start: a short supervised pass that turns a random tiny model into a weak solver.

RL needs groups whose rewards differ; a random model never answers right, so every group would be
dropped and nothing learned. The report warm-starts with long-CoT SFT; we do the same at toy scale,
in the chat format policies are sampled in (m1flow.chat), for the project's hybrid model or a
small transformers architecture (Qwen2, Llama) built locally from a config. The result is a policy
directory (m1flow.checkpoint), cached outside the checkout, keyed by everything that determines it.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
import transformers
from pydantic import BaseModel, Field
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from m1flow import chat, checkpoint, lm
from m1flow.data.dataset import DatasetConfig
from m1flow.model import MiniMaxM1Config, MiniMaxM1ForCausalLM
from m1flow.tasks import arith, chain, recheck, rg
from m1flow.tokenizer import TokenizerConfig, build_tokenizer

if TYPE_CHECKING:
    from m1flow.data.record import TaskRecord

LIBRARY = Path(chat.__file__).resolve().parent  # m1flow/: a cached policy is a function of its code too

PROGRESS_S = 10.0  # a progress line at most this often while the cold start trains
Arch = Literal["minimax_m1", "qwen2", "llama"]

# Small transformers architectures built from a config (no download): a few layers, width 128.
TINY_HF = {
    "qwen2": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=2048, rope_theta=10000.0,
                  tie_word_embeddings=False, use_sliding_window=False),
    "llama": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=2048, rope_theta=10000.0,
                  tie_word_embeddings=False),
}


class WarmStartConfig(BaseModel):
    seed: int = 0
    arch: Arch = Field("minimax_m1", description="minimax_m1: the project's hybrid model; qwen2, llama: transformers'")
    steps: int = 300
    batch_size: int = 64
    lr: float | None = Field(None, description="None: 3e-3 for the hybrid model (its post-norm blocks take it), "
                                              "1e-3 for the transformers architectures")
    max_operand: int = 12
    ops: str = "+-"
    label_noise: float = 0.5
    # task mixture: the share of answers written in a form the verifier refuses (malformed()): a cold
    # start that often breaks the answer format, as one distilled from weaker models does
    form_noise: float = 0.0
    model_overrides: dict = {}
    task: Literal["arith", "chain", "recheck", "mixture"] = "arith"  # chain: long scratchpad responses (m1flow.tasks.chain)
    # task mixture: noisy gold answers of these generator sources (their seeds are shifted off the ones
    # RL draws from), each drawn by its weight, written as the source's verifier reads them
    mixture: list[DatasetConfig] = []
    tokenizer: TokenizerConfig = TokenizerConfig()
    # task mixture: a general task (verifier genrm, no gold) is answered with this many words
    # (m1flow.tasks.general.sample_answer: named words and filler, some repeated), short enough that the
    # policy has room in its window to write longer answers when a judge starts paying for length
    open_words: tuple[int, int] = (2, 6)
    # task recheck (m1flow.tasks.recheck): the quick pass forgets each carry with probability
    # recheck_carry_slip; the first recheck_skill_frac of the SFT examples take the re-check at
    # recheck_skill_rate, so that the redo is learned, the rest at recheck_rate, so that the policy ends
    # up writing it rarely (the fork token's probability follows the latest labels)
    recheck_carry_slip: float = 1.0
    recheck_rate: float = 0.04
    recheck_skill_rate: float = 0.5
    recheck_skill_frac: float = 0.7


def encode_example(tok: Any, prompt: str, answer: str) -> tuple[list[int], int]:
    """Token ids of the chat prompt + response + end of turn, and how many leading ids are prompt
    (not trained on)."""
    prompt_ids = chat.prompt_ids(tok, prompt)
    response = tok.encode(chat.response_text(answer), add_special_tokens=False)
    return prompt_ids + response + [tok.eos_token_id], len(prompt_ids)


def sft_step_batch(tok: Any, pairs: list[tuple[str, str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded inputs and per-position targets (-100 where no loss is taken)."""
    encoded = [encode_example(tok, p, a) for p, a in pairs]
    width = max(len(ids) for ids, _ in encoded)
    inputs = torch.full((len(encoded), width), tok.pad_token_id, dtype=torch.long)
    targets = torch.full((len(encoded), width), -100, dtype=torch.long)
    for row, (ids, n_prompt) in enumerate(encoded):
        inputs[row, : len(ids)] = torch.tensor(ids)
        targets[row, n_prompt - 1 : len(ids) - 1] = torch.tensor(ids[n_prompt:])
    return inputs, targets


def noisy_answer(answer: str, rng: random.Random, noise: float) -> str:
    """With probability `noise`, a near miss (off by 1 to 3) instead of the right answer.

    The cold-start data of the report is distilled from weaker models and is often wrong; noisy
    labels give the same kind of start at toy scale: a policy that puts real but not all of its
    mass on right answers, which is what RL with a verifier can sharpen within minutes.
    """
    if rng.random() >= noise:
        return answer
    return str(int(answer) + rng.choice((-3, -2, -1, 1, 2, 3)))


def noisy_gold(gold: str, rng: random.Random, noise: float) -> str:
    """A wrong answer of the gold's own form with probability `noise` (a near miss for an integer);
    True/False flips at half that rate, so that a coin flip's labels do not carry no signal at all."""
    if gold in ("True", "False"):
        return ("False" if gold == "True" else "True") if rng.random() < noise / 2 else gold
    try:
        int(gold)
    except ValueError:
        return gold  # no near miss of a known form: the gold as it is
    return noisy_answer(gold, rng, noise)


def mixture_examples(cfg: WarmStartConfig, n: int, rng: random.Random) -> list[tuple["TaskRecord", str]]:
    """(record, noisy answer in the form its verifier reads), drawn from `cfg.mixture` by weight."""
    from m1flow.data.generators import generate
    from m1flow.kinds import gold_answer

    if not cfg.mixture or any(not d.generator for d in cfg.mixture):
        raise ValueError("warm start task 'mixture' needs `mixture`: a list of generator sources")
    picks = rng.choices(range(len(cfg.mixture)), weights=[d.weight for d in cfg.mixture], k=n)
    seen = [0] * len(cfg.mixture)
    out = []
    for i in picks:
        d = cfg.mixture[i]
        record = generate(d.generator, 10_000 + d.seed + cfg.seed, seen[i], d.level, d.config)
        seen[i] += 1
        if record.verifier.kind == "genrm":  # no gold to write: an answer a weak policy might give
            out.append((record, open_answer(record.prompt, rng, cfg.open_words)))
            continue
        gold = record.verifier.gold or str(record.verifier.spec.get("solution", ""))
        wrong = record.model_copy(update={"verifier": record.verifier.model_copy(
            update={"gold": noisy_gold(gold, rng, cfg.label_noise)})})
        answer = gold_answer(wrong.verifier)
        out.append((record, malformed(answer) if rng.random() < cfg.form_noise else answer))
    return out


def open_answer(instruction: str, rng: random.Random, words: tuple[int, int]) -> str:
    """A general task's SFT answer: a few of its named words and filler (m1flow.tasks.general), of as
    varied a quality as a cold start distilled from a weaker model, so that a judge has something to rank."""
    from m1flow.tasks.general import sample_answer

    return sample_answer(rng, instruction, *words)


def malformed(answer: str) -> str:
    """The answer in a form its verifier refuses: without its <answer> tags, or after a stray '='."""
    bare = answer.replace("<answer>", "").replace("</answer>", "")
    return bare if bare != answer else f"= {answer}"


def mixture_pairs(cfg: WarmStartConfig, n: int, rng: random.Random) -> list[tuple[str, str]]:
    """The mixture's (prompt, answer) pairs, batched by length (see by_length)."""
    return by_length([(r.prompt, answer) for r, answer in mixture_examples(cfg, n, rng)], cfg.batch_size)


def by_length(pairs: list[tuple[str, str]], batch_size: int, window: int = 8) -> list[tuple[str, str]]:
    """Each run of `window` batches sorted by prompt length: a batch pads to its longest example, and
    a two-token sum padded to a 200-token puzzle would cost ten times its own tokens."""
    size = batch_size * window
    return [p for i in range(0, len(pairs), size) for p in sorted(pairs[i : i + size], key=lambda p: len(p[0]))]


def sft_pairs(cfg: WarmStartConfig, rng: random.Random) -> list[tuple[str, str]]:
    """(prompt, noisy target answer) for every SFT example of the chosen task, in training order."""
    n, seed = cfg.steps * cfg.batch_size, 10_000 + cfg.seed
    if cfg.task == "mixture":
        return mixture_pairs(cfg, n, rng)
    if cfg.task in ("chain", "recheck"):
        chains = chain.problems(seed=seed, n=n, max_operand=cfg.max_operand, prefix="sft")
        rng.shuffle(chains)
        if cfg.task == "recheck":
            skill = int(cfg.recheck_skill_frac * n)
            return [(p.text, recheck.noisy_solution(p, rng, cfg.recheck_carry_slip,
                                                    cfg.recheck_skill_rate if i < skill else cfg.recheck_rate))
                    for i, p in enumerate(chains)]
        return [(p.text, chain.noisy_solution(p, rng, cfg.label_noise)) for p in chains]
    data = arith.problems(seed=seed, n=n, max_operand=cfg.max_operand, ops=cfg.ops, prefix="sft")
    rng.shuffle(data)
    return [(p.text, noisy_answer(p.answer, rng, cfg.label_noise)) for p in data]


def supervised_finetune(model: nn.Module, tok: Any, cfg: WarmStartConfig) -> list[float]:
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    lr = cfg.lr or (3e-3 if cfg.arch == "minimax_m1" else 1e-3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    losses = []
    pairs = sft_pairs(cfg, rng)
    model.train()
    started = shown = time.monotonic()
    for step in range(cfg.steps):
        if time.monotonic() - shown >= PROGRESS_S:  # a cold start takes minutes on 2 cores: say where it is
            shown = time.monotonic()
            print(f"cold start ({cfg.arch}, {cfg.task}): step {step}/{cfg.steps}, loss {losses[-1]:.3f}, "
                  f"{shown - started:.0f}s", flush=True)
        inputs, targets = sft_step_batch(tok, pairs[step * cfg.batch_size : (step + 1) * cfg.batch_size])
        logits = lm.logits(model, inputs)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for group in optimizer.param_groups:  # linear decay: ends on a stable, not-too-sharp policy
            group["lr"] = lr * (1 - step / cfg.steps)
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


def vocab_for(tok: Any) -> int:
    """The tokenizer's size rounded up to a multiple of 64 (the LM head's rows; kernels like it)."""
    return -(-len(tok) // 64) * 64


def build_model(tok: Any, cfg: WarmStartConfig) -> nn.Module:
    """A freshly initialised model of the configured architecture for this tokenizer."""
    torch.manual_seed(cfg.seed)
    ids = dict(vocab_size=vocab_for(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id)
    if cfg.arch == "minimax_m1":
        return MiniMaxM1ForCausalLM(MiniMaxM1Config.tiny(**ids, **cfg.model_overrides))
    fields = {**TINY_HF[cfg.arch], **ids, **cfg.model_overrides}
    if cfg.arch == "qwen2":  # transformers checks the per-layer attention kinds against the layer count
        fields.setdefault("layer_types", ["full_attention"] * fields["num_hidden_layers"])
    config = AutoConfig.for_model(cfg.arch, **fields)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def _cache_root() -> Path:
    return Path(os.environ.get("M1FLOW_CACHE", Path.home() / ".cache" / "m1flow"))


def _mixture_sources(here: Path) -> list[Path]:
    """The code a mixture's examples are a function of: the generators, their tasks, the gold forms."""
    return [here / "data" / "generators.py", *sorted((here / "kinds").glob("*.py")), here / "data" / "record.py",
            here / "tasks" / "arith.py", here / "tasks" / "rg.py", here / "tasks" / "general.py",
            *sorted((here / "tasks" / "logic").glob("*.py"))]


def _key(cfg: WarmStartConfig) -> str:
    here = LIBRARY
    sources = [Path(__file__), here / "chat.py", here / "lm.py", here / "tokenizer.py", here / "checkpoint.py",
               *([here / "tasks" / f"{cfg.task}.py"] if cfg.task != "mixture" else []),
               *([here / "tasks" / "chain.py"] if cfg.task == "recheck" else []),
               *(_mixture_sources(here) if cfg.task == "mixture" else []),
               *sorted((here / "model").glob("*.py")),
               *sorted((here.parent / "kernels" / "lightning_attn").glob("*.py"))]
    digest = hashlib.sha256(cfg.model_dump_json().encode())
    digest.update(f"transformers {transformers.__version__} torch {torch.__version__}".encode())
    if cfg.task == "mixture" and rg.library_version():  # reasoning-gym's items are a function of its version
        digest.update(f"reasoning-gym {rg.library_version()}".encode())
    for src in sources:
        digest.update(src.read_bytes())
    return digest.hexdigest()[:16]


def warm_started_policy(dest: str | Path, cfg: WarmStartConfig | None = None) -> Path:
    """Write the warm-started policy directory to `dest`, training it only once per config: a process
    that finds another training the same one waits on its lock and copies the result (two test workers,
    or two stacks, starting side by side would otherwise train it twice on the same cores)."""
    dest = Path(dest)
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(cached_policy(cfg or WarmStartConfig()), dest)
    return dest


def cached_policy(cfg: WarmStartConfig) -> Path:
    """The cached policy directory of `cfg`, trained first if no process has yet (the one copy to read from)."""
    cached = _cache_root() / f"warmstart-{cfg.arch}-{_key(cfg)}"
    if not (cached / "done.json").exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        with open(cached.with_name(cached.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (cached / "done.json").exists():
                _train_into(cached, cfg)
    return cached


def _train_into(cached: Path, cfg: WarmStartConfig) -> None:
    """Train the policy in a scratch folder beside `cached`, then move it in place (whole or not at all)."""
    tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = build_tokenizer(cfg.tokenizer)
    model = build_model(tok, cfg)
    losses = supervised_finetune(model, tok, cfg)
    checkpoint.save_policy(tmp, model, tok)
    (tmp / "done.json").write_text(json.dumps({"final_loss": losses[-1], **cfg.model_dump()}))
    shutil.rmtree(cached, ignore_errors=True)
    tmp.rename(cached)


if __name__ == "__main__":  # scripts/test.sh: the default policy, trained once while the set-up runs
    print(cached_policy(WarmStartConfig()))
