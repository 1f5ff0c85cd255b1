"""Recall sources' owners and ids: who may see a source, and the source ids that encode it.

Part of the recall port (:mod:`agentium_harness._ports.recall` re-exports
every name). A source id is built injectively from its owner (documents) or
its session and seq (archived groups), so :func:`source_owner` can decode
and check the owner an adapter declares for it.
"""

from __future__ import annotations

import re
from typing import Any, Final

import attrs

from .._errors import InvalidArgumentError
from .._history import MessageGroup
from .._scope import ABSENT_SEGMENT, ERASURE_RECORDS_TENANT, Scope, SessionKey, decode_segment, encode_segment
from .._validators import exact_int, optional_plain_str, plain_str, require_instance, validate_id

__all__ = [
    "SourceOwner",
    "document_source_id",
    "group_source_id",
    "indexed_group_text",
    "source_kind_phrase",
    "source_owner",
]


def _owner_id(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        validate_id(value, attribute.name)


def _tenant_id(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    validate_id(value, attribute.name)
    if value == ERASURE_RECORDS_TENANT:
        # As VerifiedIdentity refuses it: no run can name it, so nothing may be indexed under it.
        raise InvalidArgumentError("the tenant id of the erasure records is reserved; no source may name it")


@attrs.frozen(slots=True)
class SourceOwner:
    """Who may see a source: a tenant and, optionally, one user, session, project and repository.

    A field left ``None`` does not narrow: a document owned by
    ``SourceOwner("acme")`` is visible to every run of tenant ``acme``; one
    owned by ``SourceOwner("acme", project="p")`` only to runs whose recall
    scope names project ``p``. Archived groups are owned by their session
    (tenant, user and session). The engine checks :meth:`visible_to` on every
    candidate and excerpt an adapter returns (R13).

    A session id is only unique within its user (sessions are keyed by
    tenant, user and session), so an owner naming a ``session`` must name its
    ``user`` too: ``SourceOwner("acme", session="s1")`` raises
    :class:`~agentium_harness._errors.InvalidArgumentError` rather than
    meaning "session ``s1`` of any user".
    """

    tenant: str = attrs.field(converter=plain_str, validator=_tenant_id)
    user: str | None = attrs.field(default=None, converter=optional_plain_str, validator=_owner_id)
    session: str | None = attrs.field(default=None, converter=optional_plain_str, validator=_owner_id)
    project: str | None = attrs.field(default=None, converter=optional_plain_str, validator=_owner_id)
    repository: str | None = attrs.field(default=None, converter=optional_plain_str, validator=_owner_id)

    def __attrs_post_init__(self) -> None:
        if self.session is not None and self.user is None:
            raise InvalidArgumentError(
                f"SourceOwner names session {self.session!r} but no user; a session id is unique only "
                "within its user, so give user= as well (or leave session out for every session)"
            )

    @classmethod
    def of_session(cls, key: SessionKey) -> SourceOwner:
        """The owner of a session's archived groups (``InvalidArgumentError`` if ``key`` is no SessionKey)."""
        key = require_instance(key, SessionKey, "key")
        return cls(key.tenant, key.user, key.session)

    def visible_to(self, scope: Scope) -> bool:
        """True if a run in ``scope`` may see a source with this owner (not a Scope: InvalidArgumentError)."""
        scope = require_instance(scope, Scope, "scope")
        return (
            self.tenant == scope.tenant
            and (self.user is None or self.user == scope.user)
            and (self.session is None or self.session == scope.session)
            and (self.project is None or self.project == scope.project)
            and (self.repository is None or self.repository == scope.repository)
        )

    def key_segments(self) -> tuple[str, str, str, str, str]:
        """Five encoded segments, absent fields as ``~``; injective like :meth:`Scope.key_segments`."""
        return tuple(  # type: ignore[return-value]
            ABSENT_SEGMENT if v is None else encode_segment(v)
            for v in (self.tenant, self.user, self.session, self.project, self.repository)
        )


def document_source_id(owner: SourceOwner, doc_id: str) -> str:
    """The source id of host document ``doc_id`` owned by ``owner``: ``doc/<owner segments>/<doc id>``.

    Built from :func:`~agentium_harness._scope.encode_segment`, so it is
    injective: two (owner, doc id) pairs never share a source id.
    """
    owner = require_instance(owner, SourceOwner, "owner")
    doc_id = validate_id(doc_id, "doc_id")
    return "/".join(("doc", *owner.key_segments(), encode_segment(doc_id)))


def source_kind_phrase(source_id: object) -> str:
    """Which kind of source ``source_id`` names, as a message says it without the id itself.

    ``"a document source"`` (:func:`document_source_id`), ``"a group source"``
    (:func:`group_source_id`), else ``"a source"``: a source id is content, so a store's error
    text names its kind and keeps the id in an attribute.
    """
    if isinstance(source_id, str) and source_id.startswith("doc/"):
        return "a document source"
    if isinstance(source_id, str) and source_id.startswith("group/"):
        return "a group source"
    return "a source"


def group_source_id(key: SessionKey, seq: int) -> str:
    """The source id of archived group ``seq`` of session ``key``: ``group/<t>/<u>/<s>/<seq>``.

    :raises InvalidArgumentError: ``key`` is not a ``SessionKey`` or ``seq`` not an ``int`` from 0.
    """
    key = require_instance(key, SessionKey, "key")
    plain = exact_int(seq)
    if plain is None or plain < 0:
        # str(seq) of "1/x", True or -1 made an id no group has, one that could alias another's.
        raise InvalidArgumentError(f"seq must be an int from 0, got {seq!r}")
    seq = plain
    parts = (encode_segment(key.tenant), encode_segment(key.user), encode_segment(key.session))
    return "/".join(("group", *parts, str(seq)))


def indexed_group_text(group: MessageGroup) -> str:
    """The text a recall store indexes for an archived group: one ``"<role>: <content>"`` line per message.

    Every store indexes the same text, so excerpts read alike whichever store found them.
    A message's own line breaks are kept (search sees its words as written),
    so this text is never shown to a model as it is: the engine renders a
    recalled group's excerpt from the group, one line per message, its line
    breaks escaped (docs/recall.md, "Render recalled groups").
    """
    group = require_instance(group, MessageGroup, "group")
    return "\n".join(f"{m.role.value}: {m.content}" for m in group.messages)


#: A group seq in a source id: canonical decimal, as ``str(int)`` writes it.
_SEQ: Final = re.compile(r"0|[1-9][0-9]*")


def source_owner(source_id: object) -> SourceOwner | None:
    """The owner encoded in ``source_id``, or ``None`` if no recall store could have made the id.

    Every recall source id is :func:`document_source_id` or
    :func:`group_source_id`; an id is accepted only if building it again from
    what it decodes to gives the same text. The engine drops a candidate whose
    declared owner is not the one its id encodes (R13).
    """
    if not isinstance(source_id, str):
        return None
    parts = source_id.split("/")
    try:
        if parts[0] == "doc" and len(parts) == 7:
            owner = SourceOwner(
                decode_segment(parts[1]),
                *(None if p == ABSENT_SEGMENT else decode_segment(p) for p in parts[2:6]),
            )
            return owner if document_source_id(owner, decode_segment(parts[6])) == source_id else None
        if parts[0] == "group" and len(parts) == 5 and _SEQ.fullmatch(parts[4]):
            key = SessionKey(*(decode_segment(p) for p in parts[1:4]))
            return SourceOwner.of_session(key) if group_source_id(key, int(parts[4])) == source_id else None
    except (ValueError, TypeError):  # bad escapes and invalid ids (InvalidIdError is a ValueError)
        return None
    return None
