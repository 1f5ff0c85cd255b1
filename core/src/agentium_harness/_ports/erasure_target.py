"""What an erasure targets: a tenant, a user, a session, or seq ranges of one session's groups.

Part of the erasure port (:mod:`.erasure`, which re-exports every name here):
:class:`EraseTarget` and its scope rules (:meth:`EraseTarget.covers_session`,
:meth:`~EraseTarget.covers_owner`, :meth:`~EraseTarget.covers_fact`,
:meth:`~EraseTarget.covers_group`), the one definition every adapter and the
engine share, and the :class:`SeqRange` a groups target names.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._errors import InvalidArgumentError
from .._scope import SessionKey, validate_id
from .._validators import (
    MAX_COUNT,
    exact_int,
    identifier,
    keep_exact,
    optional_identifier,
    optional_plain_str,
    plain_str,
    require_instance,
    shown_number,
)

if TYPE_CHECKING:  # the ports import this module; only attributes are used at run time
    from .memory import GroupRef, MemoryScope
    from .recall import SourceOwner

__all__ = [
    "DEFAULT_ERASE_BATCH",
    "MAX_ERASE_RANGES",
    "EraseLevel",
    "EraseTarget",
    "SeqRange",
    "count_field",
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


def count_field(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """An ``int`` from 0 to :data:`MAX_COUNT` (``bool`` refused), kept as the exact ``int`` it holds."""
    seq = exact_int(value)  # an int subclass as its number: its own comparisons are not trusted
    if seq is None or not 0 <= seq <= MAX_COUNT:
        raise InvalidArgumentError(
            f"{attribute.name} must be an int from 0 to {MAX_COUNT}, got {shown_number(value)}"
        )
    keep_exact(instance, attribute, value, seq)


@attrs.frozen(slots=True, order=True)
class SeqRange:
    """Group seqs ``start <= seq < stop`` of one session (``start < stop``)."""

    start: int = attrs.field(validator=count_field)
    stop: int = attrs.field(validator=count_field)

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


@attrs.frozen(slots=True)
class EraseTarget:
    """What to erase: a tenant, a user, a session, or archived groups of one session.

    Build one with :meth:`tenant`, :meth:`user`, :meth:`session` or (retention,
    forgetting) :meth:`groups`. The fields are ids as the host knows them:
    ``user_id`` needs a ``tenant_id``, ``session_id`` a ``user_id`` (a session
    id is unique only within its user), ``groups`` a session.
    """

    tenant_id: str = attrs.field(converter=plain_str, validator=identifier)
    user_id: str | None = attrs.field(
        default=None, converter=optional_plain_str, validator=optional_identifier
    )
    session_id: str | None = attrs.field(
        default=None, converter=optional_plain_str, validator=optional_identifier
    )
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
