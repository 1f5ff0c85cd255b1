"""Block digests of a source's text: what lets a bounded read check the bytes it returns.

A read fetches at most about ``max_read_bytes`` of a text (``GETRANGE``),
so it cannot hash the whole text again against the source's revision as
the SQLite store does. Instead, at indexing, the text is cut into blocks of
:data:`BLOCK` bytes and the digest of each block, bound to the source's id,
revision, the text's length and the block's number, is stored in the row
hash (field ``td``, :data:`DIGEST` bytes per block, in order). A read
fetches whole blocks and their digests and checks each: a text edited, cut
short, grown or moved from another row behind the store's back no longer
matches and is refused, never returned as evidence at the source's
revision. The digests are plain SHA-256 (no key): they catch any edit that
does not also rewrite ``td`` consistently, as the SQLite store's revision
check catches any edit that does not also rewrite the revision.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

from agentium_harness.plugin_api import SourceRef
from agentium_harness.plugin_api import source_kind_phrase as kind_of

from .errors import RedisRecallError, RedisRecallLayoutError

__all__ = ["BLOCK", "DIGEST", "block_digests", "blocks_match", "checked_text", "read_span"]

#: Bytes per checked block; a read fetches whole blocks (at most ``BLOCK - 1`` bytes past its cap).
BLOCK: Final = 4096

#: Bytes of one block's digest in ``td``.
DIGEST: Final = 32

_DOMAIN: Final = b"agentium-recall-redis text block\x00"


def _digest(sid: str, revision: str, size: int, index: int, block: bytes) -> bytes:
    head = f"{sid}\x00{revision}\x00{size}\x00{index}\x00".encode("utf-8", "surrogatepass")
    return hashlib.sha256(_DOMAIN + head + block).digest()


def block_digests(sid: str, revision: str, text: bytes) -> bytes:
    """The ``td`` field of a row holding ``text``: one digest per :data:`BLOCK` bytes, in order."""
    size = len(text)
    return b"".join(
        _digest(sid, revision, size, i, text[start : start + BLOCK])
        for i, start in enumerate(range(0, size, BLOCK))
    )


def read_span(cap: int) -> int:
    """How many bytes a read of at most ``cap`` bytes fetches: ``cap`` rounded up to whole blocks."""
    return -(-max(cap, 1) // BLOCK) * BLOCK


def blocks_match(sid: str, revision: str, size: int, data: bytes, digests: bytes, stored: int) -> bool:
    """Whether ``data``, the first bytes of a text of ``size`` bytes, is what was indexed for it.

    ``data`` must be whole blocks (all of the text, or a prefix of whole
    blocks), ``digests`` the digests of exactly those blocks, and
    ``stored`` the length of the row's whole ``td`` (one digest per block
    of ``size`` bytes).
    """
    blocks = -(-len(data) // BLOCK)
    if stored != DIGEST * (-(-size // BLOCK)) or len(digests) != DIGEST * blocks:
        return False
    if len(data) != size and len(data) % BLOCK:
        return False
    return all(
        digests[i * DIGEST : (i + 1) * DIGEST]
        == _digest(sid, revision, size, i, data[i * BLOCK : (i + 1) * BLOCK])
        for i in range(blocks)
    )


def checked_text(ref: SourceRef, row: Sequence[object]) -> bytes:
    """The bytes a ``READ`` reply row holds for ``ref`` once every block is checked; raise on any doubt.

    ``row`` is ``{full size, data, digests of the blocks read or nil, length
    of the row's td}``. A row without block digests (written by layout 3 or
    earlier) raises :class:`RedisRecallLayoutError`, any mismatch
    :class:`RedisRecallError`; the row is left as it is and nothing of its
    text is returned.
    """
    size, data, digests, stored = (list(row) + [None] * 4)[:4]
    if isinstance(data, bytes | bytearray) and digests is None:
        # The id and the tenant's prefix are content: the id is kept on the error, not in it.
        layout = RedisRecallLayoutError(
            f"recall read: {kind_of(ref.source_id)} has no block digests: it was indexed by an earlier "
            "version of the store (key layout 3 or older) or its row was edited, so its text cannot be "
            "checked and nothing of it was returned (its id is the error's source_id). Rebuild the index "
            "under a new key_prefix (the plugin README, 'Upgrading the key layout')"
        )
        layout.source_id = ref.source_id
        raise layout
    if (
        not isinstance(size, int)
        or not isinstance(stored, int)
        or not isinstance(data, bytes | bytearray)
        or not isinstance(digests, bytes | bytearray)
        or not blocks_match(ref.source_id, ref.revision, size, bytes(data), bytes(digests), stored)
    ):
        damaged = RedisRecallError(
            f"recall read: {kind_of(ref.source_id)} is damaged: its stored text does not match the "
            "block digests written with it at this revision; nothing of it was returned and the keys were "
            "left as they are (its id is the error's source_id; delete the source, or rebuild the index)"
        )
        damaged.source_id = ref.source_id
        raise damaged
    return bytes(data)
