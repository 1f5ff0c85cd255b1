"""BERT's uncased WordPiece tokenizer in plain Python, as all-MiniLM-L6-v2 was trained with it.

The same steps as Hugging Face's ``BertNormalizer`` + ``BertPreTokenizer`` +
``WordPiece`` with the model's settings (lower case, accents stripped,
Chinese characters split, ``##`` continuations, words over 100 characters
unknown), checked against the ``tokenizers`` library on the LoCoMo
conversations and pinned by golden ids in the tests. The vocabulary
(``data/vocab.txt``, 30,522 entries, Apache-2.0, from
``sentence-transformers/all-MiniLM-L6-v2``) ships with the package.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from importlib import resources
from typing import Final

__all__ = ["VOCAB_SHA256", "WordPiece", "load_vocab"]

#: SHA-256 of ``data/vocab.txt`` (the tests check it).
VOCAB_SHA256: Final = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"

_MAX_WORD_CHARS: Final = 100


def vocab_bytes() -> bytes:
    """The packaged ``data/vocab.txt`` as stored (its SHA-256 should be :data:`VOCAB_SHA256`)."""
    return resources.files(__package__).joinpath("data/vocab.txt").read_bytes()


def parse_vocab(text: str) -> dict[str, int]:
    """A vocabulary file's text: token to id (its line number)."""
    return {token: i for i, token in enumerate(text.split("\n")) if token}


def load_vocab() -> dict[str, int]:
    """The packaged vocabulary: token to id (its line number)."""
    return parse_vocab(vocab_bytes().decode("utf-8"))


def _is_control(ch: str) -> bool:
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch).startswith("C")


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _normalize(text: str) -> str:
    out: list[str] = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or _is_control(ch):
            continue
        if _is_whitespace(ch):
            out.append(" ")
        elif _is_cjk(cp):
            out.append(f" {ch} ")
        else:
            out.append(ch)
    stripped = unicodedata.normalize("NFD", "".join(out))
    return "".join(ch for ch in stripped if unicodedata.category(ch) != "Mn").lower()


def _pre_tokenize(text: str) -> list[str]:
    words: list[str] = []
    for chunk in text.split():
        current: list[str] = []
        for ch in chunk:
            if _is_punctuation(ch):
                if current:
                    words.append("".join(current))
                    current = []
                words.append(ch)
            else:
                current.append(ch)
        if current:
            words.append("".join(current))
    return words


class WordPiece:
    """Text to token ids: ``[CLS] … [SEP]``, at most ``max_tokens`` ids in all."""

    def __init__(self, vocab: Mapping[str, int]) -> None:
        self._vocab = vocab
        self.cls_id = vocab["[CLS]"]
        self.sep_id = vocab["[SEP]"]
        self.unk_id = vocab["[UNK]"]
        self.pad_id = vocab["[PAD]"]

    def _word_ids(self, word: str) -> list[int]:
        if len(word) > _MAX_WORD_CHARS:
            return [self.unk_id]
        ids: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self._vocab:
                    found = self._vocab[piece]
                    break
                end -= 1
            if found is None:
                return [self.unk_id]
            ids.append(found)
            start = end
        return ids

    def encode(self, text: str, max_tokens: int) -> list[int]:
        """The ids of ``text`` between ``[CLS]`` and ``[SEP]``, cut to ``max_tokens`` (``[SEP]`` is kept)."""
        body: list[int] = []
        limit = max(0, max_tokens - 2)
        for word in _pre_tokenize(_normalize(text)):
            body.extend(self._word_ids(word))
            if len(body) >= limit:
                break
        return [self.cls_id, *body[:limit], self.sep_id]
