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
the engine share.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Final

import attrs

from .._errors import InvalidArgumentError
from .._scope import SessionKey, VerifiedIdentity, validate_id
from .._validators import (
    MAX_COUNT,
    exact_int,
    keep_exact,
    optional_plain_str,
    plain_str,
    require_instance,
    shown_number,
)

if TYPE_CHECKING:  # the ports import this module; only attributes are used at run time
    from .memory import GroupRef, MemoryScope
    from .recall import SourceOwner

__all__ = [
    "MAX_RECORD_DIGESTS",
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

#: Items one ``erase`` call removes at most unless the engine asks for another bound.
DEFAULT_ERASE_BATCH: Final = 1000
#: Most seq ranges one groups target may name.
MAX_ERASE_RANGES: Final = 1024


class EraseLevel(enum.StrEnum):
    """How wide an :class:`EraseTarget` is."""

    #: Every session, user, document and fact of a tenant.
    TENANT = "tenant"
    #: Every session, document and fact of one user of a tenant.
    USER = "user"
    #: One session: its snapshot, archived groups, index entries, its documents and the facts it sourced.
    SESSION = "session"
    #: Given archived groups of one session (retention, or the sources of a forgotten fact).
    GROUPS = "groups"


def _seq(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    seq = exact_int(value)  # an int subclass as its number: its own comparisons are not trusted
    if seq is None or not 0 <= seq <= MAX_COUNT:
        raise InvalidArgumentError(
            f"{attribute.name} must be an int from 0 to {MAX_COUNT}, got {shown_number(value)}"
        )
    keep_exact(instance, attribute, value, seq)


@attrs.frozen(slots=True, order=True)
class SeqRange:
    """Group seqs ``start <= seq < stop`` of one session (``start < stop``)."""

    start: int = attrs.field(validator=_seq)
    stop: int = attrs.field(validator=_seq)

    def __attrs_post_init__(self) -> None:
        if self.stop <= self.start:
            raise InvalidArgumentError(f"a seq range must end after it starts, got {self.start}..{self.stop}")

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and self.start <= seq < self.stop


def _ranges(value: Iterable[SeqRange]) -> tuple[SeqRange, ...]:
    if isinstance(value, str | bytes):
        raise InvalidArgumentError("groups must be SeqRange items, not a string")
    try:
        ranges = tuple(value)
    except TypeError:
        raise InvalidArgumentError(f"groups must be SeqRange items, got {type(value).__name__}") from None
    if len(ranges) > MAX_ERASE_RANGES:
        raise InvalidArgumentError(f"a target names at most {MAX_ERASE_RANGES} seq ranges, got {len(ranges)}")
    for item in ranges:
        if not isinstance(item, SeqRange):
            raise InvalidArgumentError(f"groups must be SeqRange items, got {type(item).__name__}")
    for before, after in itertools.pairwise(ranges):
        if after.start < before.stop:
            raise InvalidArgumentError("seq ranges must be ascending and must not overlap")
    return ranges


def _id(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    validate_id(value, attribute.name)


def _optional_id(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        validate_id(value, attribute.name)


@attrs.frozen(slots=True)
class EraseTarget:
    """What to erase: a tenant, a user, a session, or archived groups of one session.

    Build one with :meth:`tenant`, :meth:`user`, :meth:`session` or (retention,
    forgetting) :meth:`groups`. The fields are ids as the host knows them:
    ``user_id`` needs a ``tenant_id``, ``session_id`` a ``user_id`` (a session
    id is unique only within its user), ``groups`` a session.
    """

    tenant_id: str = attrs.field(converter=plain_str, validator=_id)
    user_id: str | None = attrs.field(default=None, converter=optional_plain_str, validator=_optional_id)
    session_id: str | None = attrs.field(default=None, converter=optional_plain_str, validator=_optional_id)
    groups: tuple[SeqRange, ...] = attrs.field(default=(), converter=_ranges)

    def __attrs_post_init__(self) -> None:
        if self.session_id is not None and self.user_id is None:
            raise InvalidArgumentError(
                "an erase target naming a session must name its user too (a session id is unique only "
                "within its user)"
            )
        if self.groups and self.session_id is None:
            raise InvalidArgumentError("an erase target naming groups must name their session")

    @classmethod
    def tenant(cls, tenant: str) -> EraseTarget:
        """Everything of ``tenant``: every user's sessions, documents and facts."""
        return cls(tenant)

    @classmethod
    def user(cls, tenant: str, user: str) -> EraseTarget:
        """Everything of one user: their sessions, the documents owned by them, their facts.

        :raises InvalidIdError: ``user`` is not an id; ``None`` included, which would otherwise
            make a target of the whole tenant (that is :meth:`tenant`, said in so many words).
        """
        validate_id(user, "user_id")
        return cls(tenant, user)

    @classmethod
    def session(cls, tenant: str, user: str, session: str) -> EraseTarget:
        """One session: snapshot, archived groups, index entries, its documents, the facts it sourced.

        :raises InvalidIdError: ``user`` or ``session`` is not an id; ``None`` included, which
            would otherwise widen the target to the user or the tenant.
        """
        validate_id(user, "user_id")
        validate_id(session, "session_id")
        return cls(tenant, user, session)

    @classmethod
    def groups_of(cls, key: SessionKey, ranges: Sequence[SeqRange]) -> EraseTarget:
        """Archived groups of session ``key`` whose seq lies in one of ``ranges`` (at least one)."""
        if not isinstance(key, SessionKey):
            raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
        # Read once, then checked: an empty iterator must not make a groups target with no groups,
        # which is a target for the whole session.
        checked = _ranges(ranges if ranges is not None else ())
        if not checked:
            raise InvalidArgumentError("a groups target needs at least one seq range")
        return cls(key.tenant, key.user, key.session, checked)

    @property
    def level(self) -> EraseLevel:
        """Tenant, user, session or groups."""
        if self.groups:
            return EraseLevel.GROUPS
        if self.session_id is not None:
            return EraseLevel.SESSION
        if self.user_id is not None:
            return EraseLevel.USER
        return EraseLevel.TENANT

    @property
    def session_key(self) -> SessionKey | None:
        """The session a session or groups target names; ``None`` for a user or tenant."""
        if self.session_id is None or self.user_id is None:
            return None
        return SessionKey(self.tenant_id, self.user_id, self.session_id)

    def _owns(self, tenant: str, user: str | None, session: str | None) -> bool:
        return (
            tenant == self.tenant_id
            and (self.user_id is None or user == self.user_id)
            and (self.session_id is None or session == self.session_id)
        )

    # Each covers_* checks its arguments' types first: given a str, None or a dict, it raised a
    # bare AttributeError from inside (a bool seq counted as group 0 or 1).

    def covers_session(self, key: SessionKey) -> bool:
        """True if the whole of session ``key`` goes (tenant, user or session level).

        :raises InvalidArgumentError: ``key`` is not a :class:`SessionKey`.
        """
        key = require_instance(key, SessionKey, "key")
        return not self.groups and self._owns(key.tenant, key.user, key.session)

    def covers_group(self, key: SessionKey, seq: int) -> bool:
        """True if archived group ``seq`` of session ``key`` goes (any level).

        :raises InvalidArgumentError: ``key`` is not a :class:`SessionKey` or ``seq`` not an ``int``.
        """
        key = require_instance(key, SessionKey, "key")
        if exact_int(seq) is None:
            raise InvalidArgumentError(f"seq must be an int, got {type(seq).__name__}")
        if not self._owns(key.tenant, key.user, key.session):
            return False
        return not self.groups or any(seq in r for r in self.groups)

    def covers_owner(self, owner: SourceOwner) -> bool:
        """True if a host document owned by ``owner`` goes.

        A tenant target takes every document of the tenant; a user target
        those owned by that user (any session, project or repository); a
        session target those owned by that session. A document owned more
        widely than the target (a tenant-wide document under a user target)
        stays. A groups target takes no document.

        :raises InvalidArgumentError: ``owner`` is not a :class:`SourceOwner`.
        """
        from .recall import SourceOwner  # at call time: recall imports this module

        owner = require_instance(owner, SourceOwner, "owner")
        if self.groups:
            return False
        return self._owns(owner.tenant, owner.user, owner.session)

    def covers_fact(self, scope: MemoryScope, provenance: Sequence[GroupRef]) -> bool:
        """True if a memory fact of ``scope`` with ``provenance`` goes.

        Tenant and user targets take every fact of their tenant (user); a
        session target takes the facts of its user whose provenance names
        the session; a groups target takes none (``forget`` handles a fact's
        sources).

        :raises InvalidArgumentError: ``scope`` is not a :class:`MemoryScope` or ``provenance``
            not a sequence of :class:`GroupRef`.
        """
        from .memory import GroupRef, MemoryScope  # at call time: memory imports this module

        scope = require_instance(scope, MemoryScope, "scope")
        if isinstance(provenance, str | bytes) or not isinstance(provenance, Sequence):
            raise InvalidArgumentError(
                f"provenance must be a sequence of GroupRef, got {type(provenance).__name__}"
            )
        for ref in provenance:
            require_instance(ref, GroupRef, "each provenance item")
        if self.groups or scope.tenant != self.tenant_id:
            return False
        if self.user_id is not None and scope.user != self.user_id:
            return False
        if self.session_id is not None:
            return any(ref.session == self.session_id for ref in provenance)
        return True

    def describe(self) -> str:
        """The target in words, for messages (ids quoted as given)."""
        where = f"tenant {self.tenant_id!r}"
        if self.user_id is not None:
            where = f"user {self.user_id!r} of {where}"
        if self.session_id is not None:
            where = f"session {self.session_id!r} of {where}"
        if self.groups:
            spans = ", ".join(f"{r.start}..{r.stop - 1}" for r in self.groups[:4])
            more = "…" if len(self.groups) > 4 else ""
            where = f"groups {spans}{more} of {where}"
        return where


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
    digests: tuple[tuple[int, str], ...] = attrs.field(default=(), converter=_pairs)
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
