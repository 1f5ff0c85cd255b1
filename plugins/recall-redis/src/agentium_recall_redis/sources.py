"""What the Redis recall store writes for a source (:class:`Source`), checked before any I/O.

A document or an archived group becomes one source: its id, revision, kind,
owner key, title, text, canonical bytes (groups only), sequence number and
receipt digest, its text's block digests (:mod:`agentium_recall_redis.text_blocks`)
and its term counts, with a group's edge lines as context
of its neighbours (:func:`context_terms`; layout in
:mod:`agentium_recall_redis.keys`); :func:`chunk_calls` packs sources into
``INDEX`` calls of at most ``max_terms_per_call`` terms. Every check here raises
``InvalidArgumentError`` before anything is sent, so a bad batch writes
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    MessageGroup,
    SessionKey,
    SourceOwner,
    SourceVector,
    checked_index_batch,
    group_source_id,
    indexed_group_text,
)

from .keys import edge_lines, encode_term, owner_key
from .server import Arg
from .terms import index_terms
from .text_blocks import block_digests

__all__ = [
    "Source",
    "args_bytes",
    "check_size",
    "chunk_calls",
    "context_terms",
    "flat_terms",
    "group_sources",
    "make_source",
    "utf8",
    "vector_calls",
]

# index_groups: sources per script call and their argument bytes per call (calls per round trip: see
# writes.CALLS_PER_TRIP). A call blocks the server while it runs, so chunks stay small; pipelining them
# keeps bulk indexing fast.
_CHUNK_SOURCES: Final = 256
_CHUNK_BYTES: Final = 1 << 20


def utf8(text: object, what: str) -> bytes:
    """``text`` as UTF-8; refuse a non-str or a lone surrogate (nothing is written)."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(text).__name__}; nothing was written")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{what} is not valid Unicode text ({exc}); nothing was written") from exc


def check_size(size: int, what: str, max_value_bytes: int) -> None:
    """Refuse a value of ``size`` bytes larger than ``max_value_bytes`` (nothing is written)."""
    if size > max_value_bytes:
        raise InvalidArgumentError(
            f"{what} is {size} bytes, more than max_value_bytes ({max_value_bytes}); nothing was written"
        )


@attrs.frozen(slots=True)
class Source:
    """One source as the writing scripts take it: its row fields and its encoded terms with their counts."""

    sid: str
    revision: str
    kind: str  # "d" (a document) or "g" (an archived group)
    okey: str
    title: bytes
    text: bytes
    canonical: bytes
    seq: str
    digest: str
    terms: tuple[tuple[str, int], ...]
    # The text's block digests (text_blocks), stored as the row's ``td``: what reads check.
    blocks: bytes = attrs.field(init=False)

    @blocks.default
    def _blocks(self) -> bytes:
        return block_digests(self.sid, self.revision, self.text)

    def row(self) -> list[Arg]:
        """The row fields in script order.

        sid, rev, kind, owner key, title, text, canonical, seq, digest, block digests.
        """
        return [
            self.sid,
            self.revision,
            self.kind,
            self.okey,
            self.title,
            self.text,
            self.canonical,
            self.seq,
            self.digest,
            self.blocks,
        ]

    def index_args(self) -> list[Arg]:
        """The source's part of an ``INDEX`` call: its row fields, term count, then (term, tf) pairs."""
        return [*self.row(), len(self.terms), *flat_terms(self.terms)]


def flat_terms(terms: Sequence[tuple[str, int]]) -> list[Arg]:
    """(term, tf) pairs as one flat argument list."""
    out: list[Arg] = []
    for term, tf in terms:
        out.append(term)
        out.append(tf)
    return out


def make_source(
    sid: str,
    revision: str,
    kind: str,
    okey: str,
    title: bytes,
    text: bytes,
    canonical: bytes,
    seq: str,
    digest: str,
    counts: dict[str, int],
    max_terms: int,
    what: str,
) -> Source:
    """A :class:`Source` (terms encoded for keys); more than ``max_terms`` distinct terms is refused."""
    if len(counts) > max_terms:
        raise InvalidArgumentError(
            f"{what} has {len(counts)} distinct words, more than max_terms_per_source ({max_terms}); "
            "nothing was written. Split it, or raise max_terms_per_source"
        )
    terms = tuple((encode_term(term), tf) for term, tf in counts.items())
    return Source(sid, revision, kind, okey, title, text, canonical, seq, digest, terms)


def args_bytes(args: Sequence[Arg]) -> int:
    """About how many bytes ``args`` take on the wire (a number counts as 8)."""
    return sum(len(a) if isinstance(a, bytes | str) else 8 for a in args)


def chunk_calls(sources: Sequence[Source], room: int) -> list[list[Arg]]:
    """The ``INDEX`` calls (``room``, count, sources...) for sources of at most ``room`` terms each.

    Each call holds up to 256 sources, about 1 MiB of arguments and at most
    ``room`` terms in all, so no call adds more than ``room`` postings.
    """
    calls: list[list[Arg]] = []
    chunk: list[Arg] = []
    count = size = terms = 0
    for source in sources:
        args = source.index_args()
        nt = len(source.terms)
        if count and (count >= _CHUNK_SOURCES or size + args_bytes(args) > _CHUNK_BYTES or terms + nt > room):
            calls.append([room, count, *chunk])
            chunk, count, size, terms = [], 0, 0, 0
        chunk.extend(args)
        count += 1
        size += args_bytes(args)
        terms += nt
    if count:
        calls.append([room, count, *chunk])
    return calls


def context_terms(text: str) -> tuple[tuple[str, int], ...]:
    """A group's context entries: its edge lines' terms, for the groups before (``<``) and after (``>``) it.

    The group's first line (:func:`~agentium_recall_redis.keys.edge_lines`)
    is indexed as context of the group before it, its last line of the
    group after it; each entry is ``<`` or ``>`` and the encoded term, with
    its count in that line. They are postings of this group's row (in its
    term list), so they leave with it: an erased or replaced group's words
    never stay in a neighbour's context.
    """
    first, last = edge_lines(text)
    out: list[tuple[str, int]] = []
    for mark, line in (("<", first), (">", last)):
        out.extend((mark + encode_term(term), tf) for term, tf in index_terms(line).items())
    return tuple(out)


def group_sources(
    key: SessionKey,
    groups: Sequence[MessageGroup],
    receipts: Sequence[ArchiveReceipt],
    max_value_bytes: int,
    max_terms: int,
) -> list[Source]:
    """Check the batch and build each group's :class:`Source`; any mismatch raises before I/O.

    :func:`~agentium_harness.plugin_api.checked_index_batch` checks it; an
    identical repeat is indexed once (one script must not see a source twice).
    """
    batch = checked_index_batch(key, groups, receipts)
    okey = owner_key(SourceOwner.of_session(key))
    out: list[Source] = []
    for group, receipt in batch:
        where = f"group {group.seq} of session {key.key()}"
        text = indexed_group_text(group)
        canonical = group.canonical_bytes()
        text_bytes = utf8(text, f"the text of {where}")
        check_size(max(len(text_bytes), len(canonical)), where, max_value_bytes)
        source = make_source(
            group_source_id(key, group.seq),
            group.digest,
            "g",
            okey,
            b"",
            text_bytes,
            canonical,
            str(group.seq),
            receipt.digest,
            index_terms(text),
            max_terms,
            where,
        )
        out.append(attrs.evolve(source, terms=source.terms + context_terms(text)))
    return out


#: Vectors per ``VECTORS`` call (and their bytes): each is one ``HSET`` and one ``ZADD``.
_VECTOR_CHUNK: Final = 256


def vector_calls(entries: dict[str, SourceVector]) -> list[tuple[int, list[Arg]]]:
    """``VECTORS`` call arguments for one tenant's vectors: (count, (sid, rev, bytes)*) per call.

    At most 256 vectors and about 1 MiB of arguments per call, so one call
    holds the server briefly whatever the dimension.
    """
    calls: list[tuple[int, list[Arg]]] = []
    chunk: list[Arg] = []
    count = size = 0
    for entry in entries.values():
        blob = entry.vector.to_bytes()
        item = len(entry.ref.source_id) + len(entry.ref.revision) + len(blob)
        if count and (count >= _VECTOR_CHUNK or size + item > _CHUNK_BYTES):
            calls.append((count, chunk))
            chunk, count, size = [], 0, 0
        chunk.extend((entry.ref.source_id, entry.ref.revision, blob))
        count += 1
        size += item
    if count:
        calls.append((count, chunk))
    return calls
