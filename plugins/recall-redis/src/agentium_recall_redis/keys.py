r"""Key layout, owners and terms of the Redis recall store (pure functions, no I/O).

Every key of a tenant starts with ``<key_prefix>:{<tenant>}:`` where
``<tenant>`` is the tenant id through the core's injective
:func:`~agentium_harness.plugin_api.encode_segment`. The braces are a Redis
Cluster hash tag: all of a tenant's keys live in one slot, so one Lua script
can read and write them together. The encoding's alphabet is
``[A-Za-z0-9_-]`` plus ``%XX`` escapes, so no id can bring ``{``, ``}``,
``:``, ``*``, ``?``, ``[``, ``\`` or ``/`` into a key: two different tenants,
owners or terms never share a key, and no id can act as a pattern (the store
uses no pattern at all: no ``KEYS``, no ``SCAN``).

Under the tenant prefix (``P``):

=====================  ======  =====================================================
``P:ids``              hash    source id -> internal number ``n`` of its current row
``P:rev``              hash    source id -> current revision, or ``-<revision>`` (deleted)
``P:bk``               hash    owner key -> bucket number (one bucket per owner)
``P:kb``               hash    bucket number -> owner key, written with each new bucket
                               (:mod:`agentium_recall_redis.erase_stagings`; buckets made
                               before it have none until an erase walks ``P:bk``)
``P:bn``               hash    bucket number -> how many sources it holds
``P:nb`` / ``P:n``     string  counters of buckets and of rows
``P:rows``             zset    every row hash's number (member and score ``n``), written and
                               removed with the row: what an erasure's sweep reads past a
                               damaged ``P:n`` (rows written before it existed are not listed)
``P:rb``               string  ``0``, written by the first write of a tenant with nothing stored:
                               every row numbered past it is in ``P:rows`` (absent for a tenant
                               an earlier version began; :mod:`agentium_recall_redis.erase_walk`)
``P:v``                string  the tenant's layout version, ``4`` (words stemmed, groups with
                               neighbouring context, block digests), ``5`` once an erase of
                               this version ran (the same data; older versions refuse it:
                               ``ERASED_LAYOUT`` in :mod:`agentium_recall_redis.lua`); see below
``P:m:<n>``            hash    the row: sid, rev, title, size, owner key, bucket, kind,
                               for groups seq and receipt digest, ``td``: the text's
                               block digests (:mod:`agentium_recall_redis.text_blocks`)
                               (rows written by an earlier version lack ``td`` and may
                               hold ``terms``); ``vec``: its vector (little-endian
                               float32), when it has one
``P:vs:<b>``           zset    rows of bucket ``b`` with a vector: member and score ``n``
``P:vm`` / ``P:vc``    string  the model of the tenant's vectors (``"<model>/<dimension>"``)
                               and how many rows hold one
``P:t:<n>``            string  the source's text (read with ``GETRANGE``, whole blocks,
                               each checked against ``td``)
``P:c:<n>``            string  an archived group's canonical bytes
``P:k:<n>``            list    the row's postings: what removing them reads. ``term`` for
                               ``P:p``, ``<term`` / ``>term`` for ``P:x`` (members ``n<`` /
                               ``n>``)
``P:p:<b>:<term>``     zset    postings of ``term`` in bucket ``b``: member ``n``,
                               score ``n * 1024 + min(tf, 1023)`` (newest first)
``P:x:<b>:<term>``     zset    neighbouring context: member ``n<`` (``n>``) says that
                               ``term`` is in the first (last) line of group row ``n``,
                               so it is context of the group at the seq before (after)
                               it; score as in ``P:p``
``P:g:<b>``            zset    archived groups of a session's bucket: member ``n``, score seq
``P:pend``             zset    staged rows not yet published: member ``"<b> <n>"``,
                               score the lease's end (server time, ms)
``P:gc``               list    removed or abandoned rows (``"<b> <n>"``) whose postings
                               are still to be collected
``P:ef``               hash    erasure fences: owner-key prefix (``""``, ``u/``, ``u/s/``, or a
                               session's own key) -> when it ends (server ms); a write of an
                               owner under an unexpired one is refused
``P:efh``              hash    erasure fence holders: ``"<call id> <owner-key prefix>"`` -> when
                               that erase call's fence ends (server ms); dropped as it ends
``P:w:<token>``        string  a write's settlement token (expires after 10 minutes)
``P:is:<u>/``,         zset    erasure index (:mod:`agentium_recall_redis.erase_index`): the
``P:is:<u>/<s>/``              source ids (current or deleted, score 0) of user ``u``, and of
                               its session ``s``
``P:ir:<u>/``,         zset    erasure index: the row numbers (member and score ``n``) of user
``P:ir:<u>/<s>/``              ``u``, and of its session ``s`` (by owner key and by id)
``P:ixm``              string  ``1`` once every row and id of the tenant is in the erasure index
``P:ixw``              hash    where the walk indexing a tenant written before the erasure index
                               is, sealed (:mod:`agentium_recall_redis.erase_build`); gone once it ends
=====================  ======  =====================================================

Terms are index terms (:mod:`agentium_recall_redis.terms`: folded and
Porter-stemmed) through :func:`encode_term`. Layout 2 (``P:v``) was the first
with stemmed terms, layout 3 the first with neighbouring context (``P:x``),
layout 4 the first with block digests (``td``): a tenant whose rows were
written by an earlier version (``P:n`` present, ``P:v`` absent or neither
``4`` nor ``5``) holds unstemmed terms, groups without context or texts reads cannot
check, and the store refuses to rank or extend it
(:class:`~agentium_recall_redis.errors.RedisRecallLayoutError`; the README
says how to rebuild it).

A group's context postings belong to the group that lends its words, not
to the one they describe: indexing a group never rewrites its neighbours,
and removing it (replaced, deleted, erased) removes its words from their
context with its own postings. Discovery maps a context posting to the
neighbour's row by seq in ``P:g:<b>``.

Postings without a row hash (a staged row, a removed one not yet
collected) are never returned by any script.

An *owner key* is the owner's user, session, project and repository
segments joined by ``/``, ``~`` for an absent field (the tenant is in the
prefix). A scope sees at most 16 owner keys (each narrowing field either
absent or equal to the scope's), so discovery reads exactly the buckets the
scope may see and no foreign source can take a place before the limit.
"""

from __future__ import annotations

import functools
import itertools
import re
from typing import Final

from agentium_harness.plugin_api import (
    Scope,
    SessionKey,
    SourceOwner,
    decode_segment,
    document_source_id,
    encode_segment,
    group_source_id,
)

__all__ = [
    "ABSENT",
    "CONTEXT_LINE_BYTES",
    "edge_lines",
    "encode_term",
    "owner_from_key",
    "owner_key",
    "owner_of_source_id",
    "stored_seq",
    "tenant_prefix",
    "visible_owner_keys",
]

#: The segment of an absent owner field; :func:`encode_segment` never produces it.
ABSENT: Final = "~"

# A group seq in a source id: canonical decimal, as str(int) writes it.
_SEQ: Final = re.compile(r"0|[1-9][0-9]*")


def tenant_prefix(key_prefix: str, tenant: str) -> str:
    """``<key_prefix>:{<encoded tenant>}``: the start of every key of ``tenant`` (one cluster slot)."""
    return f"{key_prefix}:{{{encode_segment(tenant)}}}"


def owner_key(owner: SourceOwner) -> str:
    """The owner's four narrowing segments joined by ``/`` (``~`` when absent); injective per tenant."""
    return "/".join(owner.key_segments()[1:])


def owner_from_key(tenant: str, key: str) -> SourceOwner:
    """Invert :func:`owner_key` for ``tenant``. Raises ``ValueError`` on a key it could not have made."""
    parts = key.split("/")
    if len(parts) != 4:
        raise ValueError("an owner key has four segments")
    return SourceOwner(tenant, *(None if p == ABSENT else decode_segment(p) for p in parts))


def visible_owner_keys(scope: Scope) -> tuple[str, ...]:
    """Every owner key a run in ``scope`` may see (``SourceOwner.visible_to``): at most 16."""
    choices = [
        (ABSENT, encode_segment(value)) if value is not None else (ABSENT,)
        for value in (scope.user, scope.session, scope.project, scope.repository)
    ]
    return tuple("/".join(combo) for combo in itertools.product(*choices))


def owner_of_source_id(source_id: object) -> SourceOwner | None:
    """The owner a source id names, or ``None`` if no recall store could have made the id.

    Source ids are :func:`document_source_id` and :func:`group_source_id`
    (the core's, shared by every recall store); an id is accepted only if
    building it again from what it decodes to gives the same text.
    """
    if not isinstance(source_id, str):
        return None
    parts = source_id.split("/")
    try:
        if parts[0] == "doc" and len(parts) == 7:
            owner = SourceOwner(
                decode_segment(parts[1]), *(None if p == ABSENT else decode_segment(p) for p in parts[2:6])
            )
            return owner if document_source_id(owner, decode_segment(parts[6])) == source_id else None
        if parts[0] == "group" and len(parts) == 5 and _SEQ.fullmatch(parts[4]):
            key = SessionKey(*(decode_segment(p) for p in parts[1:4]))
            return SourceOwner.of_session(key) if group_source_id(key, int(parts[4])) == source_id else None
    except (ValueError, TypeError):  # bad escapes and invalid ids (InvalidIdError is a ValueError)
        return None
    return None


def stored_seq(value: object) -> int | None:
    """A group's seq as a reply holds it (a sorted-set score), or ``None`` unless a canonical decimal.

    Scores the store writes are integers; ``0.5``, ``inf`` or ``1e+20`` mean
    the group set was changed outside the store.
    """
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
    return int(text) if _SEQ.fullmatch(text) else None


@functools.lru_cache(maxsize=1 << 16)
def encode_term(term: str) -> str:
    """A term as a key segment (:func:`encode_segment`), cached: the same terms recur in every source."""
    return encode_segment(term)


#: How much of a group's edge line goes into a neighbour's context (UTF-8 bytes): the SQLite store's
#: ``CONTEXT_LINE_BYTES``.
CONTEXT_LINE_BYTES: Final = 512


def _cut(line: str) -> str:
    data = line.encode("utf-8")
    if len(data) <= CONTEXT_LINE_BYTES:
        return line
    return data[:CONTEXT_LINE_BYTES].decode("utf-8", "ignore")


def edge_lines(text: str) -> tuple[str, str]:
    """A group's first and last non-blank lines, each cut to :data:`CONTEXT_LINE_BYTES`.

    ``text`` is the group's indexed text
    (:func:`~agentium_harness.plugin_api.indexed_group_text`). The first line
    is context of the group before it, the last of the group after it, as
    in the SQLite store. A line is ``role: content``; a line with nothing
    after the role (an empty reply) is blank, so the next line in is used
    instead. ``""`` when every line is blank.
    """
    lines = [line for line in text.split("\n") if line.partition(": ")[2].strip()]
    if not lines:
        return "", ""
    return _cut(lines[0]), _cut(lines[-1])
