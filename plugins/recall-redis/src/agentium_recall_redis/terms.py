r"""Words as the Redis recall store indexes and queries them: tokens, folded, stemmed (pure, no I/O).

The same rules as the SQLite store's index (FTS5's ``porter`` tokenizer over
``unicode61`` with diacritics removed), so a question finds the same words
in either store:

- **Tokens** are runs of letters and digits (``[^\W_]+``): punctuation and
  ``_`` separate words, as in ``unicode61``.
- **Folded**: lower-cased, and diacritics dropped (``café`` is ``cafe``).
- **Stemmed** with Porter's algorithm (the ``porter`` stemmer of
  ``snowballstemmer``, the algorithm FTS5's tokenizer implements), so
  ``lives``, ``living`` and ``live`` are one term. As FTS5 does, a token
  shorter than 3 or longer than 64 characters is kept as it is. On the
  10,234 distinct words of the LoCoMo conversations the two stemmers agree
  on all but 8: FTS5 follows the two departures of Porter's own C version
  (``-logi`` to ``-log``, ``-bli`` to ``-ble``: ``technology``,
  ``possibly``), this one the published algorithm.

Stop words are dropped from queries only (:func:`query_stems`), before
stemming, from the core's list (``ENGLISH_STOPWORDS`` of
:mod:`agentium_harness.plugin_api`); the index keeps every word, so
``stopwords = "none"`` finds them.
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from collections.abc import Set as AbstractSet
from typing import Any, Final

from agentium_harness.plugin_api import ENGLISH_STOPWORDS, content_terms

__all__ = ["MAX_QUERY_INDEX_TERMS", "STOPWORD_LISTS", "index_terms", "query_stems", "stem", "tokens"]

#: Most index terms a query ranks: twice the core's 32 words (``MAX_QUERY_TERMS``), so a word that
#: splits in two (``snake_case``) still counts whole, while one ``\w+`` word of many ``_``-joined tokens
#: cannot make the discovery script rank thousands of terms while every other client waits.
MAX_QUERY_INDEX_TERMS: Final = 64

#: Stop-word lists by the ``stopwords`` option's value (the same names as the SQLite store's).
STOPWORD_LISTS: Final[dict[str, frozenset[str]]] = {"english": ENGLISH_STOPWORDS, "none": frozenset()}

_TOKEN: Final = re.compile(r"[^\W_]+")

# FTS5's porter tokenizer leaves tokens outside these lengths as they are.
_MIN_STEM, _MAX_STEM = 3, 64

# A snowballstemmer stemmer keeps state while it works: one per thread.
_local = threading.local()


def _stemmer() -> Any:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        import snowballstemmer  # type: ignore[import-untyped]  # no type hints shipped

        stemmer = _local.stemmer = snowballstemmer.stemmer("porter")
    return stemmer


def _fold(token: str) -> str:
    """``token`` lower-cased, its diacritics (combining marks after canonical decomposition) dropped."""
    token = token.lower()
    if token.isascii():
        return token
    return "".join(c for c in unicodedata.normalize("NFD", token) if not unicodedata.combining(c))


@functools.lru_cache(maxsize=1 << 17)
def stem(token: str) -> str:
    """The index term of one token: folded, then Porter-stemmed (cached: words recur)."""
    word = _fold(token)
    if not _MIN_STEM <= len(word) <= _MAX_STEM or not word:
        return word
    return str(_stemmer().stemWord(word))


def tokens(text: str) -> list[str]:
    """The index terms of ``text`` in order (one per token)."""
    return [t for t in map(stem, _TOKEN.findall(text)) if t]


def index_terms(text: str, counts: dict[str, int] | None = None, weight: int = 1) -> dict[str, int]:
    """How often each index term occurs in ``text`` (times ``weight``), added to ``counts`` if given."""
    out = counts if counts is not None else {}
    for term in tokens(text):
        out[term] = out.get(term, 0) + weight
    return out


def query_stems(query: str, stopwords: AbstractSet[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    r"""A query's words and its index terms: ``(words, terms)``.

    ``words`` are the core's :func:`content_terms` (distinct lower-cased
    ``\w+`` tokens less ``stopwords``, at most 32; excerpts are cut around
    them); ``terms`` are their distinct index terms, in order, at most
    :data:`MAX_QUERY_INDEX_TERMS` (a word splits again at ``_``, so 32 words
    could otherwise make any number).
    """
    words = content_terms(query, stopwords)
    seen: dict[str, None] = {}
    for word in words:
        for token in _TOKEN.finditer(word):  # lazily: a word may hold a million tokens
            term = stem(token.group())
            if term:
                seen.setdefault(term, None)
                if len(seen) >= MAX_QUERY_INDEX_TERMS:
                    return words, tuple(seen)
    return words, tuple(seen)
