"""Checking a recall row's text against its revision before a read returns it.

A role that may write ``recall_sources`` (the application role may, within
its tenant) or anyone with the database could change a row's ``body`` while
its ``revision`` stays: a read that returned the body as found would hand
the model edited text as evidence at the source's revision. So every text
is checked against the revision it is read at, as the built-in SQLite store
does: a document's revision is the digest of its title and text, so both
are hashed again; a group's revision is its archive receipt's digest, so
its canonical bytes (kept in ``archive_groups``) are decoded strictly
against it and its body must be the text indexed for them. Nothing new is
stored: rows of every schema version are checked the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentium_harness.plugin_api import (
    ArchiveCorruptError,
    SessionKey,
    SourceOwner,
    SourceRef,
    decode_archived_group,
    digest_of,
    group_source_id,
    indexed_group_text,
)
from agentium_harness.plugin_api import (
    source_kind_phrase as kind_of,
)

from .errors import PostgresRecallError

__all__ = ["verified_text"]


def _damaged(source_id: str, why: str) -> PostgresRecallError:
    # The id is content: kept on the error, out of its text (which reaches Evidence.problems and logs).
    error = PostgresRecallError(
        f"postgres recall store: {kind_of(source_id)} is damaged: {why}; nothing of it was returned "
        "and the row was left as it is (its id is the error's source_id; delete it and index again)"
    )
    error.source_id = source_id
    return error


def verified_text(ref: SourceRef, owner: SourceOwner, row: Sequence[Any]) -> str | None:
    """The body of ``ref`` once checked against ``ref.revision``; None when its archived group is gone.

    ``row`` is ``(kind, seq, title, body, archive digest, archive data)``
    of the row found at ``ref.revision`` (the last two from
    ``archive_groups``, NULL for a document). A document whose title and
    body do not hash to its revision raises :class:`PostgresRecallError`; a
    group whose canonical bytes do not decode against its revision, or
    whose body is not the text indexed for them, raises
    :class:`~agentium_harness.plugin_api.ArchiveCorruptError`. A group whose
    canonical copy was erased (the archive's erase goes first) is None:
    its text can no longer be checked, so it is not returned.
    """
    kind, seq, title, body, digest, data = row
    source_id = ref.source_id
    if source_id.startswith("doc/") and kind == "document":
        if not isinstance(title, str) or not isinstance(body, str):
            raise _damaged(source_id, "its title or text is not text")
        if digest_of({"title": title, "text": body}) != ref.revision:
            raise _damaged(source_id, "its title and text do not match its revision")
        return body
    if source_id.startswith("group/") and kind == "group" and owner.user is not None and owner.session:
        key = SessionKey(owner.tenant, owner.user, owner.session)
        if digest is None and data is None:
            return None
        # Not the session's key: it holds the ids the source id does (content, as in _damaged).
        where = f"an indexed group source (seq {seq!r})"
        group = decode_archived_group(key, seq, digest, bytes(data) if data is not None else None, where)
        if group.digest != ref.revision or group_source_id(key, group.seq) != source_id:
            raise ArchiveCorruptError(
                f"{where} is filed under another source id or revision; the row is damaged"
            )
        # PostgreSQL text holds no NUL: the body was indexed with NUL shown as U+FFFD.
        if not isinstance(body, str) or indexed_group_text(group).replace("\x00", "\ufffd") != body:
            raise ArchiveCorruptError(
                f"{where}: its indexed text does not match its archived bytes; the row is damaged"
            )
        return body
    raise _damaged(source_id, f"its kind {kind!r} does not match its id")
