"""The session snapshot record: what a session store keeps of one session (its committed state).

:class:`SessionSnapshot` and the records it holds of the archive
(:class:`ArchiveDivergence`, :class:`ArchivedDigest`), with the format
versions. Plain data: their canonical bytes, digest, seal and strict decode
are :mod:`.snapshot`'s, which re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Final

import attrs

from .._history import MessageGroup, ViewState
from .._scope import Scope
from .._tuples import tuple_of_archived_digests, tuple_of_message_groups
from .._validators import int_tuple, seq_field, seq_items, sha256_digest, text_within
from .archive_marks import ArchiveMark
from .erasure import ErasureLedger, SeqRange
from .summary import SummaryState

__all__ = [
    "DIGESTED_FORMAT_VERSION",
    "FIRST_FORMAT_VERSION",
    "MAX_DIVERGENCE_DETAIL_BYTES",
    "MAX_STORED_DIVERGENCE_DETAIL_BYTES",
    "SNAPSHOT_FORMAT_VERSION",
    "ArchiveDivergence",
    "ArchivedDigest",
    "SessionSnapshot",
]

#: Current snapshot format. Version 1 snapshots had no memory scope (legacy);
#: version 2 had no digest; version 3 carries the digest of its canonical bytes.
SNAPSHOT_FORMAT_VERSION = 3

#: First format version whose snapshots must carry a digest.
DIGESTED_FORMAT_VERSION = 3

#: The first snapshot format there ever was: a stored snapshot claiming a lower one was never
#: written by any version of agentium-harness (damage, or another tool's record), so it is refused.
FIRST_FORMAT_VERSION = 1


#: Longest divergence ``detail`` the engine records, in UTF-8 bytes: it cuts the archive's message to
#: it (every built-in archive's fits whole), so no new record holds a longer one.
MAX_DIVERGENCE_DETAIL_BYTES: Final = 16 * 1024
#: Longest divergence ``detail`` a stored snapshot may hold, in UTF-8 bytes: earlier versions kept
#: the archive's message whole, and a divergence they recorded must still load (it is what
#: reconciliation needs); a longer one is refused as damage.
MAX_STORED_DIVERGENCE_DETAIL_BYTES: Final = 256 * 1024


@attrs.frozen(slots=True)
class ArchiveDivergence:
    """The archive holds groups that differ from this session's at seqs it never committed.

    ``seqs`` are the conflicting sequence numbers found when eviction was
    attempted; ``detail`` names the archive's conflict by its class when the
    engine records it (its message, which may name another tenant's rows, is
    only in the ``archive_diverged`` diagnostic; earlier versions recorded
    the message, cut to :data:`MAX_DIVERGENCE_DETAIL_BYTES`, or whole: kept, up to
    :data:`MAX_STORED_DIVERGENCE_DETAIL_BYTES`). Built directly, it takes
    what a load takes, that stored bound and no more: a decode builds it
    through this constructor and the engine carries a loaded one forward
    as it is, so a tighter bound here would refuse those records. A
    snapshot carrying a divergence is in the ``diverged`` state: runs are
    refused until reconciliation (docs/runtime.md), and neither copy is
    ever dropped.
    """

    seqs: tuple[int, ...] = attrs.field(converter=int_tuple, validator=seq_items)
    # The stored bound, not the engine's cut: a decode builds the record with this very validator.
    detail: str = attrs.field(default="", validator=text_within(MAX_STORED_DIVERGENCE_DETAIL_BYTES))


@attrs.frozen(slots=True)
class ArchivedDigest:
    """The digest the archive acknowledged for group ``seq`` when it was evicted (its receipt's digest)."""

    seq: int = attrs.field(validator=seq_field)
    digest: str = attrs.field(validator=sha256_digest)


def _marks(value: Iterable[ArchiveMark] | None) -> tuple[ArchiveMark, ...] | None:
    if value is None:
        return None
    marks = tuple(value)
    return marks or None


def _erased_ranges(value: Iterable[SeqRange] | None) -> tuple[SeqRange, ...] | None:
    """``None`` for no range: a snapshot with nothing erased keeps the bytes it had before erasure existed."""
    if value is None:
        return None
    ranges = tuple(value)
    return ranges or None


@attrs.frozen(slots=True)
class SessionSnapshot:
    """The committed state of one session.

    - ``memory_scope``: the scope the history belongs to; ``None`` only for a
      legacy snapshot, which loads only with an explicit attestation.
    - ``boundary``: the ``seq`` of the first group still resident; every group
      below it is in the archive.
    - ``next_seq``: the ``seq`` the next group will get.
    - ``resident``: the resident groups, ascending, ``boundary <= seq < next_seq``.
    - ``digest``: ``sha256:`` of the canonical bytes of the snapshot with
      ``digest=None``; set by :func:`seal_snapshot`, checked by :func:`verify_snapshot`.
    - ``divergence``: set when the archive was found to hold different groups at
      seqs this session had not archived yet (the ``diverged`` state).
    - ``summary``: the session's task summary and its coverage gaps, when
      summaries are configured; absent (``None``) otherwise, and then left out
      of the canonical bytes, so snapshots written before summaries existed
      keep their digests.
    - ``receipts``: when summaries are configured, the digest the archive
      acknowledged for each archived group the summary has not folded yet
      (``summary frontier <= seq < boundary``), saved with the boundary move
      that archived it. A summary update folds a group only if the bytes it
      reads back have that digest, whatever digest the archive recomputes
      for them now. Empty, and then left out of the canonical bytes, without
      a summarizer.
    - ``view``: which committed messages the session's view shows, after its
      retractions and view resets (:class:`~agentium_harness._history.ViewState`);
      derived from its control groups and saved with them. Absent (``None``,
      left out of the canonical bytes) until the first one, so snapshots
      written before views existed keep their digests.
    - ``erased``: archived groups of this session that an erasure removed
      (retention, the sources of a forgotten fact), as ascending seq ranges
      below the boundary: summaries, reads and the recall index's catch-up
      pass over them. Absent (``None``) until the first one.
    - ``archived``: when groups were archived: each :class:`ArchiveMark` says
      every group below ``below`` was archived by ``at``. Written by each
      commit that moves the boundary, at most :data:`MAX_ARCHIVE_MARKS` of
      them (merged marks keep the later time, so a group never looks older
      than it is); retention by age reads them. Absent until the first move
      after they existed.
    - ``ledger``: only in the engine's erasure records, which the session
      store keeps under a reserved key (docs/erasure.md); ``None`` in every
      session's snapshot.
    """

    #: Left out of the encoding when ``None`` (see ``view``, ``erased`` and ``ledger`` above).
    __agentium_omit_if_none__: ClassVar[tuple[str, ...]] = ("view", "erased", "archived", "ledger")

    memory_scope: Scope | None
    boundary: int = 0
    next_seq: int = 0
    resident: tuple[MessageGroup, ...] = attrs.field(default=(), converter=tuple_of_message_groups)
    format_version: int = SNAPSHOT_FORMAT_VERSION
    divergence: ArchiveDivergence | None = None
    digest: str | None = None
    summary: SummaryState | None = None
    receipts: tuple[ArchivedDigest, ...] = attrs.field(default=(), converter=tuple_of_archived_digests)
    view: ViewState | None = None
    erased: tuple[SeqRange, ...] | None = attrs.field(default=None, converter=_erased_ranges)
    archived: tuple[ArchiveMark, ...] | None = attrs.field(default=None, converter=_marks)
    ledger: ErasureLedger | None = None
