"""The project's tokenizer: byte-level BPE trained with `tokenizers` on its own generated corpus.

Byte-level, so any text encodes; digits are split one per token before the merges are learned, so
numbers are spelled digit by digit and arithmetic stays learnable for a small model; a small
vocabulary (512 by default) keeps the LM head of the demo's models cheap. Training takes seconds
and is cached outside the checkout, keyed by everything that determines the result. The saved form
is Hugging Face's (tokenizer.json + tokenizer_config.json with the chat template of m1flow.chat),
so AutoTokenizer, vLLM and every engine load it like any model's tokenizer.
"""
from __future__ import annotations

import hashlib
import os
import random
import shutil
from pathlib import Path

from pydantic import BaseModel, Field
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from m1flow import chat
from m1flow.tasks import arith, chain, rg

SPECIAL = (chat.PAD, chat.IM_START, chat.IM_END)  # special: dropped when decoding a response
ADDED = (chat.THINK_START, chat.THINK_END)  # plain added tokens: kept, verifiers read them


class TokenizerConfig(BaseModel):
    vocab_size: int = Field(512, ge=len(SPECIAL) + len(ADDED) + 256, description="byte alphabet + merges + specials")
    corpus_conversations: int = Field(20000, description="generated conversations the merges are learned from")
    prompts_of: list[str] = Field([], description="generators (m1flow.data.generators: 'rg:products', "
                                  "'logic:...') whose prompts join the corpus, so that their words are tokens: "
                                  "spelled a letter a token, a reasoning-gym prompt is 150 tokens, too long "
                                  "for a small model to carry its two operands to the answer")
    prompts_per_generator: int = 2000
    seed: int = 0


def corpus(cfg: TokenizerConfig) -> list[str]:
    """Rendered conversations of the project's generated tasks, in the chat format policies use."""
    rng = random.Random(cfg.seed)
    half = cfg.corpus_conversations // 2
    pairs = [(p.text, p.answer) for p in arith.problems(seed=cfg.seed, n=half, max_operand=999, ops="+-*")]
    pairs += [(p.text, p.solution) for p in chain.problems(seed=cfg.seed, n=half)]
    pairs += generated_pairs(cfg)
    rng.shuffle(pairs)
    return [f"{chat.IM_START}user\n{q}{chat.IM_END}\n{chat.IM_START}assistant\n{chat.THINK_START}\n"
            f"{chat.response_text(a)}{chat.IM_END}\n" for q, a in pairs]


def generated_pairs(cfg: TokenizerConfig) -> list[tuple[str, str]]:
    """(prompt, gold) of the first rows of each generator in `prompts_of` (level 1, the tokenizer's seed)."""
    if not cfg.prompts_of:
        return []
    from m1flow.data.generators import generate  # the task families; only a tokenizer that names them needs them

    rows = [generate(name, cfg.seed, i, 1, {}) for name in cfg.prompts_of for i in range(cfg.prompts_per_generator)]
    return [(r.prompt, r.verifier.gold or "") for r in rows]


def train(cfg: TokenizerConfig) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=cfg.vocab_size - len(ADDED), special_tokens=list(SPECIAL),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(cfg), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])  # never split
    return tok


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """The Hugging Face tokenizer around a trained one: end of turn is eos, the chat template set."""
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=chat.IM_END, pad_token=chat.PAD,
                                   additional_special_tokens=[chat.IM_START])
    fast.chat_template = chat.CHAT_TEMPLATE
    return fast


def _cache_root() -> Path:
    return Path(os.environ.get("M1FLOW_CACHE", Path.home() / ".cache" / "m1flow"))


def _key(cfg: TokenizerConfig) -> str:
    here = Path(__file__).parent
    digest = hashlib.sha256(cfg.model_dump_json().encode())
    for src in (Path(__file__), here / "chat.py", here / "tasks" / "arith.py", here / "tasks" / "chain.py"):
        digest.update(src.read_bytes())
    if cfg.prompts_of:  # their prompts are a function of the generators' code and reasoning-gym's version
        for src in [here / "data" / "generators.py", *sorted((here / "tasks").rglob("*.py"))]:
            digest.update(src.read_bytes())
        digest.update(rg.library_version().encode())
    return digest.hexdigest()[:16]


def tokenizer_dir(cfg: TokenizerConfig | None = None) -> Path:
    """The directory holding the trained tokenizer's files (trained on first use, then cached)."""
    cfg = cfg or TokenizerConfig()
    cached = _cache_root() / f"tokenizer-{_key(cfg)}"
    if not (cached / "tokenizer_config.json").exists():
        tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        wrap(train(cfg)).save_pretrained(tmp, save_jinja_files=False)
        shutil.rmtree(cached, ignore_errors=True)
        try:
            tmp.rename(cached)
        except OSError:  # another process got there first
            shutil.rmtree(tmp, ignore_errors=True)
    return cached


def build_tokenizer(cfg: TokenizerConfig | None = None) -> PreTrainedTokenizerFast:
    return AutoTokenizer.from_pretrained(tokenizer_dir(cfg))
