"""Identity and scope: who a run is for, and how that reaches a backend key.

Requirements: R14 (scope fields), R16 (only verified identity is accepted).

Every identifier is validated once, at construction (non-empty, at most 256
characters, no NUL or control characters), and kept as an exact ``str``: a
``str`` subclass given is copied to the plain text it holds, so no method of
the host's class (a lying ``__len__``, ``encode`` or ``__eq__``) decides what
is checked, keyed or encoded. Backend keys are built from
:func:`encode_segment`, an injective encoding whose output alphabet holds no
path separator, dot, glob or escape character, so an ID can neither escape a
key prefix nor act as a pattern.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ._errors import IdentityError
from ._validators import (
    KEY_SEGMENT_KEPT,
    MAX_ID_LENGTH,
    key_sep,
    optional_plain_str,
    plain_str,
    require_instance,
    valid_ids,
    validate_id,
)

__all__ = [
    "ERASURE_RECORDS_TENANT",
    "MAX_ID_LENGTH",
    "RecallScope",
    "Scope",
    "SessionKey",
    "VerifiedIdentity",
    "decode_segment",
    "encode_segment",
    "exact_scope_ids",
    "require_identity",
    "validate_id",
]


# Characters kept as they are by the key encoding; everything else (including
# "%", ".", "/", "*", "?", "[", "\\" and "~") is percent-encoded byte by byte.
_SAFE = frozenset(KEY_SEGMENT_KEPT.encode("ascii"))
_UPPER_HEX = frozenset("0123456789ABCDEF")
#: Marker for an absent optional segment. "~" is never produced by the encoding.
ABSENT_SEGMENT = "~"

#: The tenant id under which the session store keeps the engine's erasure records
#: (docs/erasure.md). It begins with U+FFFF, a Unicode noncharacter no real id
#: carries, and no :class:`VerifiedIdentity` may name it, so no run, append or
#: erasure can ever reach those records.
ERASURE_RECORDS_TENANT = "\uffffagentium-erasure"


def _id_validator(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    validate_id(value, attribute.name)


def _optional_id_validator(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        validate_id(value, attribute.name)


def encode_segment(value: str) -> str:
    r"""Encode one identifier as a backend key segment, injectively.

    UTF-8 bytes outside ``[A-Za-z0-9_-]`` become ``%XX`` (upper-case hex). The
    result never contains ``/``, ``.``, ``*``, ``?``, ``[``, ``\\`` or ``~``;
    different inputs always give different outputs (``%`` itself is encoded).
    A ``str`` subclass is encoded as the plain text it holds (its own
    ``encode`` is never called), the text :func:`validate_id` checked.
    """
    if type(value) is not str:
        value = str.__str__(value)
    if value.isascii() and value.replace("_", "").replace("-", "").isalnum():
        # Every character is one the encoding keeps (ASCII letters and digits, "_", "-"): the
        # byte loop below would give ``value`` back (found at C speed; exact str only).
        return value
    out: list[str] = []
    for byte in value.encode("utf-8"):
        if byte in _SAFE:
            out.append(chr(byte))
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def decode_segment(segment: str) -> str:
    """Invert :func:`encode_segment`. Raises ``ValueError`` on text it could not have produced."""
    raw = bytearray()
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "%":
            hexpart = segment[i + 1 : i + 3]
            # Checked character by character: int(..., 16) alone would accept
            # "+1", " 1" or "1 ", which the encoder never writes.
            if len(hexpart) != 2 or not all(c in _UPPER_HEX for c in hexpart):
                raise ValueError(f"bad escape in key segment {segment!r}")
            byte = int(hexpart, 16)
            if byte in _SAFE:
                raise ValueError(f"non-canonical escape in key segment {segment!r}")
            raw.append(byte)
            i += 3
        elif ord(ch) < 128 and ord(ch) in _SAFE:
            raw.append(ord(ch))
            i += 1
        else:
            raise ValueError(f"character {ch!r} cannot appear in a key segment")
    return raw.decode("utf-8")


@attrs.frozen(slots=True)
class VerifiedIdentity:
    """A tenant and user that the host has authenticated (R16).

    ``verified_by`` names how the host verified it (an auth provider, a token
    issuer, "cli-operator"…). The runtime takes only this type: an identity a
    caller merely states is not authentication.
    """

    tenant: str = attrs.field(converter=plain_str, validator=_id_validator)
    user: str = attrs.field(converter=plain_str, validator=_id_validator)
    verified_by: str = attrs.field(converter=plain_str, validator=_id_validator)

    @tenant.validator
    def _not_reserved(self, attribute: attrs.Attribute[Any], value: str) -> None:
        if value == ERASURE_RECORDS_TENANT:
            raise IdentityError("the tenant id of the erasure records is reserved; no identity may name it")


def require_identity(identity: object) -> VerifiedIdentity:
    """Return ``identity`` if it is a :class:`VerifiedIdentity`, else raise :class:`IdentityError`."""
    if not isinstance(identity, VerifiedIdentity):
        raise IdentityError(
            f"identity must be a VerifiedIdentity verified by the host, got {type(identity).__name__}; "
            "caller-stated identity is not authentication"
        )
    return identity


@attrs.frozen(slots=True)
class RecallScope:
    """Optional narrowing of a run to a project and/or repository (R7, R14)."""

    project: str | None = attrs.field(
        default=None, converter=optional_plain_str, validator=_optional_id_validator
    )
    repository: str | None = attrs.field(
        default=None, converter=optional_plain_str, validator=_optional_id_validator
    )


@attrs.frozen(slots=True, cache_hash=True)
class SessionKey:
    """Where a session lives: tenant, user and session id. Stores are keyed by this."""

    tenant: str = attrs.field(converter=plain_str, validator=_id_validator)
    user: str = attrs.field(converter=plain_str, validator=_id_validator)
    session: str = attrs.field(converter=plain_str, validator=_id_validator)

    @classmethod
    def of(cls, identity: VerifiedIdentity, session_id: str) -> SessionKey:
        """Build the key of ``session_id`` for a verified identity."""
        require_identity(identity)
        return cls(identity.tenant, identity.user, session_id)

    def key_segments(self) -> tuple[str, str, str]:
        """Encoded segments (tenant, user, session) for backend keys and paths."""
        return (encode_segment(self.tenant), encode_segment(self.user), encode_segment(self.session))

    def key(self, sep: str = "/") -> str:
        """The segments joined by ``sep``; injective because segments never contain ``sep``.

        :raises InvalidArgumentError: ``sep`` is not a ``str`` or holds a character segments use.
        """
        return key_sep(sep).join(self.key_segments())


_NO_RECALL_SCOPE: Final = RecallScope()

# The session key of each (tenant, user, session) a scope asked for lately: every run and history
# write asks several times, and building the key validates its three ids again. A key is a pure
# function of three exact ``str`` values that passed validation (both are required to enter), and
# it is frozen, so the one kept is equal in every way to a new one. Cleared when full: bounded.
_SESSION_KEYS: dict[tuple[str, str, str], SessionKey] = {}
_MAX_SESSION_KEYS: Final = 4096


@attrs.frozen(slots=True)
class Scope:
    """The memory scope of a session: tenant, user, session, optional project and repository (R14)."""

    tenant: str = attrs.field(converter=plain_str, validator=_id_validator)
    user: str = attrs.field(converter=plain_str, validator=_id_validator)
    session: str = attrs.field(converter=plain_str, validator=_id_validator)
    project: str | None = attrs.field(
        default=None, converter=optional_plain_str, validator=_optional_id_validator
    )
    repository: str | None = attrs.field(
        default=None, converter=optional_plain_str, validator=_optional_id_validator
    )

    @classmethod
    def of(
        cls,
        identity: VerifiedIdentity,
        session_id: str,
        recall_scope: RecallScope | None = None,
    ) -> Scope:
        """The scope of a run: a verified identity, a session id and an optional recall scope."""
        require_identity(identity)
        rs = (
            _NO_RECALL_SCOPE
            if recall_scope is None
            else require_instance(recall_scope, RecallScope, "recall_scope")
        )
        return cls(identity.tenant, identity.user, session_id, rs.project, rs.repository)

    @property
    def session_key(self) -> SessionKey:
        """The session this scope belongs to."""
        tenant, user, session = ids = (self.tenant, self.user, self.session)
        # Only exact str ids are remembered or looked up (a subclass may compare equal and differ).
        exact = type(tenant) is str and type(user) is str and type(session) is str
        if exact and (key := _SESSION_KEYS.get(ids)) is not None:
            return key
        key = SessionKey(tenant, user, session)
        # Checked again before it is kept: validators may have been switched off (on another thread).
        if exact and not attrs.validators.get_disabled() and valid_ids(ids):
            if len(_SESSION_KEYS) >= _MAX_SESSION_KEYS:
                _SESSION_KEYS.clear()
            _SESSION_KEYS[ids] = key
        return key

    def key_segments(self) -> tuple[str, str, str, str, str]:
        """Five encoded segments, absent optionals as ``~``; the mapping is injective."""
        return (
            encode_segment(self.tenant),
            encode_segment(self.user),
            encode_segment(self.session),
            ABSENT_SEGMENT if self.project is None else encode_segment(self.project),
            ABSENT_SEGMENT if self.repository is None else encode_segment(self.repository),
        )

    def key(self, sep: str = "/") -> str:
        """The segments joined by ``sep`` (see :meth:`SessionKey.key`)."""
        return key_sep(sep).join(self.key_segments())


def exact_scope_ids(scope: object) -> tuple[str, str, str, str | None, str | None] | None:
    """A scope's ids ``(tenant, user, session, project, repository)`` when it is a plain :class:`Scope`.

    ``None`` unless ``scope`` is exactly a ``Scope`` whose ids are exact
    ``str`` (``None`` for an absent project or repository): only then do
    the ids alone decide what the scope is and how it is written, so only
    then may they key something remembered for it (a ``str`` subclass may
    compare equal to another text and differ).
    """
    if type(scope) is not Scope:
        return None
    tenant, user, session, project, repository = ids = (
        scope.tenant,
        scope.user,
        scope.session,
        scope.project,
        scope.repository,
    )
    if (
        type(tenant) is str
        and type(user) is str
        and type(session) is str
        and (project is None or type(project) is str)
        and (repository is None or type(repository) is str)
    ):
        return ids
    return None
