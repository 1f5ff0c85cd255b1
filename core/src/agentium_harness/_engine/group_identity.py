"""Whose is a group read back from the archive: the proof every reader of archived groups asks for.

An archive (or a recall store) answers a read with groups it says are this
session's; nothing but the group itself, or a receipt the session kept,
can prove it. The summary frontier (:mod:`.summary`) and the recall
index catch-up (:mod:`.catch_up`) both refuse a group that cannot be
shown to be this session's, so another session's or tenant's group,
returned by a hostile or buggy archive with its retained record removed,
is neither summarized nor indexed into this session's recall scope.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._history import MessageGroup, RetainedRecord
from .._scope import Scope, SessionKey

__all__ = ["foreign_group", "split_foreign"]


def foreign_group(key: SessionKey, group: MessageGroup, known: str | None) -> str | None:
    """Why ``group`` cannot be shown to be ``key``'s session's, or ``None`` when it can.

    The engine commits every group with a retained record of its session's
    scope, so a group read back that names another session is foreign, and
    so is one with no retained record at all: nothing in it says whose it
    is. ``known`` is the archive's receipt digest for the group's seq, when
    the caller still keeps one: the one other proof of identity (the caller
    must then check the group's digest against it). Without either, an
    archive that returns another session's group stripped of its record
    would have it treated as this session's.
    """
    retained = group.retained
    if retained is None:
        if known is not None:
            return None  # its digest must be the receipt's: the caller checks it
        return "the group carries no retained record naming this session, and no receipt vouches for it"
    # Exact types, read field by field: a look-alike record's own properties could say anything
    # (or raise), and would decide whose group this is.
    scope = retained.scope if type(retained) is RetainedRecord else None
    if type(scope) is not Scope:
        return "the group's retained record is not one the engine writes"
    ids = (scope.tenant, scope.user, scope.session)
    if any(type(i) is not str for i in ids) or ids != (key.tenant, key.user, key.session):
        return "the group belongs to another session"
    return None


def split_foreign(key: SessionKey, groups: Sequence[MessageGroup]) -> tuple[list[MessageGroup], list[int]]:
    """The groups of ``groups`` that prove they are ``key``'s session's, and the others' seqs (ascending).

    Each is checked by :func:`foreign_group` with no receipt.

    The recall paths that index groups read from the archive (the catch-up,
    ``agentium recall rebuild``) index only the first: a recall store refuses
    a group whose retained scope is another session's, but not one with none.
    """
    refused = sorted({g.seq for g in groups if foreign_group(key, g, None) is not None})
    return [g for g in groups if g.seq not in refused], refused
