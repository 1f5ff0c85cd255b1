"""Erasure: what every store's ``erase`` operation takes and returns (docs/erasure.md).

Erasure is the one way committed data leaves Agentium. The engine drives it
(``HarnessRuntime.erase``, ``agentium erase``); each store that declares the
``erasure`` capability removes what it holds of an :class:`EraseTarget` — a
tenant, a user, a session, or given archived groups of one session
(retention) — and answers with an :class:`EraseReport`: what it removed
(counts, and per session the seq and digest of each group — never content),
whether more remains, and how physical the removal was.

The records here are plain data; the scope rules (:meth:`EraseTarget.covers_session`,
:meth:`~EraseTarget.covers_owner`, :meth:`~EraseTarget.covers_fact`,
:meth:`~EraseTarget.covers_group`) are the one definition every adapter and
the engine share. The target and its seq ranges live in :mod:`.erasure_target`
and are importable from here as well.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from datetime import datetime
from typing import Any, ClassVar, Final

import attrs

from .._errors import InvalidArgumentError
from .._scope import SessionKey, VerifiedIdentity
from .._validators import (
    MAX_COUNT,
    MAX_SEQ,
    exact_int,
    keep_exact,
    shown_number,
)
from .erasure_target import (
    DEFAULT_ERASE_BATCH,
    MAX_ERASE_RANGES,
    EraseLevel,
    EraseTarget,
    SeqRange,
)
from .erasure_target import count_field as _seq

__all__ = [
    "MAX_KIND_BYTES",
    "MAX_RECORD_DIGESTS",
    "MAX_REPORT_DETAIL_BYTES",
    "MAX_REPORT_KINDS",
    "MAX_RECORD_SESSIONS",
    "ErasedGroups",
    "ErasureKind",
    "ErasureLedger",
    "ErasureRecord",
    "ErasureState",
    "StoreErasure",
    "DEFAULT_ERASE_BATCH",
    "MAX_ERASE_RANGES",
    "EraseLevel",
    "EraseReport",
    "EraseStatus",
    "EraseTarget",
    "ErasedCount",
    "ErasedSession",
    "PhysicalErasure",
    "SeqRange",
]


class EraseStatus(enum.StrEnum):
    """Whether an ``erase`` call reached the end of its target."""

    #: Nothing of the target is left in the store (for a dry run: everything was counted).
    COMPLETE = "complete"
    #: The call stopped at its item bound; call again (for a dry run: the counts are a lower bound).
    PARTIAL = "partial"


class PhysicalErasure(enum.StrEnum):
    """How physical a store's removal was (docs/erasure.md has the table per backend)."""

    #: No copy is left that the store can reach: freed space overwritten, logs truncated, versions removed.
    REMOVED = "removed"
    #: Gone from every read; the backend keeps the bytes in free space until it reuses or vacuums it.
    UNREFERENCED = "unreferenced"
    #: Gone from every read; the backend keeps earlier versions it was not allowed or able to remove.
    VERSIONS_KEPT = "versions_kept"


@attrs.frozen(slots=True)
class ErasedCount:
    """How many items of one kind a store removed (``group``, ``snapshot``, ``document``, ``fact`` …)."""

    kind: str = attrs.field(validator=attrs.validators.instance_of(str))
    count: int = attrs.field(validator=_seq)


def _counts(value: Iterable[ErasedCount]) -> tuple[ErasedCount, ...]:
    return tuple(value)


def _pairs(value: Iterable[tuple[int, str]]) -> tuple[tuple[int, str], ...]:
    return tuple((int(seq), str(digest)) for seq, digest in value)


@attrs.frozen(slots=True)
class ErasedSession:
    """The groups of one session a store removed: ``(seq, digest)`` pairs, ascending — never content."""

    session: SessionKey
    groups: tuple[tuple[int, str], ...] = attrs.field(default=(), converter=_pairs)


def _sessions(value: Iterable[ErasedSession]) -> tuple[ErasedSession, ...]:
    return tuple(value)


#: Kinds of items one store's reports may count (over all its calls for one erasure): each is kept.
MAX_REPORT_KINDS: Final = 32
#: Longest kind of item a report counts (``group``, ``snapshot`` …), in UTF-8 bytes: one printable line.
MAX_KIND_BYTES: Final = 64
#: Longest ``detail`` of a report, in UTF-8 bytes (no NUL): the erasure record keeps it.
MAX_REPORT_DETAIL_BYTES: Final = 4096


@attrs.frozen(slots=True)
class EraseReport:
    """What one ``erase`` call removed (or, for a dry run, would remove).

    - ``counts``: items per kind (``group``, ``snapshot``, ``document``, ``fact``, ``revision`` …).
    - ``sessions``: per session, the seq and digest of each group removed
      (archived groups, index entries, a snapshot's resident groups).
    - ``status``: ``complete``, or ``partial`` when the call stopped at its
      item bound (the engine calls again; a dry run's counts are then a lower bound).
    - ``physical``: how physical the removal was; ``detail`` says what is
      left where it is not ``removed`` (free pages, earlier versions …).

    The engine keeps it in the erasure's record, so it checks it first
    (a report out of form is a ``ContractViolationError``): each digest is
    ``sha256:`` and 64 lowercase hex digits, or ``""`` for a group whose
    stored digest the store cannot vouch for, each seq a group seq, every
    session in the target and no more listed than the call's ``max_items``,
    each session's groups in at most ``max_items`` (or 1,024, when more)
    runs of consecutive seqs (each run is a range the record keeps);
    at most 32 kinds over the store's calls, each a printable name of 1 to
    64 bytes; a ``detail`` of at most 4,096 UTF-8 bytes, no NUL.
    """

    counts: tuple[ErasedCount, ...] = attrs.field(default=(), converter=_counts)
    sessions: tuple[ErasedSession, ...] = attrs.field(default=(), converter=_sessions)
    status: EraseStatus = attrs.field(default=EraseStatus.COMPLETE, converter=EraseStatus)
    physical: PhysicalErasure = attrs.field(default=PhysicalErasure.REMOVED, converter=PhysicalErasure)
    detail: str = ""

    @property
    def removed(self) -> int:
        """Items of every kind."""
        return sum(c.count for c in self.counts)

    def count(self, kind: str) -> int:
        """Items of ``kind`` (0 if none)."""
        return sum(c.count for c in self.counts if c.kind == kind)


def count_items(**kinds: int) -> tuple[ErasedCount, ...]:
    """``ErasedCount`` per keyword, those above 0 only: ``count_items(group=3, document=0)``."""
    return tuple(ErasedCount(kind, n) for kind, n in kinds.items() if n > 0)


def group_sessions(rows: Iterable[tuple[SessionKey, int, str]]) -> tuple[ErasedSession, ...]:
    """``(key, seq, digest)`` rows as one :class:`ErasedSession` per key (first seen first)."""
    by_key: dict[SessionKey, list[tuple[int, str]]] = {}
    for key, seq, digest in rows:
        by_key.setdefault(key, []).append((seq, digest))
    return tuple(ErasedSession(key, sorted(pairs)) for key, pairs in by_key.items())


def check_max_items(max_items: object) -> int:
    """``max_items`` if it is an int from 1 to :data:`~agentium_harness._validators.MAX_COUNT`."""
    plain = exact_int(max_items)  # an int subclass as its number: its own comparisons are not trusted
    if plain is None or not 1 <= plain <= MAX_COUNT:
        raise InvalidArgumentError(
            f"max_items must be an int from 1 to {MAX_COUNT}, got {shown_number(max_items)}"
        )
    return plain


def check_target(target: object) -> EraseTarget:
    """``target`` if it is an :class:`EraseTarget`, else :class:`InvalidArgumentError` (nothing erased)."""
    if not isinstance(target, EraseTarget):
        raise InvalidArgumentError(
            f"erase takes an EraseTarget, got {type(target).__name__}; nothing was erased"
        )
    return target


# -- the engine's durable records (kept by the session store; docs/erasure.md) ---------------------

#: Sessions an erasure record lists group by group; more are counted in ``omitted_sessions``
#: (never one twice, so at times fewer: their ids are not kept; docs/erasure.md).
MAX_RECORD_SESSIONS: Final = 10_000
#: ``(seq, digest)`` pairs an erasure record keeps in all; beyond it only counts and ranges.
MAX_RECORD_DIGESTS: Final = 10_000


class ErasureState(enum.StrEnum):
    """Where an erasure stands."""

    #: A dry run: what would be removed, nothing was.
    PLANNED = "planned"
    #: Recorded and under way (or stopped part way): runs on its scope are refused until it completes.
    PENDING = "pending"
    #: Every store reported nothing left of the target: the record is the tombstone.
    COMPLETE = "complete"


class ErasureKind(enum.StrEnum):
    """What asked for an erasure."""

    #: An operator's ``erase`` (``agentium erase``).
    ERASURE = "erasure"
    #: ``apply_retention`` (``agentium retention apply``): archived groups past the policy.
    RETENTION = "retention"
    #: ``forget`` with ``erase_sources``: the archived groups a forgotten fact came from.
    FORGET = "forget"


def _ranges_of(value: Iterable[SeqRange]) -> tuple[SeqRange, ...]:
    return tuple(value)


@attrs.frozen(slots=True)
class StoreErasure:
    """What one store removed for an erasure, over all its calls (never content).

    ``role`` is the store's place in the runtime (``session_store``,
    ``archive``, ``recall``, ``memory``), ``adapter`` its class name.
    ``status`` is ``partial`` until the store said nothing of the target is
    left. ``physical`` is the weakest any call reported, ``detail`` what
    it said about it.
    """

    role: str
    adapter: str
    counts: tuple[ErasedCount, ...] = attrs.field(default=(), converter=_counts)
    status: EraseStatus = attrs.field(default=EraseStatus.PARTIAL, converter=EraseStatus)
    physical: PhysicalErasure = attrs.field(default=PhysicalErasure.REMOVED, converter=PhysicalErasure)
    detail: str = ""


def _seq_digests(value: Iterable[tuple[int, str]]) -> tuple[tuple[int, str], ...]:
    """``(seq, digest)`` pairs whose seqs are group seqs (0 to ``MAX_SEQ``), as ``_pairs`` keeps them.

    An erasure record is stored: a seq no group can have is damage, refused when the record is
    decoded (and never built), rather than turned into an int and shown as a group it removed.
    """
    pairs = []
    for seq, digest in value:
        plain = exact_int(seq)  # an int subclass as its number, a bool or a float refused
        if plain is None or not 0 <= plain <= MAX_SEQ:
            raise InvalidArgumentError(
                f"digests must name group seqs from 0 to {MAX_SEQ}, got {shown_number(seq)}"
            )
        pairs.append((plain, str(digest)))
    return tuple(pairs)


@attrs.frozen(slots=True)
class ErasedGroups:
    """The groups of one session an erasure removed, over every store: never their content.

    ``ranges`` cover every seq removed (archived groups, index entries, the
    snapshot's resident groups); ``digests`` the ``(seq, digest)`` of each, as
    long as the record's budget (:data:`MAX_RECORD_DIGESTS`) lasts —
    ``count`` is always exact. ``snapshot`` says the session's snapshot went too.
    """

    session: SessionKey
    count: int = attrs.field(default=0, validator=_seq)  # a count: never negative, even when stored
    ranges: tuple[SeqRange, ...] = attrs.field(default=(), converter=_ranges_of)
    digests: tuple[tuple[int, str], ...] = attrs.field(default=(), converter=_seq_digests)
    snapshot: bool = False


def _sessions_of(value: Iterable[ErasedGroups]) -> tuple[ErasedGroups, ...]:
    return tuple(value)


def _stores_of(value: Iterable[StoreErasure]) -> tuple[StoreErasure, ...]:
    return tuple(value)


def _notes(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(str(v) for v in value)


#: Longest ``reason`` or ``statement`` of an erasure, in UTF-8 bytes: ``erase`` refuses longer ones.
MAX_ERASURE_REASON_BYTES: Final = 1024


def _record_text(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    # What erase() accepts (_engine/erasure.py): a record holding other text, stored or built, is refused.
    text = str.__str__(value) if isinstance(value, str) else None
    if (
        text is None
        or "\x00" in text
        or len(text.encode("utf-8", "surrogatepass")) > MAX_ERASURE_REASON_BYTES
    ):
        raise InvalidArgumentError(
            f"{attribute.name} must be text of at most {MAX_ERASURE_REASON_BYTES} bytes, no NUL"
        )
    if attribute.name == "reason" and not text.strip():
        raise InvalidArgumentError("reason must say why the erasure was done, got blank text")


@attrs.frozen(slots=True)
class ErasureRecord:
    """The durable record of one erasure; once ``complete``, its tombstone.

    It says what was erased — per store, counts and how physical; per
    session, seq ranges and the digests of the groups (never their content)
    — when (``started_at``, ``completed_at``), why (``reason``), and by whom
    (``operator``, the verified identity of the operator, and the host's
    ``statement``). The engine writes it before it removes anything, keeps
    its progress in it, and keeps it after: ``inspect_session`` and
    ``agentium erase --status`` show it.
    """

    __agentium_omit_if_none__: ClassVar[tuple[str, ...]] = ("completed_at",)

    erasure_id: str
    kind: ErasureKind = attrs.field(converter=ErasureKind)
    target: EraseTarget
    reason: str = attrs.field(validator=_record_text)
    operator: VerifiedIdentity
    state: ErasureState = attrs.field(converter=ErasureState)
    started_at: datetime
    completed_at: datetime | None = None
    statement: str = attrs.field(default="", validator=_record_text)
    stores: tuple[StoreErasure, ...] = attrs.field(default=(), converter=_stores_of)
    sessions: tuple[ErasedGroups, ...] = attrs.field(default=(), converter=_sessions_of)
    omitted_sessions: int = attrs.field(default=0, validator=_seq)
    notes: tuple[str, ...] = attrs.field(default=(), converter=_notes)

    @property
    def groups_removed(self) -> int:
        """Groups removed (or, planned, to remove) over every session listed and counted."""
        return sum(s.count for s in self.sessions)

    def store(self, role: str) -> StoreErasure | None:
        """The entry of the store in ``role``, if it took part."""
        return next((s for s in self.stores if s.role == role), None)


def _records_of(value: Iterable[ErasureRecord]) -> tuple[ErasureRecord, ...]:
    return tuple(value)


def _optional_seq(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _seq(instance, attribute, value)


def _optional_revision(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    # A store's revision: no ceiling of ours (a store may count past MAX_COUNT), exact and not negative.
    if value is None:
        return
    revision = exact_int(value)
    if revision is None or revision < 0:
        raise InvalidArgumentError(
            f"{attribute.name} must be an int of at least 0, got {shown_number(value)}"
        )
    keep_exact(instance, attribute, value, revision)


@attrs.frozen(slots=True)
class ErasureLedger:
    """Erasure records kept by the session store under a reserved key (see docs/erasure.md).

    ``pages`` and ``legacy`` are set only on an index of finished erasures
    (see ``_engine/erasure_index.py``): ``pages``, how many full pages of
    older entries moved out of it, each under its own key, so that the index
    itself stays bounded; ``legacy``, on the tenant's index, how many of its
    oldest entries were written before each erasure was also indexed by its
    scope. ``joined_after`` is set only on an erasure's join record (its
    header alone, under a key of its own that earlier versions never read):
    the revision of the tenant's ``pending`` ledger the header was added to
    (0: none was stored yet), which the commit fence compares with a load's
    (``_engine/commit_fence.py``).
    """

    # Added later: the ledgers that do not use them keep the bytes (and digests) earlier versions wrote.
    __agentium_omit_if_none__: ClassVar[tuple[str, ...]] = ("pages", "legacy", "joined_after")

    records: tuple[ErasureRecord, ...] = attrs.field(default=(), converter=_records_of)
    pages: int | None = attrs.field(default=None, validator=_optional_seq)
    legacy: int | None = attrs.field(default=None, validator=_optional_seq)
    joined_after: int | None = attrs.field(default=None, validator=_optional_revision)
