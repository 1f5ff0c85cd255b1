"""What the Redis recall store writes for a source: the ``INDEX`` script's arguments, checked before any I/O.

A document or an archived group becomes one source: its id, revision, kind,
owner key, title, text, canonical bytes (groups only), sequence number and
receipt digest, and its term counts (layout in
:mod:`agentium_recall_redis.keys`). Every check here raises
``InvalidArgumentError`` before anything is sent, so a bad batch writes
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    MessageGroup,
    SessionKey,
    SourceOwner,
    group_source_id,
)

from .keys import encode_term, group_text, owner_key, term_counts
from .server import Arg

__all__ = ["args_bytes", "check_size", "chunk_calls", "group_sources", "source_args", "utf8"]

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


def source_args(
    sid: str,
    revision: str,
    kind: str,
    okey: str,
    title: bytes,
    text: bytes,
    canonical: bytes,
    seq: str,
    digest: str,
    terms: dict[str, int],
) -> list[Arg]:
    """One source's part of the ``INDEX`` script's ARGV (terms encoded for keys)."""
    args: list[Arg] = [sid, revision, kind, okey, title, text, canonical, seq, digest, len(terms)]
    for term, tf in terms.items():
        args.append(encode_term(term))
        args.append(tf)
    return args


def args_bytes(args: Sequence[Arg]) -> int:
    """About how many bytes ``args`` take on the wire (a number counts as 8)."""
    return sum(len(a) if isinstance(a, bytes | str) else 8 for a in args)


def chunk_calls(sources: Sequence[list[Arg]]) -> list[list[Arg]]:
    """The ``INDEX`` script calls for ``sources``: up to 256 sources and about 1 MiB of arguments each."""
    calls: list[list[Arg]] = []
    chunk: list[Arg] = []
    count = size = 0
    for args in sources:
        if count and (count >= _CHUNK_SOURCES or size + args_bytes(args) > _CHUNK_BYTES):
            calls.append([count, *chunk])
            chunk, count, size = [], 0, 0
        chunk.extend(args)
        count += 1
        size += args_bytes(args)
    calls.append([count, *chunk])
    return calls


def group_sources(
    key: SessionKey, groups: Sequence[MessageGroup], receipts: Sequence[ArchiveReceipt], max_value_bytes: int
) -> list[list[Arg]]:
    """Check the batch and build each group's script arguments; any mismatch raises before I/O."""
    if not isinstance(key, SessionKey):
        raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
    if len(groups) != len(receipts):
        raise InvalidArgumentError(
            f"{len(groups)} groups but {len(receipts)} receipts for session {key.key()}; nothing was written"
        )
    okey = owner_key(SourceOwner.of_session(key))
    seen: dict[int, str] = {}
    out: list[list[Arg]] = []
    for group, receipt in zip(groups, receipts, strict=True):
        if not isinstance(group, MessageGroup) or not isinstance(receipt, ArchiveReceipt):
            raise InvalidArgumentError("index_groups takes MessageGroup and ArchiveReceipt items")
        where = f"group {group.seq} of session {key.key()}"
        digest = group.digest
        if receipt.seq != group.seq or receipt.digest != digest:
            raise InvalidArgumentError(
                f"{where}: its receipt (seq {receipt.seq}, digest {receipt.digest}) does not match the "
                f"group (digest {digest}); nothing was written"
            )
        if group.retained is not None and group.retained.scope.session_key != key:
            raise InvalidArgumentError(
                f"{where} belongs to session {group.retained.scope.session_key.key()} by its retained "
                "scope; nothing was written"
            )
        if group.seq in seen:
            if seen[group.seq] != digest:
                raise InvalidArgumentError(
                    f"{where} appears twice with different content; nothing was written"
                )
            continue  # an identical repeat: index it once (one script must not see a source twice)
        seen[group.seq] = digest
        text = group_text(group)
        canonical = group.canonical_bytes()
        text_bytes = utf8(text, f"the text of {where}")
        check_size(max(len(text_bytes), len(canonical)), where, max_value_bytes)
        out.append(
            source_args(
                group_source_id(key, group.seq),
                digest,
                "g",
                okey,
                b"",
                text_bytes,
                canonical,
                str(group.seq),
                receipt.digest,
                term_counts(text),
            )
        )
    return out
