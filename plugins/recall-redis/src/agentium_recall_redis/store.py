"""The Redis recall store: an inverted index per tenant on plain Redis >= 6.2 or Valkey.

:class:`RedisRecallStore` (plugin name ``redis``) declares every recall
capability and implements each one: bounded discovery and reads, revision
and current-view validation, canonical archive reads
(:meth:`~RedisRecallStore.seek_groups`), document indexing and archive
indexing. No search module is needed: the index is built from hashes,
strings and sorted sets (layout in :mod:`agentium_recall_redis.keys`).

Round trips (each is one write of commands and one read of their replies):

- ``discover``: **1** (``EVALSHA`` of the ranking script); **2** right after
  the server lost its script cache (a restart, ``SCRIPT FLUSH``): the
  ``NOSCRIPT`` reply is followed by ``EVAL``, which caches it again.
- ``read``: 1 (``EVALSHA``; ``GETRANGE`` inside); ``validate`` and
  ``validate_current``: 1 (``HMGET``); ``seek_groups``: 1.
- ``index_document`` / ``delete_document``: 1; ``index_groups``: one per 16
  chunks of up to 256 groups.
- The store's first call (its *open*) adds 1: ``INFO``, ``COMMAND INFO``,
  ``CONFIG GET appendonly``/``appendfsync`` and ``SCRIPT LOAD`` pipelined.

Ranking: for each query term the store reads at most
``max(max_candidates, max_ranked_matches / terms)`` of its newest postings in
the buckets the scope may see, and scores a source by the sum over terms of
``tf × ln(1 + N / df)`` (``N`` visible sources, ``df`` visible sources with
the term, both exact counts read in O(1)). Rare terms are ranked in full;
for a very common term only its newest matches are, so discovery cost is
bounded by ``max_ranked_matches``, not by the index size.

Scope: the scope filter is the choice of buckets, applied before any limit,
so a foreign source can neither be returned nor take a place. Reads and
validations decide visibility from the source id alone (ids are injective in
their owner): a foreign id is ``FORBIDDEN`` and never looked up.

Revisions: a document's revision is the digest of the canonical JSON of
``{"title": ..., "text": ...}``, a group's the archive receipt's digest, so a
revision changes exactly when the content does; a delete leaves the
tombstone ``-<revision>``, so validation says ``deleted``.

Runs on asyncio only (``redis.asyncio``); under trio every call raises
:class:`~agentium_recall_redis.errors.RedisRecallError` saying so.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from typing import Any, ClassVar, Final, NoReturn
from urllib.parse import urlsplit

import anyio
import attrs
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import (
    AuthenticationError,
    NoPermissionError,
    NoScriptError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agentium_harness import (
    AgentiumError,
    ArchiveCorruptError,
    InvalidArgumentError,
    OperationCancelledError,
)
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    Candidate,
    Completeness,
    Excerpt,
    MessageGroup,
    OmittedContext,
    OpContext,
    RecallCapabilities,
    RecallLimits,
    RecallSession,
    RecallStore,
    RecordDecodeError,
    Scope,
    SessionKey,
    SourceOwner,
    SourceRef,
    Validation,
    ValidationStatus,
    check_archived_group,
    digest_bytes,
    digest_of,
    document_source_id,
    estimate_tokens,
    from_json,
    group_source_id,
    make_excerpt,
    query_terms,
)

from .config import RedisRecallConfig, redact_url
from .errors import (
    RedisRecallAuthError,
    RedisRecallConnectionError,
    RedisRecallError,
    RedisRecallServerError,
    RedisRecallTimeoutError,
    RedisRecallValueTooLargeError,
)
from .keys import (
    encode_term,
    group_text,
    owner_from_key,
    owner_key,
    owner_of_source_id,
    tenant_prefix,
    term_counts,
    visible_owner_keys,
)
from .link import (
    MIN_VERSION,
    Attempt,
    Command,
    Link,
    Reply,
    ServerReport,
    as_text,
    config_value,
    parse_info,
    version_tuple,
)
from .scripts import (
    DELETE,
    DISCOVER,
    INDEX,
    READ,
    REQUIRED_COMMANDS,
    SCRIPTS,
    SEEK,
    SETTLE,
    TOKEN_TTL_MS,
    Script,
)

__all__ = ["RedisRecallSession", "RedisRecallStore"]

logger = logging.getLogger("agentium_recall_redis")

# index_groups: sources per script call, their argument bytes per call, calls per round trip. A call
# blocks the server while it runs, so chunks stay small; pipelining them keeps bulk indexing fast.
_CHUNK_SOURCES: Final = 256
_CHUNK_BYTES: Final = 1 << 20
_CALLS_PER_TRIP: Final = 16

# What an excerpt of a text read only in part may have left out: anything, since the rest is unread.
_UNREAD: Final = frozenset({OmittedContext.SOURCE, OmittedContext.CORRECTION, OmittedContext.NEGATION})

Arg = str | bytes | int | float


def _require_asyncio(operation: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RedisRecallError(
            f"{operation}: the Redis recall store runs on asyncio only (it uses redis.asyncio); run the host "
            "under asyncio, or use another recall store under trio"
        ) from None


def _utf8(text: object, what: str) -> bytes:
    """``text`` as UTF-8; refuse a non-str or a lone surrogate (nothing is written)."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(text).__name__}; nothing was written")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{what} is not valid Unicode text ({exc}); nothing was written") from exc


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be an int, got {type(value).__name__}")
    return value


def _source_args(
    sid: str,
    revision: str,
    kind: str,
    okey: str,
    title: bytes,
    text: bytes,
    canonical: bytes,
    seq: str,
    digest: str,
    terms: dict[str, int],
) -> list[Arg]:
    """One source's part of the ``INDEX`` script's ARGV (terms encoded for keys)."""
    args: list[Arg] = [sid, revision, kind, okey, title, text, canonical, seq, digest, len(terms)]
    for term, tf in terms.items():
        args.append(encode_term(term))
        args.append(tf)
    return args


def _args_bytes(args: Sequence[Arg]) -> int:
    return sum(len(a) if isinstance(a, bytes | str) else 8 for a in args)


def _unread_rest(excerpt: Excerpt) -> Excerpt:
    """An excerpt of a text read only up to the read cap: never complete, and anything may be left out."""
    completeness = (
        Completeness.PARTIAL if excerpt.completeness is Completeness.COMPLETE else excerpt.completeness
    )
    return attrs.evolve(excerpt, completeness=completeness, omitted=excerpt.omitted | _UNREAD)


class RedisRecallSession(RecallSession):
    """A recall session of :class:`RedisRecallStore`, confined to one scope.

    Holds no connection of its own (calls borrow one from the store's pool
    for one round trip); :meth:`close` marks it closed, after which calls are
    refused. :meth:`read` picks excerpt windows with the terms of this
    session's latest :meth:`discover` query.
    """

    def __init__(self, store: RedisRecallStore, scope: Scope, limits: RecallLimits) -> None:
        self._store = store
        self._scope = scope
        self._limits = limits
        self._prefix = tenant_prefix(store.config.key_prefix, scope.tenant)
        self._owner_keys = visible_owner_keys(scope)
        self._owners: dict[bytes, SourceOwner | None] = {}
        self._terms: tuple[str, ...] = ()
        self._closed = False

    @property
    def scope(self) -> Scope:
        """The scope this session was opened for."""
        return self._scope

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def _begin(self, ctx: OpContext, operation: str) -> None:
        ctx.raise_if_expired(operation)
        if self._closed:
            raise RedisRecallError(f"redis recall store: {operation} refused: the recall session is closed")

    def _owner(self, key: bytes) -> SourceOwner | None:
        """The owner an owner key names (cached per session: a scope sees at most 16)."""
        if key not in self._owners:
            try:
                self._owners[key] = owner_from_key(self._scope.tenant, key.decode("ascii"))
            except (ValueError, UnicodeDecodeError):
                self._owners[key] = None
        return self._owners[key]

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        """Up to ``max_candidates`` visible sources for ``query``, best first, within ``ctx.remaining_bytes``.

        One round trip (see the module docs for the ranking). An empty or
        all-punctuation query finds nothing and makes no call.
        """
        self._begin(ctx, "recall discover")
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        terms = query_terms(query)
        self._terms = terms
        limit = max(0, _count(max_candidates, "max_candidates"))
        if not terms or limit == 0:
            return []
        cap = self._store.config.max_ranked_matches
        per_term = max(limit, -(-cap // len(terms)))
        budget = -1 if ctx.remaining_bytes is None else max(0, ctx.remaining_bytes)
        args: list[Arg] = [self._prefix, limit, per_term, budget, len(terms), len(self._owner_keys)]
        args.extend(encode_term(t) for t in terms)
        args.extend(self._owner_keys)
        rows = await self._store._script(DISCOVER, [f"{self._prefix}:bk"], args, ctx, "recall discover")
        found: list[Candidate] = []
        spent = 0
        for sid, revision, title, size, okey, score in rows or ():
            owner = self._owner(okey)
            if owner is None or not owner.visible_to(
                self._scope
            ):  # the buckets already hold; never trust one check
                continue
            candidate = Candidate(
                SourceRef(sid.decode(), revision.decode()),
                owner,
                float(score),
                int(size),
                title.decode("utf-8", "replace"),
            )
            spent += candidate.discovery_bytes
            if budget >= 0 and spent > budget:
                break
            found.append(candidate)
        return found

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        """One excerpt per visible ref still at its revision, in ref order, within the byte/token budgets.

        One round trip. Each text is fetched with ``GETRANGE`` up to
        ``max_read_bytes``; an excerpt of a longer text is marked partial,
        with source, correction and negation context possibly left out.
        """
        self._begin(ctx, "recall read")
        cap = max(0, _count(max_excerpt_bytes, "max_excerpt_bytes"))
        wanted: list[tuple[SourceRef, SourceOwner]] = []
        for ref in refs:
            owner = owner_of_source_id(getattr(ref, "source_id", None))
            if owner is not None and owner.visible_to(self._scope) and isinstance(ref.revision, str):
                wanted.append((ref, owner))
        if not wanted:
            return []
        args: list[Arg] = [self._prefix, self._store.config.max_read_bytes]
        for ref, _ in wanted:
            args.extend((ref.source_id, ref.revision))
        rows = await self._store._script(READ, [f"{self._prefix}:ids"], args, ctx, "recall read")
        out: list[Excerpt] = []
        spent_bytes = spent_tokens = 0
        for (ref, owner), row in zip(wanted, rows or (), strict=False):
            if row is None:
                continue  # deleted, changed or never indexed: validation reports it
            size, data = int(row[0]), bytes(row[1])
            cut = size > len(data)
            # A cut can split the last character; the stored text itself is valid UTF-8.
            text = data.decode("utf-8", "ignore" if cut else "replace")
            excerpt = make_excerpt(ref, owner, text, self._terms, cap)
            if cut:
                excerpt = _unread_rest(excerpt)
            spent_bytes += len(excerpt.text.encode("utf-8", "surrogatepass"))
            spent_tokens += estimate_tokens(excerpt.text)
            if ctx.remaining_bytes is not None and spent_bytes > ctx.remaining_bytes:
                break
            if ctx.remaining_tokens is not None and spent_tokens > ctx.remaining_tokens:
                break
            out.append(excerpt)
        return out

    async def validate(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """One validation per ref, in order, all read by one ``HMGET`` (one consistent view)."""
        return await self._validate(refs, ctx, "recall validate")

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        """As :meth:`validate`: one bounded ``HMGET`` of the current revisions, one round trip."""
        return await self._validate(refs, ctx, "recall validate_current")

    async def _validate(self, refs: Sequence[SourceRef], ctx: OpContext, operation: str) -> list[Validation]:
        self._begin(ctx, operation)
        out: list[Validation | None] = []
        lookups: list[int] = []
        for i, ref in enumerate(refs):
            owner = owner_of_source_id(getattr(ref, "source_id", None))
            if owner is None:
                out.append(Validation(ref, ValidationStatus.UNKNOWN))
            elif not owner.visible_to(self._scope):
                out.append(Validation(ref, ValidationStatus.FORBIDDEN))
            else:
                out.append(None)
                lookups.append(i)
        if lookups:
            command: list[Arg] = ["HMGET", f"{self._prefix}:rev", *(refs[i].source_id for i in lookups)]
            [reply] = await self._store._call([command], ctx, operation)
            if isinstance(reply, ResponseError):
                self._store._refused(reply, operation)
            for i, value in zip(lookups, reply, strict=True):
                ref = refs[i]
                current = None if value is None else as_text(value)
                if current is None or current.startswith("-"):
                    out[i] = Validation(ref, ValidationStatus.DELETED)
                elif current == ref.revision:
                    out[i] = Validation(ref, ValidationStatus.CURRENT, current)
                else:
                    out[i] = Validation(ref, ValidationStatus.CHANGED, current)
        return [v for v in out if v is not None]

    async def close(self) -> None:
        """Mark the session closed. Always succeeds (also after a cancelled call); idempotent."""
        self._closed = True
        self._terms = ()


def _describe_client(client: Redis) -> str:
    """Where a lent client points, from its pool's settings (never its credentials)."""
    kwargs = getattr(client.connection_pool, "connection_kwargs", {}) or {}
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}"
    return f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)} (lent client)"


class RedisRecallStore(RecallStore):
    """The Redis recall store: scoped, bounded recall over archived groups and host documents.

    Build it with a :class:`~agentium_recall_redis.config.RedisRecallConfig`;
    building does no I/O. Without ``client`` the store creates its own
    ``redis.asyncio`` client from ``config.url`` on first use and closes it
    in :meth:`aclose`. With ``client`` (a ``redis.asyncio.Redis`` the host
    lends) the URL and credential options are ignored and the client is never
    closed by the store. Either way the store uses its own connection
    handling on the client's pool: no command is ever retried by the client.

    The first call connects and checks the server (its *open*): version,
    every command the store needs, Lua scripting, and durability
    (``CONFIG GET appendonly``), which :attr:`server_report` and
    :meth:`health` then show.
    """

    capabilities: ClassVar[RecallCapabilities] = RecallCapabilities(
        bounded_discovery=True,
        bounded_reads=True,
        revision_validation=True,
        bounded_current_validation=True,
        canonical_archive_reads=True,
        document_indexing=True,
        archive_indexing=True,
        health_check=True,
    )
    session_class: ClassVar[type[RecallSession]] = RedisRecallSession

    def __init__(self, config: RedisRecallConfig | None = None, *, client: Redis | None = None) -> None:
        config = config if config is not None else RedisRecallConfig()
        if not isinstance(config, RedisRecallConfig):
            raise InvalidArgumentError(f"config must be a RedisRecallConfig, got {type(config).__name__}")
        if client is not None and not isinstance(client, Redis):
            raise InvalidArgumentError(
                f"client must be a redis.asyncio.Redis, got {type(client).__name__} (cluster and sync "
                "clients are not supported)"
            )
        self._config = config
        self._lent = client
        self._client: Redis | None = client
        self._link: Link | None = None
        self._report: ServerReport | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False
        self._where = redact_url(config.url) if client is None else _describe_client(client)
        self._secrets = self._collect_secrets()

    def _collect_secrets(self) -> tuple[str, ...]:
        found = {self._config.password, self._config.username}
        try:
            parts = urlsplit(self._config.url)
            found.update({parts.password, parts.username})
        except ValueError:
            pass
        if self._lent is not None:
            kwargs = getattr(self._lent.connection_pool, "connection_kwargs", {}) or {}
            found.add(kwargs.get("password"))
        return tuple(s for s in found if isinstance(s, str) and len(s) >= 3)

    def __repr__(self) -> str:
        owned = "lent client" if self._lent is not None else "owned client"
        return f"RedisRecallStore({self._where!r}, key_prefix={self._config.key_prefix!r}, {owned})"

    # -- what the store tells the host -----------------------------------------------------------

    @property
    def config(self) -> RedisRecallConfig:
        """The options this store was built with."""
        return self._config

    @property
    def owns_client(self) -> bool:
        """True when the store created its client from the config (and closes it in :meth:`aclose`)."""
        return self._lent is None

    @property
    def where(self) -> str:
        """The server's location, without credentials."""
        return self._where

    @property
    def server_report(self) -> ServerReport | None:
        """What the server said when the store connected (flavour, version, durability); ``None`` before."""
        return self._report

    @property
    def round_trips(self) -> int:
        """Round trips made so far (each one write of commands, one read of their replies)."""
        return 0 if self._link is None else self._link.round_trips

    async def health(self, ctx: OpContext) -> str:
        """Connect if needed and describe the server and its durability (one round trip once connected).

        For example ``"redis 7.0.15 at redis://127.0.0.1:6379/0; durable
        (appendonly yes, appendfsync always): every acknowledged write is on
        disk"``. Raises the store's connection and server errors.
        """
        ctx.raise_if_expired("recall health")
        await self._ready(ctx, "recall health")
        replies = await self._call(
            [("CONFIG", "GET", "appendonly"), ("CONFIG", "GET", "appendfsync")], ctx, "recall health"
        )
        report = self._report
        assert report is not None
        report = attrs.evolve(
            report,
            appendonly=_config_or_unknown(replies[0], "appendonly"),
            appendfsync=_config_or_unknown(replies[1], "appendfsync"),
        )
        self._report = report
        return report.describe().replace(";", f" at {self._where};", 1)

    # -- the port ----------------------------------------------------------------------------------

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        """A session confined to ``scope``. Connects and checks the server on the store's first call only."""
        ctx.raise_if_expired("recall open")
        if not isinstance(scope, Scope):
            raise InvalidArgumentError(f"scope must be a Scope, got {type(scope).__name__}")
        if not isinstance(limits, RecallLimits):
            raise InvalidArgumentError(f"limits must be RecallLimits, got {type(limits).__name__}")
        await self._ready(ctx, "recall open")
        return RedisRecallSession(self, scope, limits)

    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        """Add or replace document ``doc_id`` of ``owner`` atomically; identical content writes nothing.

        One round trip. Raises ``InvalidArgumentError`` (nothing written) for
        a bad owner or id, non-text, or a text larger than ``max_value_bytes``.
        """
        ctx.raise_if_expired("recall index")
        if not isinstance(owner, SourceOwner):
            raise InvalidArgumentError(f"owner must be a SourceOwner, got {type(owner).__name__}")
        try:
            source_id = document_source_id(owner, doc_id)
        except AgentiumError as exc:  # InvalidIdError: the port promises InvalidArgumentError
            raise InvalidArgumentError(f"{exc}; nothing was written") from exc
        text_bytes, title_bytes = _utf8(text, "text"), _utf8(title, "title")
        self._check_size(len(text_bytes) + len(title_bytes), f"document {doc_id!r}")
        revision = digest_of({"title": title, "text": text})
        terms = term_counts(f"{title}\n{text}")
        args = _source_args(
            source_id, revision, "d", owner_key(owner), title_bytes, text_bytes, b"", "", "", terms
        )
        prefix = tenant_prefix(self._config.key_prefix, owner.tenant)
        await self._write(prefix, [[1, *args]], ctx, "recall index")
        return SourceRef(source_id, revision)

    async def delete_document(self, owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        """Remove document ``doc_id`` of ``owner``, leaving its revision tombstone; True if it was indexed."""
        ctx.raise_if_expired("recall delete")
        if not isinstance(owner, SourceOwner):
            raise InvalidArgumentError(f"owner must be a SourceOwner, got {type(owner).__name__}")
        try:
            source_id = document_source_id(owner, doc_id)
        except AgentiumError as exc:
            raise InvalidArgumentError(f"{exc}; nothing was written") from exc
        prefix = tenant_prefix(self._config.key_prefix, owner.tenant)
        [result] = await self._write(prefix, [[source_id, "d"]], ctx, "recall delete", script=DELETE)
        return result == "1"

    async def index_groups(
        self,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        receipts: Sequence[ArchiveReceipt],
        ctx: OpContext,
    ) -> int:
        """Index archived groups of ``key`` under their receipts' digests; returns how many were new.

        Every group is checked against its receipt before anything is sent.
        Each chunk of up to 256 groups is one atomic script; chunks go 16 to
        a round trip. If a call fails part way, earlier chunks stay indexed
        and indexing again completes the rest (it is idempotent). A group
        indexed earlier with another digest is replaced: the receipts are the
        archive's word.
        """
        ctx.raise_if_expired("recall index")
        sources = self._group_sources(key, groups, receipts)
        if not sources:
            return 0
        calls: list[list[Arg]] = []
        chunk: list[Arg] = []
        count = size = 0
        for args in sources:
            if count and (count >= _CHUNK_SOURCES or size + _args_bytes(args) > _CHUNK_BYTES):
                calls.append([count, *chunk])
                chunk, count, size = [], 0, 0
            chunk.extend(args)
            count += 1
            size += _args_bytes(args)
        calls.append([count, *chunk])
        prefix = tenant_prefix(self._config.key_prefix, key.tenant)
        results = await self._write(prefix, calls, ctx, "recall index")
        return sum(int(r) for r in results)

    def _group_sources(
        self, key: SessionKey, groups: Sequence[MessageGroup], receipts: Sequence[ArchiveReceipt]
    ) -> list[list[Arg]]:
        """Check the batch and build each group's script arguments; any mismatch raises before I/O."""
        if not isinstance(key, SessionKey):
            raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
        if len(groups) != len(receipts):
            raise InvalidArgumentError(
                f"{len(groups)} groups but {len(receipts)} receipts for session {key.key()}; "
                "nothing was written"
            )
        okey = owner_key(SourceOwner.of_session(key))
        seen: dict[int, str] = {}
        out: list[list[Arg]] = []
        for group, receipt in zip(groups, receipts, strict=True):
            if not isinstance(group, MessageGroup) or not isinstance(receipt, ArchiveReceipt):
                raise InvalidArgumentError("index_groups takes MessageGroup and ArchiveReceipt items")
            where = f"group {group.seq} of session {key.key()}"
            digest = group.digest
            if receipt.seq != group.seq or receipt.digest != digest:
                raise InvalidArgumentError(
                    f"{where}: its receipt (seq {receipt.seq}, digest {receipt.digest}) does not match the "
                    f"group (digest {digest}); nothing was written"
                )
            if group.retained is not None and group.retained.scope.session_key != key:
                raise InvalidArgumentError(
                    f"{where} belongs to session {group.retained.scope.session_key.key()} by its retained "
                    "scope; nothing was written"
                )
            if group.seq in seen:
                if seen[group.seq] != digest:
                    raise InvalidArgumentError(
                        f"{where} appears twice with different content; nothing was written"
                    )
                continue  # an identical repeat: index it once (one script must not see a source twice)
            seen[group.seq] = digest
            text = group_text(group)
            canonical = group.canonical_bytes()
            text_bytes = _utf8(text, f"the text of {where}")
            self._check_size(max(len(text_bytes), len(canonical)), where)
            out.append(
                _source_args(
                    group_source_id(key, group.seq),
                    digest,
                    "g",
                    okey,
                    b"",
                    text_bytes,
                    canonical,
                    str(group.seq),
                    receipt.digest,
                    term_counts(text),
                )
            )
        return out

    async def seek_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Up to ``max_groups`` indexed groups of ``key`` with ``seq >= start_seq``, ascending, checked.

        One round trip. Each group is decoded strictly from its stored
        canonical bytes and checked against the receipt digest kept at
        indexing; damage raises ``ArchiveCorruptError``, a stored group larger
        than ``max_value_bytes`` raises
        :class:`~agentium_recall_redis.errors.RedisRecallValueTooLargeError`
        (it is never returned in part).
        """
        ctx.raise_if_expired("recall seek")
        if not isinstance(key, SessionKey):
            raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
        start, limit = _count(start_seq, "start_seq"), max(0, _count(max_groups, "max_groups"))
        if limit == 0:
            return []
        prefix = tenant_prefix(self._config.key_prefix, key.tenant)
        okey = owner_key(SourceOwner.of_session(key))
        cap = self._config.max_value_bytes
        rows = await self._script(
            SEEK, [f"{prefix}:bk"], [prefix, okey, start, limit, cap], ctx, "recall seek"
        )
        out: list[MessageGroup] = []
        for row in rows or ():
            seq, digest, size = int(row[0]), as_text(row[1]), int(row[2])
            if len(row) < 4:
                raise RedisRecallValueTooLargeError(
                    f"indexed group {seq} of session {key.key()} is {size} bytes, more than max_value_bytes "
                    f"({cap}); it was not read. Raise max_value_bytes to read it"
                )
            out.append(self._decode_group(key, seq, digest, bytes(row[3])))
        return out

    def _decode_group(self, key: SessionKey, seq: int, digest: str, data: bytes) -> MessageGroup:
        where = f"indexed group {seq} of session {key.key()} at {self._where}"
        if not digest or digest_bytes(data) != digest:
            raise ArchiveCorruptError(
                f"{where} does not match its receipt digest; the stored value is damaged"
            )
        try:
            group = from_json(data, MessageGroup)
        except RecordDecodeError as exc:
            raise ArchiveCorruptError(f"{where} cannot be decoded: {exc}") from exc
        check_archived_group(key, group, expected_seq=seq, expected_digest=digest)
        return group

    async def aclose(self) -> None:
        """Close the client if the store created it; a lent client is never closed. Idempotent."""
        if self._closed:
            return
        self._closed = True
        client, self._client = self._client, None
        if client is not None and self._lent is None:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    # -- plumbing ----------------------------------------------------------------------------------

    def _check_size(self, size: int, what: str) -> None:
        if size > self._config.max_value_bytes:
            raise InvalidArgumentError(
                f"{what} is {size} bytes, more than max_value_bytes ({self._config.max_value_bytes}); "
                "nothing was written"
            )

    def _make_client(self) -> Redis:
        c = self._config
        kwargs: dict[str, Any] = {
            "socket_connect_timeout": c.connect_timeout_s,
            "socket_timeout": c.socket_timeout_s,
            "max_connections": c.max_connections,
            # The store never lets the client retry: a write is settled, never re-sent.
            "retry": Retry(NoBackoff(), 0),
            "client_name": c.client_name,
        }
        if c.username is not None:
            kwargs["username"] = c.username
        if c.password is not None:
            kwargs["password"] = c.password
        if c.ssl_ca_certs is not None and c.url.startswith("rediss:"):
            kwargs["ssl_ca_certs"] = c.ssl_ca_certs
        try:
            return Redis.from_url(c.url, **kwargs)
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError(
                f"redis recall store: cannot use the url {self._where}: {self._scrub(str(exc))}"
            ) from None

    async def _ready(self, ctx: OpContext, operation: str) -> Link:
        """The store's link, connecting and checking the server first if this is the first call."""
        if self._closed:
            raise RedisRecallError(f"redis recall store: {operation} refused: the store is closed")
        _require_asyncio(operation)
        if self._link is not None and self._report is not None:
            return self._link
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._link is not None and self._report is not None:
                return self._link
            if self._client is None:
                self._client = self._make_client()
            link = self._link if self._link is not None else Link(self._client)
            self._link = link
            commands: list[Command] = [
                ("INFO", "server"),
                ("COMMAND", "INFO", *REQUIRED_COMMANDS),
                ("CONFIG", "GET", "appendonly"),
                ("CONFIG", "GET", "appendfsync"),
                *(("SCRIPT", "LOAD", s.source) for s in SCRIPTS),
            ]
            replies = await self._call(commands, ctx, operation, ready=link)
            self._report = self._check_server(replies)
            logger.info("redis recall store at %s: %s", self._where, self._report.describe())
        return link

    def _check_server(self, replies: list[Reply]) -> ServerReport:
        info_reply, commands_reply, appendonly, appendfsync, *loaded = replies
        if isinstance(info_reply, ResponseError):
            self._refused(info_reply, "recall open")
        info = parse_info(as_text(info_reply))
        flavour = "valkey" if info.get("server_name") == "valkey" or "valkey_version" in info else "redis"
        version = info.get("valkey_version") if flavour == "valkey" else info.get("redis_version")
        compat = info.get("redis_version", "0")
        if version_tuple(compat) < MIN_VERSION:
            raise RedisRecallServerError(
                f"redis recall store: the server at {self._where} is {flavour} {version or compat}; "
                "the store needs Redis >= 6.2 or Valkey"
            )
        if isinstance(commands_reply, list):  # COMMAND itself may be disabled: then scripts tell below
            missing = [
                name for name, entry in zip(REQUIRED_COMMANDS, commands_reply, strict=False) if not entry
            ]
            if missing:
                raise RedisRecallServerError(
                    f"redis recall store: the server at {self._where} lacks the command(s) "
                    f"{', '.join(m.upper() for m in missing)} (missing or disabled with rename-command); the "
                    "store needs them all, with Lua scripting (EVAL/EVALSHA)"
                )
        for script, reply in zip(SCRIPTS, loaded, strict=True):
            if isinstance(reply, ResponseError) or as_text(reply) != script.sha:
                why = self._scrub(str(reply)) if isinstance(reply, ResponseError) else "an unexpected digest"
                raise RedisRecallServerError(
                    f"redis recall store: the server at {self._where} cannot run the store's Lua scripts "
                    f"(SCRIPT LOAD of {script.name!r}: {why}); the store needs Lua scripting (EVAL/EVALSHA)"
                )
        return ServerReport(
            flavour,
            version or compat,
            _config_or_unknown(appendonly, "appendonly"),
            _config_or_unknown(appendfsync, "appendfsync"),
        )

    async def _call(
        self, commands: Sequence[Command], ctx: OpContext, operation: str, *, ready: Link | None = None
    ) -> list[Reply]:
        """One round trip of read-only commands; errors become the store's typed errors."""
        link = ready if ready is not None else await self._ready(ctx, operation)
        ctx.raise_if_expired(operation)
        try:
            return await link.call(commands, deadline=ctx.deadline)
        except TimeoutError:
            raise OperationCancelledError(
                f"{operation} stopped: its deadline passed before the server at {self._where} answered; "
                "nothing was returned",
                "deadline passed",
            ) from None
        except (RedisError, OSError) as exc:
            self._fail(exc, operation)

    async def _script(
        self, script: Script, keys: Sequence[str], args: Sequence[Arg], ctx: OpContext, operation: str
    ) -> Reply:
        """Run a read-only script: ``EVALSHA``, and ``EVAL`` once more if the server lost its script cache."""
        [reply] = await self._call([("EVALSHA", script.sha, len(keys), *keys, *args)], ctx, operation)
        if isinstance(reply, NoScriptError):
            [reply] = await self._call([("EVAL", script.source, len(keys), *keys, *args)], ctx, operation)
        if isinstance(reply, ResponseError):
            self._refused(reply, operation)
        return reply

    async def _write(
        self,
        prefix: str,
        calls: Sequence[Sequence[Arg]],
        ctx: OpContext,
        operation: str,
        *,
        script: Script = INDEX,
    ) -> list[str]:
        """Run writing script calls (each with a fresh token), up to 16 per round trip; their results.

        A round trip that may have reached the server but lost its reply
        (deadline, cancellation, a broken connection) is settled, never
        re-sent: see :meth:`_settle`.
        """
        link = await self._ready(ctx, operation)
        results: list[str] = []
        for start in range(0, len(calls), _CALLS_PER_TRIP):
            batch = calls[start : start + _CALLS_PER_TRIP]
            tokens = [f"{prefix}:w:{secrets.token_hex(16)}" for _ in batch]
            keys = [[f"{prefix}:ids", token] for token in tokens]
            args = [[prefix, TOKEN_TTL_MS, *call] for call in batch]
            commands: list[Command] = [
                ("EVALSHA", script.sha, 2, *k, *a) for k, a in zip(keys, args, strict=True)
            ]
            replies = await self._send_write(link, commands, tokens, ctx, operation, done=len(results))
            # NOSCRIPT means the script never ran: sending it again with its body is safe.
            again = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            if again:
                retry: list[Command] = [("EVAL", script.source, 2, *keys[i], *args[i]) for i in again]
                for i, reply in zip(
                    again,
                    await self._send_write(
                        link, retry, [tokens[i] for i in again], ctx, operation, done=len(results)
                    ),
                    strict=True,
                ):
                    replies[i] = reply
            for reply in replies:
                results.append(self._write_result(reply, operation))
        return results

    def _write_result(self, reply: Reply, operation: str) -> str:
        if isinstance(reply, ResponseError):
            self._refused(reply, operation)
        if isinstance(reply, str):  # settled: the token's value
            return reply.removeprefix("done:")
        status, value = as_text(reply[0]), as_text(reply[1])
        if status == "ok":
            return value
        if value.startswith("done:"):
            return value.removeprefix("done:")
        raise RedisRecallError(f"{operation}: the write was fenced before it ran; nothing was written")

    async def _send_write(
        self,
        link: Link,
        commands: list[Command],
        tokens: list[str],
        ctx: OpContext,
        operation: str,
        *,
        done: int,
    ) -> list[Reply]:
        ctx.raise_if_expired(operation)
        attempt = Attempt()
        try:
            return await link.call(commands, deadline=ctx.deadline, attempt=attempt)
        except BaseException as exc:
            if not attempt.sent:
                if isinstance(exc, TimeoutError):
                    raise OperationCancelledError(
                        f"{operation} refused: its deadline passed before anything was sent; "
                        "nothing was written",
                        "deadline passed",
                    ) from None
                if isinstance(exc, RedisError | OSError):
                    self._fail(exc, operation)
                raise
            outcome = await self._settle(link, tokens)
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise  # cancelled: the write is settled (applied once, or fenced); the caller is gone
            if outcome is not None and all(v.startswith("done:") for v in outcome):
                return list(outcome)  # it ran, exactly once: report it as the success it was
            why = (
                "its deadline passed"
                if isinstance(exc, TimeoutError)
                else self._scrub(f"{type(exc).__name__}: {exc}")
            )
            if outcome is None:
                raise RedisRecallTimeoutError(
                    f"{operation}: the write lost its reply ({why}) and the server at {self._where} could "
                    "not be reached to settle it; its outcome is unknown: validate the source, or index it "
                    "again (indexing is idempotent)",
                    None,
                ) from None
            applied = sum(v.startswith("done:") for v in outcome)
            earlier = f"; {done} earlier chunk(s) of this call were written" if done else ""
            raise RedisRecallTimeoutError(
                f"{operation}: the write lost its reply ({why}); settled by re-reading: {applied} of "
                f"{len(outcome)} script call(s) had run, the rest are fenced and will never run{earlier}. "
                "Index again to complete it (indexing is idempotent)",
                False,
            ) from None

    async def _settle(self, link: Link, tokens: Sequence[str]) -> list[str] | None:
        """Each token's outcome (``done:...`` or ``fenced``), fencing what has not run; ``None``: unreachable.

        Shielded from cancellation and bounded by ``settle_timeout_s``.
        """
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._config.settle_timeout_s):
            try:
                args: tuple[Arg, ...] = (len(tokens), *tokens, TOKEN_TTL_MS)
                [reply] = await link.call([("EVALSHA", SETTLE.sha, *args)], deadline=None)
                if isinstance(reply, NoScriptError):
                    [reply] = await link.call([("EVAL", SETTLE.source, *args)], deadline=None)
                if isinstance(reply, list):
                    return [as_text(v) for v in reply]
            except (RedisError, OSError, TimeoutError):
                return None
        return None

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _fail(self, exc: BaseException, operation: str) -> NoReturn:
        """Raise the store's typed error for a redis-py or socket error (credentials never shown)."""
        where = self._where
        if isinstance(exc, AuthenticationError | NoPermissionError):
            raise RedisRecallAuthError(
                f"{operation}: the server at {where} refused the credentials or this user's permissions "
                "(wrong username or password, a disabled ACL user, or an ACL that forbids a command the "
                "store needs); check the username and password options"
            ) from None
        if isinstance(exc, RedisTimeoutError):
            raise RedisRecallConnectionError(
                f"{operation}: the server at {where} did not answer within socket_timeout_s "
                f"({self._config.socket_timeout_s} s); nothing was returned"
            ) from None
        if isinstance(exc, RedisConnectionError | OSError):
            raise RedisRecallConnectionError(
                f"{operation}: cannot reach the server at {where} ({self._scrub(str(exc))}); check that it "
                "runs and that the url option points at it"
            ) from None
        if isinstance(exc, ResponseError):
            self._refused(exc, operation)
        raise RedisRecallError(f"{operation}: {type(exc).__name__}: {self._scrub(str(exc))}") from None

    def _refused(self, exc: ResponseError, operation: str) -> NoReturn:
        """Raise the store's typed error for an error reply of the server."""
        if isinstance(exc, NoPermissionError):
            self._fail(exc, operation)
        message = self._scrub(str(exc))
        upper = message.upper()
        if "UNKNOWN COMMAND" in upper:
            raise RedisRecallServerError(
                f"{operation}: the server at {self._where} does not know a command the store needs "
                f"({message})"
            )
        if upper.startswith("OOM") or "OOM COMMAND NOT ALLOWED" in upper:
            raise RedisRecallError(
                f"{operation}: the server at {self._where} is out of memory (maxmemory); nothing was written"
            )
        if upper.startswith("READONLY") or "READONLY" in upper:
            raise RedisRecallError(
                f"{operation}: the server at {self._where} is a read-only replica; point url at the primary"
            )
        if "WRONGTYPE" in upper:
            raise RedisRecallError(
                f"{operation}: a key under key_prefix {self._config.key_prefix!r} holds another type: "
                "something else writes there; use a key_prefix of the store's own"
            )
        raise RedisRecallError(f"{operation}: the server at {self._where} refused: {message}")


def _config_or_unknown(reply: Reply, name: str) -> str:
    if isinstance(reply, ResponseError):
        return "unknown"
    value = config_value(reply, name)
    return value if value else "unknown"
