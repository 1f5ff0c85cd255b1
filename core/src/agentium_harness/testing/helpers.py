"""Test helpers for adapter authors: sample records, tricky and colliding ids, reopen and corruption hooks.

Nothing here imports pytest, so a host's own test code (or a script) can use
these without it. The contract suites use the same helpers, so a test written
with them exercises the same records the suites do.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

from .._errors import InvalidArgumentError
from .._history import Message, MessageGroup, RetainedRecord, Role, ToolCall
from .._ports.memory import MemoryScope
from .._ports.recall import SourceOwner
from .._ports.sessions import SessionSnapshot, seal_snapshot
from .._scope import Scope, SessionKey
from .._validators import check_count, require_instance
from ._files import read_in_child

__all__ = [
    "ABSENT_MARKERS",
    "COLLIDING_MEMORY_SCOPES",
    "COLLIDING_SESSION_KEYS",
    "COLLIDING_SOURCE_OWNERS",
    "COLLISION_SEPARATORS",
    "CONTROL_TEXT",
    "HOSTILE_IDS",
    "TRICKY_SESSION_KEYS",
    "CorruptStored",
    "RawStorage",
    "Reopen",
    "legacy_snapshot",
    "plain_group",
    "raw_files",
    "reopen",
    "reopened",
    "replace_once",
    "collision_pairs",
    "control_text_group",
    "rich_group",
    "scoped_snapshot",
]

T = TypeVar("T")

#: What the optional ``reopen_*`` fixtures of the contract suites return: a
#: zero-argument callable giving a *new* adapter instance over the same
#: storage as the main fixture's adapter (sync or async).
Reopen = Callable[[], T | Awaitable[T]]


#: What the optional ``raw_storage`` fixtures of the contract suites return: a
#: zero-argument callable (sync or async) giving every byte the backend holds
#: for the adapter — files, objects (every version), keys and values —
#: concatenated, read straight from the backend. The erasure tests check that
#: erased text is nowhere in it and that a neighbour's still is.
RawStorage = Callable[[], bytes | Awaitable[bytes]]


class CorruptStored(Protocol):
    """What the optional ``corrupt_*`` fixtures of the contract suites return.

    Called as ``corrupt(key, transform)`` (``corrupt(key, seq, transform)`` for
    archived groups): read the stored bytes of that record straight from the
    backend, bypassing the adapter, pass them to ``transform`` and write the
    result back in place, again bypassing the adapter (so no digest or
    revision is updated). May be sync or async. ``transform`` raises
    ``LookupError`` when the stored form does not contain what it looks for;
    let that propagate (the suite then skips, saying why).
    """

    def __call__(self, *args: Any) -> Awaitable[None] | None:
        """Rewrite one stored record's bytes with the transform given as the last argument."""


#: Session keys that break naive key building. Each pair that would collide
#: under joining with ``:`` or ``/``, URL-decoding, case folding, Unicode
#: normalisation or whitespace trimming is present; so are path tricks
#: (``..``, ``/``), glob characters, quotes and non-ASCII text.
TRICKY_SESSION_KEYS: tuple[SessionKey, ...] = (
    SessionKey("a:b", "c", "s"),
    SessionKey("a", "b:c", "s"),
    SessionKey("a/b", "c", "s"),
    SessionKey("a", "b/c", "s"),
    SessionKey("t", "u", "../s"),
    SessionKey("t", "u", ".."),
    SessionKey("t", "u", "/"),
    SessionKey("t", "u", "a/b"),
    SessionKey("t", "u", "a%2Fb"),
    SessionKey("t", "u", "*"),
    SessionKey("t", "u", "?[x]"),
    SessionKey("t", "u", "it's"),
    SessionKey("t", "u", 'say "hi"'),
    SessionKey("t", "u", "S"),
    SessionKey("t", "u", "s"),
    SessionKey("t", "u", "s "),
    SessionKey("t", "u", "caf\u00e9"),
    SessionKey("t", "u", "cafe\u0301"),
    SessionKey("t", "u", "~"),
    SessionKey("t", "u", "back\\slash"),
    SessionKey("テナント", "usér", "セッション🙂"),
    SessionKey("t", "u", "x" * 256),
)


#: Ids that break naive key building, glob patterns and full-text query syntax.
HOSTILE_IDS: tuple[str, ...] = (
    "a/b",
    "a%2Fb",
    "*",
    "?",
    "[a-z]",
    "..",
    "a:b",
    "x\\y",
    '"quoted"',
    "NEAR",
    "OR",
    "-neg",
    "日本",
    "~",
    "a b",
)

#: What naive key builders join ids with (``""`` is plain concatenation,
#: ``%2F`` a URL-decoded ``/``). :func:`collision_pairs` moves one id's tail
#: across a field boundary with each of them.
COLLISION_SEPARATORS: tuple[str, ...] = ("/", ":", "|", "#", ".", "-", "_", " ", "\\", "%2F", "")

#: What naive key builders write for an absent optional id: ``~`` (the
#: encoded form's own marker), ``str(None)``, JSON's ``null`` and a dash.
ABSENT_MARKERS: tuple[str, ...] = ("~", "None", "null", "-")

IdFields = dict[str, str | None]


def _field_names(fields: object, optional: object) -> tuple[str, ...]:
    if isinstance(fields, str) or not isinstance(fields, Sequence):
        raise InvalidArgumentError(f"fields must be a sequence of field names, got {type(fields).__name__}")
    if not all(isinstance(f, str) and f for f in fields) or len(set(fields)) != len(fields):
        raise InvalidArgumentError(f"fields must be distinct non-empty strings, got {list(fields)!r}")
    if isinstance(optional, str) or not isinstance(optional, Collection):
        raise InvalidArgumentError(
            f"optional must be a collection of field names, got {type(optional).__name__}"
        )
    stray = sorted(str(o) for o in optional if o not in fields)
    if stray:
        raise InvalidArgumentError(f"optional names {stray!r}, which fields does not hold")
    return tuple(fields)


def collision_pairs(
    fields: Sequence[str], optional: Collection[str] = ()
) -> tuple[tuple[IdFields, IdFields], ...]:
    """Pairs of id tuples that are different but whose naive keys collide, as ``{field: id or None}``.

    For each boundary between two neighbouring ``fields`` and each of
    :data:`COLLISION_SEPARATORS`, one pair moves an id's tail across the
    boundary (``a/b`` + ``c`` against ``a`` + ``b/c``): joined with that
    separator, the two are the same text. Where the right-hand field is
    ``optional``, a pair also sets it absent on one side (``a/b`` + absent
    against ``a`` + ``b``, equal when a builder skips absent ids), and one
    pair per :data:`ABSENT_MARKERS` entry sets it absent against that marker.
    Every pair gets its own ids (numbered), so the pairs never share an id
    tuple and can all be written to one store. Fields not in play are
    ``f"{field[0]}{n}"`` when required and absent when optional.

    :raises InvalidArgumentError: ``fields`` is a string (its letters were taken as fields), or
        not distinct non-empty strings, or ``optional`` names a field not in ``fields`` (either
        gave fewer pairs or none, so a collision test passed having checked nothing).
    """
    fields = _field_names(fields, optional)
    pairs: list[tuple[IdFields, IdFields]] = []

    def base(n: int) -> IdFields:
        return {f: (None if f in optional else f"{f[0]}{n}") for f in fields}

    for k in range(len(fields) - 1):
        left_field, right_field = fields[k], fields[k + 1]
        for sep in COLLISION_SEPARATORS:
            n = len(pairs)
            one, other = base(n), base(n)
            one.update({left_field: f"a{n}{sep}b", right_field: "c"})
            other.update({left_field: f"a{n}", right_field: f"b{sep}c"})
            pairs.append((one, other))
            if right_field in optional:
                n = len(pairs)
                one, other = base(n), base(n)
                one.update({left_field: f"a{n}{sep}b", right_field: None})
                other.update({left_field: f"a{n}", right_field: "b"})
                pairs.append((one, other))
    for field in fields:
        if field not in optional:
            continue
        for marker in ABSENT_MARKERS:
            n = len(pairs)
            one, other = base(n), base(n)
            one[fields[0]] = other[fields[0]] = f"m{n}"
            one[field], other[field] = None, marker
            pairs.append((one, other))
    return tuple(pairs)


def _built(
    pairs: tuple[tuple[IdFields, IdFields], ...], make: Callable[[IdFields], T]
) -> tuple[tuple[T, T], ...]:
    out: list[tuple[T, T]] = []
    for one, other in pairs:
        try:
            built = (make(one), make(other))
        except InvalidArgumentError:
            continue  # a combination the record itself refuses (a session without its user)
        if built[0] != built[1]:
            out.append(built)
    return tuple(out)


def _owner(ids: IdFields) -> SourceOwner:
    # A session id is unique only within its user: an owner naming a session names its user.
    user = ids["user"] if ids["user"] is not None or ids["session"] is None else "u"
    return SourceOwner(ids["tenant"] or "", user, ids["session"], ids["project"], ids["repository"])


#: Pairs of different session keys whose naive keys collide (tenant/user and user/session boundaries).
COLLIDING_SESSION_KEYS: tuple[tuple[SessionKey, SessionKey], ...] = _built(
    collision_pairs(("tenant", "user", "session")),
    lambda ids: SessionKey(ids["tenant"] or "", ids["user"] or "", ids["session"] or ""),
)

#: Pairs of different memory scopes whose naive keys collide, absent project and repository included.
COLLIDING_MEMORY_SCOPES: tuple[tuple[MemoryScope, MemoryScope], ...] = _built(
    collision_pairs(("tenant", "user", "project", "repository"), ("project", "repository")),
    lambda ids: MemoryScope(ids["tenant"] or "", ids["user"] or "", ids["project"], ids["repository"]),
)

#: Pairs of different recall source owners whose naive keys collide, absent fields included.
COLLIDING_SOURCE_OWNERS: tuple[tuple[SourceOwner, SourceOwner], ...] = _built(
    collision_pairs(
        ("tenant", "user", "session", "project", "repository"), ("user", "session", "project", "repository")
    ),
    _owner,
)


def plain_group(seq: int, text: str = "") -> MessageGroup:
    """A small complete group numbered ``seq``: one user message and one assistant answer.

    ``text`` is appended to both messages, so two calls with different
    ``text`` give groups with different digests at the same ``seq``.
    """
    return MessageGroup(
        seq=seq,
        messages=(
            Message(Role.USER, f"question {seq}{text}"),
            Message(Role.ASSISTANT, f"answer {seq}{text}"),
        ),
    )


def rich_group(seq: int, key: SessionKey, text: str = "") -> MessageGroup:
    """A complete group with a tool call, its result, nested arguments and a retained record of ``key``."""
    key = require_instance(key, SessionKey, "key")  # a str raised AttributeError
    call_id = f"call-{seq}"
    return MessageGroup(
        seq=seq,
        messages=(
            Message(Role.USER, f"find the release notes {seq}{text} — ünïcødé ✓"),
            Message(
                Role.ASSISTANT,
                "",
                tool_calls=(
                    ToolCall(
                        id=call_id,
                        name="search",
                        arguments={
                            "query": f"release notes {text}",
                            "limit": 3,
                            "nested": {"ok": True, "values": [1, 2.5, None, "ü", ["deep"]]},
                            "quote": 'he said "no" and it\'s fine',
                        },
                    ),
                ),
            ),
            Message(Role.TOOL, '{"hits": ["notes.md"]}', tool_call_id=call_id),
            Message(Role.ASSISTANT, f"The notes are in notes.md.{text}"),
        ),
        retained=RetainedRecord(
            scope=Scope(key.tenant, key.user, key.session, "project-1", "repo/α"),
            source_view_revision="view-7",
            summary_policy="extractive",
            summary_version="1",
            uncertainty=("the index may lag the archive", "notes.md was not re-read"),
        ),
    )


#: Free text no store may change: NUL and other C0 controls, DEL, C1, line and paragraph
#: separators, a noncharacter, an astral character, and the *text* of a JSON escape (a store that
#: decodes or re-encodes the JSON on its own would turn it into the character it spells).
CONTROL_TEXT = "a\x00b \x01\x1b[31m\x7f\x85\u2028\u2029\ufffe\U0001f600 \\u0000 \\x00 \x00"


def control_text_group(seq: int, key: SessionKey) -> MessageGroup:
    """A complete group holding :data:`CONTROL_TEXT` in every free-text place a message has.

    In the content of each message, a tool call's argument values and keys,
    and a payload's strings: free text may hold any valid Unicode, NUL and
    other control characters included (ids may not), so every store must give
    it back exactly; canonical JSON writes a NUL as a six-character escape,
    which PostgreSQL ``bytea`` and SQLite ``BLOB`` columns, objects and keys
    hold as they are.
    """
    key = require_instance(key, SessionKey, "key")
    call_id = f"call-{seq}"
    return MessageGroup(
        seq=seq,
        messages=(
            Message(
                Role.USER,
                CONTROL_TEXT,
                payload={"text": CONTROL_TEXT, CONTROL_TEXT: [CONTROL_TEXT]},
                payload_format="test.control_text/v1",
            ),
            Message(
                Role.ASSISTANT,
                CONTROL_TEXT,
                tool_calls=(
                    ToolCall(id=call_id, name="search", arguments={"q": CONTROL_TEXT, CONTROL_TEXT: 1}),
                ),
            ),
            Message(Role.TOOL, CONTROL_TEXT, tool_call_id=call_id),
            Message(Role.ASSISTANT, f"done {seq}{CONTROL_TEXT}"),
        ),
        retained=RetainedRecord(scope=Scope(key.tenant, key.user, key.session)),
    )


# The most resident groups scoped_snapshot builds: a test snapshot, not a load test.
_MAX_SNAPSHOT_GROUPS = 10_000


def scoped_snapshot(key: SessionKey, marker: str = "", groups: int = 2) -> SessionSnapshot:
    """A sealed, scoped snapshot of ``key`` with ``groups`` resident groups (rich and plain alternating).

    Sealed (:func:`~agentium_harness._ports.sessions.seal_snapshot`) like every
    snapshot the engine saves, so it loads back equal from a store that
    verifies digests. A ``key`` that is not a ``SessionKey`` or ``groups`` that is not an
    ``int`` from 0 is :class:`InvalidArgumentError` (-1 or ``True`` made a snapshot all the same).
    """
    key = require_instance(key, SessionKey, "key")
    groups = check_count(groups, "groups", minimum=0, ceiling=_MAX_SNAPSHOT_GROUPS)
    boundary = 5
    resident = tuple(
        rich_group(boundary + i, key, marker) if i % 2 == 0 else plain_group(boundary + i, marker)
        for i in range(groups)
    )
    return seal_snapshot(
        SessionSnapshot(
            memory_scope=Scope(key.tenant, key.user, key.session, "project-1", None),
            boundary=boundary,
            next_seq=boundary + groups,
            resident=resident,
        )
    )


def legacy_snapshot(marker: str = "") -> SessionSnapshot:
    """A format-1 snapshot without a memory scope or digest (what legacy stores hold)."""
    return SessionSnapshot(
        memory_scope=None, boundary=0, next_seq=1, resident=(plain_group(0, marker),), format_version=1
    )


async def reopen(factory: Reopen[T]) -> T:
    """Call a ``reopen_*`` callable, awaiting its result if it is async."""
    result = factory()
    if inspect.isawaitable(result):
        return await result
    return result


@asynccontextmanager
async def reopened(factory: Reopen[T]) -> AsyncIterator[T]:
    """A new adapter over the same storage for the ``async with`` block, closed at its exit.

    Use as ``async with reopened(reopen_archive) as second: ...``.
    """
    adapter = await reopen(factory)
    try:
        yield adapter
    finally:
        aclose = getattr(adapter, "aclose", None)
        if aclose is not None:
            await aclose()


def replace_once(old: bytes, new: bytes) -> Callable[[bytes], bytes]:
    """A transform for ``corrupt_*`` hooks: replace the first ``old`` in the stored bytes with ``new``.

    Raises ``LookupError`` when ``old`` is not in the bytes (the stored form
    is compressed or encrypted, say), so a suite can skip instead of passing
    a test that corrupted nothing. ``old`` or ``new`` that is not ``bytes``
    (a ``str``, say), or an empty ``old`` (found everywhere, it would corrupt
    nothing it names), is :class:`InvalidArgumentError` at once (a ``str``
    raised a bare ``TypeError`` when the transform ran).
    """
    old = require_instance(old, bytes, "old")
    new = require_instance(new, bytes, "new")
    if not old:
        raise InvalidArgumentError("old must not be empty: it would match at every position")

    def transform(data: bytes) -> bytes:
        if old not in data:
            raise LookupError(f"{old!r} is not in the stored bytes")
        return data.replace(old, new, 1)

    return transform


def raw_files(*paths: str) -> RawStorage:
    """A ``raw_storage`` hook reading ``paths`` as they are on disk, concatenated (missing files read empty).

    For a SQLite-backed adapter pass the database file and its ``-wal`` and
    ``-journal`` companions: erased bytes must be in none of them. The built-in
    SQLite archive and session store keep a group deflated when that is smaller:
    pass what this reads through :func:`~agentium_harness.testing.sqlite_rows.with_inflated_rows`
    so the text of those rows is searched as well. The files are read by a child process
    (as :func:`~agentium_harness.testing.sqlite_rows.database_bytes` reads them), so the hook may
    run while this process holds SQLite connections on them: closing a descriptor of a file here
    would drop every POSIX lock this process holds on it, a store's write lock included.
    """
    names = tuple(map(os.fspath, paths))  # a Path reads as before

    def read() -> bytes:
        return read_in_child(names)

    return read
