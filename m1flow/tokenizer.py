"""A character-level tokenizer built locally with the `tokenizers` library (no downloads).

Why characters: the demo's tiny model must learn arithmetic from a few minutes of CPU training,
and one token per digit keeps the task learnable and the vocabulary (99 ids) small.
"""
from __future__ import annotations

from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
CHARS = tuple(chr(c) for c in range(32, 127))


class CharTokenizer:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.token_to_id("<pad>")
        self.bos_id = tokenizer.token_to_id("<bos>")
        self.eos_id = tokenizer.token_to_id("<eos>")
        self._special_ids = {tokenizer.token_to_id(s) for s in SPECIALS}

    @classmethod
    def build(cls) -> "CharTokenizer":
        vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
        tok.decoder = decoders.Fuse()
        tok.add_special_tokens(list(SPECIALS))
        return cls(tok)

    @classmethod
    def from_file(cls, path: str | Path) -> "CharTokenizer":
        return cls(Tokenizer.from_file(str(path)))

    def save(self, path: str | Path) -> None:
        self.tokenizer.save(str(path))

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode([i for i in ids if i not in self._special_ids],
                                     skip_special_tokens=True)
