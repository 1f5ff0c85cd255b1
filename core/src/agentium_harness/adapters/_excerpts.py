"""Excerpts and query terms shared by the built-in recall stores (pure functions, no I/O).

Every recall store cuts excerpts the same way (``docs``: the recall store
semantics): a source that fits is returned whole; a longer one yields a window
of whole sentences around the sentence that best matches the query; if not
even that sentence fits, its beginning is cut at a UTF-8 character boundary.
An excerpt that leaves text out says so (``OmittedContext.SOURCE``), and also
says when the text it left out holds a correction or a negation cue, because
an excerpt without them may read as the opposite of what the source says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Final

from .._errors import InvalidArgumentError
from .._ports.recall import Completeness, Excerpt, OmittedContext, SourceOwner, SourceRef
from .._validators import check_count

__all__ = ["MAX_QUERY_TERMS", "content_terms", "make_excerpt", "query_terms"]

#: At most this many distinct terms are taken from a query, so a 1 MB query
#: costs what a short one costs.
MAX_QUERY_TERMS: Final = 32

_WORD = re.compile(r"\w+")

# A sentence ends after a run of terminal punctuation followed by white space
# (or the end), or at a line break: archived groups are one message per line.
_SENTENCE_END = re.compile(r"[.!?\u2026\u3002\uff01\uff1f]+(?=\s|$)\s*|\n\s*")

_CORRECTION = re.compile(
    r"\b(?:correction|corrected|actually|update|updated|instead|rather|retract|wrong|mistake)\b",
    re.IGNORECASE,
)
# "n't" is matched inside words ("don't", "isn’t"), the others as whole words.
_NEGATION = re.compile(r"\b(?:not|no|never|none|cannot)\b|n['\u2019]t\b", re.IGNORECASE)


def query_terms(query: str) -> tuple[str, ...]:
    r"""The distinct lower-cased ``\w+`` tokens of ``query``, in order of appearance, at most 32.

    Stop words are kept. The scan stops at the 32nd distinct term, so a huge
    query is not tokenized whole. Any text is a valid query: punctuation and
    search syntax (``"``, ``*``, ``-``, ``(``, ``:``) are never part of a term,
    and words such as ``NEAR``, ``OR`` or ``NOT`` are plain terms.
    """
    seen: dict[str, None] = {}
    for match in _WORD.finditer(query):
        seen.setdefault(match.group().lower(), None)
        if len(seen) >= MAX_QUERY_TERMS:
            break
    return tuple(seen)


# A query's tokens are scanned at most this far, so a 1 MB query of stop words is cheap too.
_MAX_SCANNED_TOKENS: Final = 4096


def content_terms(query: str, stopwords: AbstractSet[str]) -> tuple[str, ...]:
    r"""The distinct lower-cased ``\w+`` tokens of ``query`` that are not in ``stopwords``, at most 32.

    As :func:`query_terms`, but the 32 are counted after the stop words are
    dropped, and at most 4,096 tokens are scanned. A query made only of stop
    words has no terms (it names no topic).
    """
    seen: dict[str, None] = {}
    for scanned, match in enumerate(_WORD.finditer(query)):
        if scanned >= _MAX_SCANNED_TOKENS:
            break
        word = match.group().lower()
        if word not in stopwords:
            seen.setdefault(word, None)
            if len(seen) >= MAX_QUERY_TERMS:
                break
    return tuple(seen)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each sentence, trailing white space included; blank stretches dropped."""
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end()
        if end > start:
            spans.append((start, end))
            start = end
    if start < len(text):
        spans.append((start, len(text)))
    return [(a, b) for a, b in spans if text[a:b].strip()]


def _best_sentence(text: str, spans: Sequence[tuple[int, int]], terms: Sequence[str]) -> int:
    """Index of the sentence holding the most distinct query terms (the first one on ties)."""
    wanted = set(terms)
    best, best_hits = 0, 0
    if not wanted:
        return best
    for i, (a, b) in enumerate(spans):
        hits = len(wanted.intersection(w.lower() for w in _WORD.findall(text[a:b])))
        if hits > best_hits:
            best, best_hits = i, hits
    return best


def _omitted(left_out: str) -> frozenset[OmittedContext]:
    flags = {OmittedContext.SOURCE}
    if _CORRECTION.search(left_out):
        flags.add(OmittedContext.CORRECTION)
    if _NEGATION.search(left_out):
        flags.add(OmittedContext.NEGATION)
    return frozenset(flags)


def _cut_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits ``max_bytes`` (whole characters)."""
    data = text.encode("utf-8", "surrogatepass")[: max(0, max_bytes)]
    # Dropping a partial trailing character leaves whole characters only.
    return data.decode("utf-8", "ignore")


def make_excerpt(
    ref: SourceRef, owner: SourceOwner, text: str, query_terms: Sequence[str], max_bytes: int
) -> Excerpt:
    """The excerpt of ``text`` (the whole source) for ``ref``, at most ``max_bytes`` UTF-8 bytes.

    - The whole text if it fits: ``COMPLETE``, nothing omitted.
    - Else the widest window of whole sentences around the sentence holding
      the most ``query_terms`` that fits (growing forward first, then back):
      ``PARTIAL``.
    - Else the start of that sentence cut at a character boundary: ``TRUNCATED``.

    A ``PARTIAL`` or ``TRUNCATED`` excerpt's ``omitted`` holds ``SOURCE``, plus
    ``CORRECTION`` / ``NEGATION`` when the text it left out contains such a cue.
    A ``text`` that is not a ``str``, ``query_terms`` that are not strings or a ``max_bytes``
    that is not an ``int`` from 0 is :class:`~agentium_harness.InvalidArgumentError`.
    """
    if not isinstance(text, str):  # it raised AttributeError, or TypeError comparing max_bytes
        raise InvalidArgumentError(f"text must be a str, got {type(text).__name__}")
    max_bytes = check_count(max_bytes, "max_bytes", minimum=0)
    # Any iterable of str but a lone str (whose letters would be the terms), as before.
    listed = isinstance(query_terms, Iterable) and not isinstance(query_terms, str | bytes)
    terms = tuple(query_terms) if listed else None
    if terms is None or not all(isinstance(t, str) for t in terms):
        raise InvalidArgumentError("query_terms must be a sequence of str (a lone str is refused)")
    query_terms = terms
    if _utf8_len(text) <= max_bytes:
        return Excerpt(ref=ref, owner=owner, text=text)
    spans = _sentence_spans(text)
    if not spans:
        # Only white space, and too much of it: nothing worth quoting.
        return Excerpt(ref, owner, "", Completeness.TRUNCATED, _omitted(text))
    best = _best_sentence(text, spans, query_terms)

    def window(lo: int, hi: int) -> tuple[int, int, str]:
        raw = text[spans[lo][0] : spans[hi][1]]
        stripped = raw.strip()
        start = spans[lo][0] + (len(raw) - len(raw.lstrip()))
        return start, start + len(stripped), stripped

    lo = hi = best
    start, end, chosen = window(lo, hi)
    if _utf8_len(chosen) > max_bytes:
        cut = _cut_utf8(chosen, max_bytes)
        left_out = text[:start] + text[start + len(cut) :]
        return Excerpt(ref, owner, cut, Completeness.TRUNCATED, _omitted(left_out))
    grown = True
    while grown:
        grown = False
        # Context after the matching sentence first (it often qualifies it), then before.
        for forward in (True, False):
            new_lo, new_hi = (lo, hi + 1) if forward else (lo - 1, hi)
            if 0 <= new_lo and new_hi < len(spans):
                s, e, candidate = window(new_lo, new_hi)
                if _utf8_len(candidate) <= max_bytes:
                    lo, hi, start, end, chosen = new_lo, new_hi, s, e, candidate
                    grown = True
    left_out = text[:start] + text[end:]
    return Excerpt(ref, owner, chosen, Completeness.PARTIAL, _omitted(left_out))
