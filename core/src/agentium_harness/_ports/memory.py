"""The memory store port: durable facts whose lifecycle the host controls (R36–R40).

A fact belongs to a :class:`MemoryScope` (tenant, user, optional project and
repository), carries a validity window, its provenance (the message groups it
came from) and a revision. The host decides what is remembered, corrected and
forgotten; the store keeps every revision:

- ``remember`` stores a new fact (revision 1) or acknowledges a duplicate of a
  current fact in the same scope;
- ``correct`` writes revision *n + 1* and marks revision *n* superseded, so the
  history stays readable; a fact holds at most :data:`MAX_FACT_REVISIONS`
  content revisions (:func:`check_revision`), so its whole history fits one
  bounded read;
- ``forget`` writes a tombstone revision and removes the text of every
  revision; a forgotten fact is never returned by ``lookup`` again and cannot
  be corrected;
- ``lookup`` (injection) returns only current facts valid at the given time;
  ``list_facts`` (operators) current ones, expired included; both bounded by :data:`MAX_LOOKUP_LIMIT`.

Ownership is tenant and user: ``correct``, ``forget`` and ``history`` of a
fact another tenant or user owns raise :class:`MemoryFactNotFoundError` with
the same message as for an id that does not exist, and change nothing.
"""

from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

import attrs

from .._codec import iso_utc, parse_iso_utc
from .._errors import InvalidArgumentError
from .._errors_memory import MemoryRejectedError
from .._scope import ABSENT_SEGMENT, Scope, VerifiedIdentity, encode_segment, require_identity
from .._validators import (
    check_count,
    identifier,
    keep_exact,
    key_sep,
    optional_identifier,
    optional_plain_str,
    plain_str,
    require_instance,
)
from ._base import Capabilities, OpContext, port_stub, unsupported
from .erasure import DEFAULT_ERASE_BATCH, EraseReport, EraseTarget

__all__ = [
    "MAX_FACT_BYTES",
    "MAX_FACT_REVISIONS",
    "MAX_LOOKUP_LIMIT",
    "MAX_PROVENANCE",
    "AckStatus",
    "FactStatus",
    "GroupRef",
    "MemoryAck",
    "MemoryCapabilities",
    "MemoryEvent",
    "MemoryEventKind",
    "MemoryFact",
    "MemoryScope",
    "MemoryStore",
    "StoredFact",
    "check_at",
    "check_fact",
    "check_limit",
    "check_revision",
    "iso_utc",
    "parse_iso_utc",
    "rejection_reason",
]

#: Largest fact text, in UTF-8 bytes, any store accepts.
MAX_FACT_BYTES = 4096
#: Most facts one ``lookup``, ``list_facts`` or ``history`` call may return.
MAX_LOOKUP_LIMIT = 200
#: Most provenance references one fact may carry.
MAX_PROVENANCE = 32
#: Most content revisions one fact may hold (revision 1 and its corrections). One below
#: :data:`MAX_LOOKUP_LIMIT`, so a fact's whole history, its tombstone included, is one
#: bounded ``history`` read: forgetting and ``runtime.forget`` see every revision.
MAX_FACT_REVISIONS = MAX_LOOKUP_LIMIT - 1

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: Largest provenance ``seq`` and fact revision: the largest SQLite INTEGER.
_MAX_SEQ = 2**63 - 1


@attrs.frozen(slots=True)
class MemoryScope:
    """Who a fact belongs to: tenant and user, optionally narrowed to a project and a repository.

    Every id is validated like a session's (non-empty, at most 256 characters,
    no control characters). A fact whose project (or repository) is ``None``
    applies in every project (repository) of its user; a fact with a project
    applies only there.
    """

    tenant: str = attrs.field(converter=plain_str, validator=identifier)
    user: str = attrs.field(converter=plain_str, validator=identifier)
    project: str | None = attrs.field(
        default=None, converter=optional_plain_str, validator=optional_identifier
    )
    repository: str | None = attrs.field(
        default=None, converter=optional_plain_str, validator=optional_identifier
    )

    @classmethod
    def of(
        cls, identity: VerifiedIdentity, project: str | None = None, repository: str | None = None
    ) -> MemoryScope:
        """The memory scope of a verified identity (R16: only verified identity is accepted)."""
        require_identity(identity)
        return cls(identity.tenant, identity.user, project, repository)

    @classmethod
    def of_session(cls, scope: Scope) -> MemoryScope:
        """The memory scope of a run's :class:`~agentium_harness._scope.Scope` (its session dropped)."""
        scope = require_instance(scope, Scope, "scope")
        return cls(scope.tenant, scope.user, scope.project, scope.repository)

    def owns(self, other: MemoryScope) -> bool:
        """True if ``other`` belongs to the same tenant and user (who may correct and forget it)."""
        other = require_instance(other, MemoryScope, "other")
        return self.tenant == other.tenant and self.user == other.user

    def sees(self, fact_scope: MemoryScope) -> bool:
        """True if a fact of ``fact_scope`` may be injected into a request of this scope."""
        fact_scope = require_instance(fact_scope, MemoryScope, "fact_scope")
        return (
            self.owns(fact_scope)
            and fact_scope.project in (None, self.project)
            and fact_scope.repository in (None, self.repository)
        )

    def key_segments(self) -> tuple[str, str, str, str]:
        """Four encoded segments, absent optionals as ``~``; the mapping is injective."""
        return (
            encode_segment(self.tenant),
            encode_segment(self.user),
            ABSENT_SEGMENT if self.project is None else encode_segment(self.project),
            ABSENT_SEGMENT if self.repository is None else encode_segment(self.repository),
        )

    def key(self, sep: str = "/") -> str:
        """The segments joined by ``sep`` (see :meth:`SessionKey.key`)."""
        return key_sep(sep).join(self.key_segments())


def _memory_scope(value: object) -> MemoryScope:
    """Accept a :class:`MemoryScope`, or a session :class:`Scope` (its session dropped)."""
    if isinstance(value, MemoryScope):
        return value
    if isinstance(value, Scope):
        return MemoryScope.of_session(value)
    raise InvalidArgumentError(f"scope must be a MemoryScope, got {type(value).__name__}")


def _optional_memory_scope(value: object) -> MemoryScope | None:
    return None if value is None else _memory_scope(value)


def _aware(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgumentError(
            f"{attribute.name} must be a timezone-aware datetime (or None), got {value!r}; "
            "nothing was written"
        )


@attrs.frozen(slots=True)
class GroupRef:
    """A message group a fact came from: its session, ``seq`` and archive digest (provenance)."""

    session: str = attrs.field(converter=plain_str, validator=identifier)
    seq: int = attrs.field()
    digest: str = attrs.field()

    @seq.validator
    def _seq(self, attribute: attrs.Attribute[Any], value: object) -> None:
        # Bounded as a SQLite INTEGER: a seq of thousands of digits could be neither stored
        # (canonical JSON) nor rendered into a memory block's label (int-to-str limit), failing a run.
        # (check_count reads an int subclass as its number: its own comparisons are not trusted.)
        keep_exact(self, attribute, value, check_count(value, "provenance seq", minimum=0, ceiling=_MAX_SEQ))

    @digest.validator
    def _digest(self, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, str) or not _DIGEST.fullmatch(value):
            raise InvalidArgumentError(f"provenance digest must be 'sha256:<64 hex>', got {value!r}")

    def label(self) -> str:
        """``<session>#<seq>``, as shown in a memory block's ``provenance`` attribute."""
        return f"{encode_segment(self.session)}#{self.seq}"


def _plain_text(value: object) -> object:
    """A plain ``str`` copy of a ``str`` subclass (other types are left for the validator to refuse).

    None of a subclass's own methods is trusted: an ``encode`` or ``strip`` that lies would
    otherwise pass a fact over :data:`MAX_FACT_BYTES` (or an empty one) through every check.
    """
    return str.__str__(value) if isinstance(value, str) else value


#: Most provenance items a fact is built with: past MAX_PROVENANCE it is rejected (and says how
#: many it cited), but an endless iterable is never read whole.
PROVENANCE_READ = 10 * MAX_PROVENANCE


def _provenance(value: Iterable[GroupRef]) -> tuple[GroupRef, ...]:
    if isinstance(value, str | bytes):
        raise InvalidArgumentError("provenance must be a collection of GroupRef, not a string")
    if not isinstance(value, Iterable):
        raise InvalidArgumentError(f"provenance must be a collection of GroupRef, got {type(value).__name__}")
    refs = tuple(itertools.islice(value, PROVENANCE_READ + 1))
    if len(refs) > PROVENANCE_READ:
        raise InvalidArgumentError(
            f"provenance holds more than {PROVENANCE_READ} items; at most {MAX_PROVENANCE}"
        )
    for ref in refs:
        if not isinstance(ref, GroupRef):
            raise InvalidArgumentError(f"provenance items must be GroupRef, got {type(ref).__name__}")
    return refs


@attrs.frozen(slots=True)
class MemoryFact:
    """A fact the host asks to keep: its scope, text, validity window and provenance.

    Types are checked here; what a store accepts (size, window order) is
    :func:`check_fact`, so a rejected fact can still be reported through
    :class:`MemoryAck`. The text is data whatever it says: a wrapper tag in
    it is kept verbatim and escaped when the fact is rendered into a request
    (:meth:`SourceBlock.render`).
    """

    scope: MemoryScope = attrs.field(converter=_memory_scope)
    text: str = attrs.field(converter=_plain_text)
    valid_from: datetime | None = attrs.field(default=None, validator=_aware)
    valid_until: datetime | None = attrs.field(default=None, validator=_aware)
    provenance: tuple[GroupRef, ...] = attrs.field(default=(), converter=_provenance)

    @text.validator
    def _text(self, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, str):
            raise InvalidArgumentError(f"fact text must be a str, got {type(value).__name__}")

    def valid_at(self, when: datetime) -> bool:
        """True if ``when`` lies in ``[valid_from, valid_until)``."""
        return (self.valid_from is None or self.valid_from <= when) and (
            self.valid_until is None or when < self.valid_until
        )


def _in_utc_range(when: datetime) -> bool:
    """True if ``when`` (aware) has a UTC time a ``datetime`` can hold (every store keeps UTC)."""
    try:
        when.astimezone(UTC)
    except OverflowError:
        return False
    return True


def check_at(at: object) -> datetime | None:
    """``at`` if ``None`` or a timezone-aware datetime with a UTC time; else :class:`InvalidArgumentError`.

    What ``lookup(..., at=...)`` and ``MemoryManager.select(at=...)`` accept:
    a naive datetime, any other type, or a time at the edge of the
    ``datetime`` range whose UTC time does not exist is refused.
    """
    if at is None:
        return None
    if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
        raise InvalidArgumentError(f"at must be a timezone-aware datetime (or None), got {at!r}")
    if not _in_utc_range(at):
        raise InvalidArgumentError(f"at has no UTC time between years 1 and 9999: {at!r}")
    return at


def rejection_reason(fact: MemoryFact, max_bytes: int = MAX_FACT_BYTES) -> str | None:
    """Why a store must refuse ``fact``, or ``None`` if it is acceptable (non-fact: InvalidArgumentError)."""
    if not require_instance(fact, MemoryFact, "fact").text.strip():
        return "the fact text is empty"
    try:
        size = len(fact.text.encode("utf-8"))
    except UnicodeEncodeError:
        return "the fact text is not valid Unicode"
    if size > max_bytes:
        return f"the fact text is {size} bytes, over the limit of {max_bytes}"
    if "\x00" in fact.text:
        return "the fact text contains NUL"
    for bound in (fact.valid_from, fact.valid_until):
        if bound is not None and not _in_utc_range(bound):
            return "a validity bound is out of range: it has no UTC time between years 1 and 9999"
    if fact.valid_from is not None and fact.valid_until is not None and fact.valid_until <= fact.valid_from:
        return "the validity window ends before (or when) it starts"
    if len(fact.provenance) > MAX_PROVENANCE:
        return f"the fact cites {len(fact.provenance)} groups, over the limit of {MAX_PROVENANCE}"
    return None


def check_fact(fact: MemoryFact, max_bytes: int = MAX_FACT_BYTES) -> None:
    """Raise :class:`~agentium_harness.MemoryRejectedError` if a store must refuse ``fact``."""
    if not isinstance(fact, MemoryFact):
        raise InvalidArgumentError(f"expected a MemoryFact, got {type(fact).__name__}; nothing was written")
    reason = rejection_reason(fact, max_bytes)
    if reason is not None:
        raise MemoryRejectedError(reason)


def check_limit(limit: object) -> int:
    """``limit`` if it is an int in ``1..MAX_LOOKUP_LIMIT``; else :class:`InvalidArgumentError`."""
    return check_count(limit, "limit", ceiling=MAX_LOOKUP_LIMIT)  # (an int subclass as its number)


def check_revision(latest: int) -> None:
    """Raise :class:`MemoryRejectedError` if a fact whose latest revision is ``latest`` is at the cap.

    A correction writes revision ``latest + 1``; past :data:`MAX_FACT_REVISIONS`
    the fact's history (with the tombstone a later ``forget`` adds) would no
    longer fit one :data:`MAX_LOOKUP_LIMIT` read. Call it before writing.
    """
    if latest >= MAX_FACT_REVISIONS:
        raise MemoryRejectedError(
            f"the fact already has {latest} revisions, the most one fact may hold ({MAX_FACT_REVISIONS}); "
            "remember a new fact and forget this one"
        )


class FactStatus(enum.StrEnum):
    """Where a revision stands: the current one, one a correction replaced, or a tombstone."""

    CURRENT = "current"
    SUPERSEDED = "superseded"
    FORGOTTEN = "forgotten"


@attrs.frozen(slots=True)
class StoredFact:
    """One stored revision of a fact, as a store returns it.

    A forgotten fact's revisions all read ``status=FORGOTTEN`` with empty
    ``text`` and no provenance: forgetting removes the content, the tombstone
    only says that a fact existed and when it was forgotten.
    """

    fact_id: str = attrs.field(converter=plain_str, validator=identifier)
    revision: int = attrs.field()
    status: FactStatus = attrs.field(converter=FactStatus)
    fact: MemoryFact
    recorded_at: datetime = attrs.field(validator=_aware)

    @revision.validator
    def _revision(self, attribute: attrs.Attribute[Any], value: object) -> None:
        # A memory block labels it: "True", "-3" or a 5,000-digit int (str() raises) must not get there.
        keep_exact(self, attribute, value, check_count(value, "a fact revision", ceiling=_MAX_SEQ))

    @property
    def scope(self) -> MemoryScope:
        """The fact's scope."""
        return self.fact.scope

    @property
    def text(self) -> str:
        """The fact's text (empty once forgotten)."""
        return self.fact.text

    def current_at(self, when: datetime) -> bool:
        """True if this revision is current and valid at ``when`` (what injection may use)."""
        return self.status is FactStatus.CURRENT and self.fact.valid_at(when)


class AckStatus(enum.StrEnum):
    """What a write did (R39)."""

    STORED = "stored"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"


@attrs.frozen(slots=True)
class MemoryAck:
    """The acknowledgment of a write (R39): stored, duplicate of a current fact, or rejected and why.

    ``fact_id`` and ``revision`` name what is now current (for a duplicate:
    the existing fact; for a forget: the tombstone). ``durable`` says the
    store acknowledged a durable write. ``notes`` lists lifecycle hooks that
    raised after the write (the write stands).
    """

    status: AckStatus = attrs.field(converter=AckStatus)
    fact_id: str | None = None
    revision: int | None = None
    reason: str = ""
    durable: bool = False
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True unless rejected."""
        return self.status is not AckStatus.REJECTED


class MemoryEventKind(enum.StrEnum):
    """What happened to memory; broadcast through the ``agentium_memory_event`` hook."""

    REMEMBERED = "remembered"
    CORRECTED = "corrected"
    FORGOTTEN = "forgotten"
    DRAINED = "drained"


@attrs.frozen(slots=True)
class MemoryEvent:
    """A memory lifecycle event: what happened, in which scope, to which fact and revision.

    ``scope`` is ``None`` for ``drained`` (a drain covers every scope);
    ``detail`` is a short summary (for ``drained``: the counts).
    """

    kind: MemoryEventKind = attrs.field(converter=MemoryEventKind)
    scope: MemoryScope | None = attrs.field(default=None, converter=_optional_memory_scope)
    fact_id: str | None = None
    revision: int | None = None
    detail: str = ""


@attrs.frozen(slots=True)
class MemoryCapabilities(Capabilities):
    """What a memory store declares.

    - ``acknowledged_writes``: ``remember`` returns only after the write is done as declared (required).
    - ``durable``: acknowledged writes survive a process crash.
    - ``correction``: :meth:`MemoryStore.correct` writes a new revision, keeping the history.
    - ``forgetting``: :meth:`MemoryStore.forget` tombstones a fact and removes its content.
    - ``listing``: :meth:`MemoryStore.list_facts` lists a scope's current facts, bounded.
    - ``history``: :meth:`MemoryStore.history` returns every revision of a fact.
    - ``erasure``: :meth:`MemoryStore.erase` removes every revision of a tenant's, user's or
      session's facts (docs/erasure.md).
    """

    METHODS: ClassVar[dict[str, str]] = {
        "correction": "correct",
        "forgetting": "forget",
        "listing": "list_facts",
        "history": "history",
        "erasure": "erase",
    }
    REQUIRED: ClassVar[tuple[str, ...]] = ("acknowledged_writes",)

    acknowledged_writes: bool = False
    durable: bool = False
    correction: bool = False
    forgetting: bool = False
    listing: bool = False
    history: bool = False
    erasure: bool = False


class MemoryStore:
    """Port for durable memory. Every method checks ``ctx`` before it starts and writes nothing if refused."""

    capabilities: ClassVar[MemoryCapabilities]

    @port_stub
    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        """Store ``fact`` as revision 1 of a new fact id and acknowledge it (R39).

        Call ``ctx.raise_if_expired("memory remember")`` and :func:`check_fact`
        before writing. A current fact of the same scope with the same text
        and validity is a duplicate: acknowledge it with ``DUPLICATE`` and its id and
        revision, writing nothing, unless it cites new groups: then write its next
        revision citing them, ``STORED`` (:mod:`.memory_provenance`). Return only
        once the write is done as declared.

        Raises: ``MemoryRejectedError`` for a fact :func:`check_fact` refuses;
        ``OperationCancelledError`` when cancelled or past the deadline.
        """
        raise unsupported(self, "remember")

    @port_stub
    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: OpContext, *, at: datetime | None = None
    ) -> Sequence[StoredFact]:
        """At most ``limit`` current facts ``scope`` sees (:meth:`MemoryScope.sees`), valid at ``at``.

        ``at`` defaults to now. Facts matching more of the query's words come
        first, then the most recently recorded; an empty query lists the most
        recent. Never returns a superseded or forgotten revision, an expired
        or not yet valid fact, or another scope's fact. ``limit`` is checked
        with :func:`check_limit`, ``at`` with :func:`check_at`, and ``query``
        must be a ``str``. Call ``ctx.raise_if_expired("memory lookup")``
        before starting.

        Raises: ``InvalidArgumentError`` for a bad ``limit``, ``at`` or ``query``;
        ``OperationCancelledError`` when cancelled or past the deadline.
        """
        raise unsupported(self, "lookup")

    @port_stub
    async def correct(
        self, scope: MemoryScope, fact_id: str, replacement: MemoryFact, ctx: OpContext
    ) -> MemoryAck:
        """Write ``replacement`` as the next revision of ``fact_id``; the old one becomes superseded.

        Declared by ``correction``. ``replacement.scope`` must be owned by
        ``scope``'s tenant and user. Identical content is a duplicate, as for :meth:`remember`.
        A fact already holding :data:`MAX_FACT_REVISIONS` revisions is refused
        (:func:`check_revision`) and nothing is written.
        Call ``ctx.raise_if_expired("memory correct")`` before writing.

        Raises: ``MemoryFactNotFoundError`` when the id does not exist or
        belongs to another tenant or user (one message for both);
        ``MemoryFactForgottenError`` for a forgotten fact; ``MemoryRejectedError``
        (a bad replacement, or the revision cap); ``OperationCancelledError``;
        ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "correct", "correction")

    @port_stub
    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        """Tombstone ``fact_id`` and remove the text of every revision. Declared by ``forgetting``.

        Returns ``STORED`` with the tombstone's revision, or ``DUPLICATE`` if
        it was already forgotten. Call ``ctx.raise_if_expired("memory forget")``
        before writing.

        Raises: ``MemoryFactNotFoundError`` (missing or foreign, one message);
        ``OperationCancelledError``; ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "forget", "forgetting")

    @port_stub
    async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> Sequence[StoredFact]:
        """At most ``limit`` current facts owned by ``scope``'s tenant and user, newest first.

        Expired facts are included (an operator sees them); superseded and
        forgotten revisions are not. Declared by ``listing``. Call
        ``ctx.raise_if_expired("memory list")`` before starting.

        Raises: ``OperationCancelledError`` when cancelled or past the deadline;
        ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "list_facts", "listing")

    @port_stub
    async def history(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> Sequence[StoredFact]:
        """Every revision of ``fact_id``, oldest first (at most :data:`MAX_LOOKUP_LIMIT`).

        Declared by ``history``. Call ``ctx.raise_if_expired("memory history")``
        before starting.

        Raises: ``MemoryFactNotFoundError`` (missing or foreign, one message);
        ``OperationCancelledError``; ``UnsupportedOperationError`` when not declared.
        """
        raise unsupported(self, "history", "history")

    @port_stub
    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Remove what this store holds of ``target``, at most ``max_items`` per call (``erasure``).

        Memory store: every revision of every covered fact
        (:meth:`EraseTarget.covers_fact`), tombstones included, counted as
        ``fact`` (and ``revision``). A groups target removes nothing here.

        Nothing outside the target changes: a neighbouring session, user or
        tenant keeps its stored bytes exactly. ``dry_run=True`` removes
        nothing and reports what would go. When the call stops at
        ``max_items`` the report's status is ``partial`` and the engine calls
        again; erasing what is already gone is a success reporting nothing.
        Report how physical the removal was (``physical`` and ``detail``:
        free pages, earlier object versions) truthfully.

        Call ``ctx.raise_if_expired("memory erase")`` before removing anything; a
        call stopped part way may have removed part of the target (calling
        again continues).

        Raises: ``InvalidArgumentError`` for a target that is not an
        ``EraseTarget``; the store's backend errors; ``OperationCancelledError``
        when cancelled or past the deadline; ``UnsupportedOperationError``
        when not declared.
        """
        raise unsupported(self, "erase", "erasure")

    async def aclose(self) -> None:
        """Release what the adapter acquired itself."""
