"""The Redis recall store: an inverted index per tenant on plain Redis >= 6.2 or Valkey.

:class:`RedisRecallStore` (plugin name ``redis``) declares every recall
capability but erasure and implements each one: bounded discovery and
reads, revision and current-view validation, canonical archive reads
(:meth:`~RedisRecallStore.seek_groups`), document indexing, archive
indexing, health checks, and vectors with hybrid discovery
(:meth:`~RedisRecallStore.index_vectors`,
:meth:`~agentium_recall_redis.session.RedisRecallSession.discover_hybrid`).
No search or vector module is needed: the index is built from hashes,
strings and sorted sets (layout in :mod:`agentium_recall_redis.keys`).

Round trips (each is one write of commands and one read of their replies):

- ``discover``: **1** (``EVALSHA`` of the ranking script); **2** right after
  the server lost its script cache (a restart, ``SCRIPT FLUSH``): the
  ``NOSCRIPT`` reply is followed by ``EVAL``, which caches it again.
  ``discover_hybrid``: 1 too, and one more only when a winner's title is
  longer than 1 KiB; ``index_vectors``: one per 16 calls of up to 256
  vectors.
- ``read``: 1 (``EVALSHA``; ``GETRANGE`` inside); ``validate`` and
  ``validate_current``: 1 (``EVALSHA``; ``HSTRLEN``, ``HGET`` inside); ``seek_groups``: 1.
- ``index_document`` / ``delete_document``: 1; ``index_groups``: one per 16
  chunks of up to 256 groups and ``max_terms_per_call`` words. A source with
  more words than one call takes is staged over several calls and
  published by one (:mod:`agentium_recall_redis.write_scripts`).
- The store's first call (its *open*) adds 1: ``INFO``, ``COMMAND INFO``,
  ``CONFIG GET appendonly``/``appendfsync`` and ``SCRIPT LOAD`` pipelined.

Ranking: words are folded and Porter-stemmed as in the SQLite store
(:mod:`agentium_recall_redis.terms`), and stop words are dropped from
queries. For each query term the store reads at most
``max(max_candidates, max_ranked_matches / terms)`` of its newest postings in
the buckets the scope may see, and scores a source by the sum over terms of
``idf × tf × (k1 + 1) / (tf + k1)`` (bm25's saturation, ``k1 = 1.2``, no
length norm; ``idf = ln(1 + (N - n + 0.5) / (n + 0.5))`` over ``N`` visible
sources, ``n`` of them with the term, both exact counts read in O(1)). A
source whose matched terms hold less than ``min_relevance`` of the query's
weight (the sum of its terms' idf) is not returned at all: the relevance
floor, applied before the limit. Rare terms are ranked in full; for a very
common term only its newest matches are, so discovery cost is bounded by
``max_ranked_matches``, not by the index size.

Scope: the scope filter is the choice of buckets, applied before any limit,
so a foreign source can neither be returned nor take a place. Reads and
validations decide visibility from the source id alone (ids are injective in
their owner): a foreign id is ``FORBIDDEN`` and never looked up.

Revisions: a document's revision is the digest of the canonical JSON of
``{"title": ..., "text": ...}``, a group's the archive receipt's digest, so a
revision changes exactly when the content does; a delete leaves the
tombstone ``-<revision>``, so validation says ``deleted``.

The session lives in :mod:`agentium_recall_redis.session`, the server
checks and error mapping in :mod:`agentium_recall_redis.server`, the checked
index arguments in :mod:`agentium_recall_redis.sources` and the settled
writes in :mod:`agentium_recall_redis.writes`.

Runs on asyncio only (``redis.asyncio``); under trio every call raises
:class:`~agentium_recall_redis.errors.RedisRecallError` saying so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, ClassVar, Final

import anyio
import attrs

from agentium_harness import (
    AgentiumError,
    EmbeddingModelMismatchError,
    InvalidArgumentError,
    OperationCancelledError,
)
from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    ArchiveReceipt,
    CloseOnce,
    EraseReport,
    EraseTarget,
    MessageGroup,
    OpContext,
    PerLoop,
    RecallCapabilities,
    RecallLimits,
    RecallSession,
    RecallStore,
    Scope,
    SessionKey,
    SourceOwner,
    SourceRef,
    SourceVector,
    Vector,
    check_max_items,
    check_target,
    digest_of,
    document_source_id,
)

from .config import RedisRecallConfig, redact_url
from .erase import EraseOps, erase_target
from .errors import RedisRecallError
from .keys import owner_key, owner_of_source_id, tenant_prefix
from .link import CHECK_COMMANDS, Command, Link, Reply, ServerReport
from .scripts import DELETE, MISSING, SEEK, VECTORS, Script
from .server import (
    OPEN_COMMANDS,
    Arg,
    ServerErrors,
    check_server,
    collect_secrets,
    describe_client,
    make_client,
    recheck,
    require_asyncio,
)
from .server_events import note_server_change
from .session import MAX_UNINDEXED, RedisRecallSession, StoreReads, check_count, seek_rows
from .sources import check_size, group_sources, make_source, utf8, vector_calls
from .terms import index_terms
from .writes import Call, Writer

if TYPE_CHECKING:
    # redis is imported where a client is made or its errors are told apart, not when the plugin
    # loads: listing plugins (``agentium plugins``) must not pay for it.
    from redis.asyncio import Redis

__all__ = ["RedisRecallSession", "RedisRecallStore"]

logger = logging.getLogger("agentium.plugins.recall_redis")

#: How long :meth:`RedisRecallStore.aclose` waits for each loop's client to close.
_CLOSE_S: Final = 10.0


@attrs.define(slots=True, eq=False)
class _LoopConnection:
    """One event loop's client, link and open lock; ``open`` once the server was checked from it."""

    client: Redis
    link: Link
    lock: asyncio.Lock
    open: bool = False


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
        vector_indexing=True,
        hybrid_discovery=True,
        erasure=True,
    )
    session_class: ClassVar[type[RecallSession]] = RedisRecallSession

    def __init__(self, config: RedisRecallConfig | None = None, *, client: Redis | None = None) -> None:
        from redis.asyncio import Redis

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
        # One connection (client, link, open lock) per event loop: a redis.asyncio client's
        # connections are streams of the loop that opened them, and one store serves threads
        # that each run their own loop (and successive asyncio.run calls). A lent client is the
        # host's, used from its own loop; each loop still gets its own link and lock over it.
        self._loops: PerLoop[_LoopConnection] = PerLoop(self._connection, discard=self._discard)
        # Round trips of links whose loop has finished (round_trips counts them too).
        self._ended_trips = 0
        self._report: ServerReport | None = None
        # aclose() from any task, thread or loop: one closes, the others wait for its end (a second
        # past its bound: settling, 1 s for the cancelled settlements, _CLOSE_S) and hear its outcome.
        self._closing = CloseOnce(
            "redis recall store", wait_s=config.settle_timeout_s + 1.0 + _CLOSE_S + 1.0, logger=logger
        )
        self._where = redact_url(config.url) if client is None else describe_client(client)
        self._errors = ServerErrors(
            self._where, collect_secrets(config, client), config.socket_timeout_s, config.key_prefix
        )
        self._writer = Writer(self._errors, config.settle_timeout_s, config.max_terms_per_call)
        self._erase_ops = EraseOps(config, self._ready, self._call, self._script, self._errors, self._writer)

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
        return self._ended_trips + sum(conn.link.round_trips for _loop, conn in self._loops.items())

    async def health(self, ctx: OpContext) -> str:
        """Connect if needed and describe the server and its durability (one round trip once connected).

        For example ``"redis 7.0.15 at redis://127.0.0.1:6379/0; durable
        (appendonly yes, appendfsync always): every acknowledged write is on
        disk"``. Raises the store's connection and server errors.
        """
        ctx.raise_if_expired("recall health")
        link = await self._ready(ctx, "recall health")
        replies = await self._call(CHECK_COMMANDS, ctx, "recall health", ready=link, checked=True)
        self._note_check(replies)
        report = self._report
        assert report is not None
        return report.describe().replace(";", f" at {self._where};", 1)

    def _note_check(self, replies: list[Reply]) -> None:
        """Bring :attr:`server_report` up to date (a (re)connected connection's check, or ``health()``)."""
        before = self._report
        if before is None:
            return
        after = recheck(before, replies)
        self._report = after
        note_server_change(self._where, before, after)

    # -- the port ----------------------------------------------------------------------------------

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        """A session confined to ``scope``. Connects and checks the server on the store's first call only."""
        ctx.raise_if_expired("recall open")
        if not isinstance(scope, Scope):
            raise InvalidArgumentError(f"scope must be a Scope, got {type(scope).__name__}")
        if not isinstance(limits, RecallLimits):
            raise InvalidArgumentError(f"limits must be RecallLimits, got {type(limits).__name__}")
        await self._ready(ctx, "recall open")
        return RedisRecallSession(self, scope, limits, StoreReads(self._call, self._script, self._errors))

    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        """Add or replace document ``doc_id`` of ``owner`` atomically; identical content writes nothing.

        One round trip, or, for more distinct words than
        ``max_terms_per_call``, a staged write published by one call (readers
        see the old version or the new one, whole). Raises
        ``InvalidArgumentError`` (nothing written) for a bad owner or id,
        non-text, a text larger than ``max_value_bytes`` or more distinct
        words than ``max_terms_per_source``.
        """
        ctx.raise_if_expired("recall index")
        if not isinstance(owner, SourceOwner):
            raise InvalidArgumentError(f"owner must be a SourceOwner, got {type(owner).__name__}")
        try:
            source_id = document_source_id(owner, doc_id)
        except AgentiumError as exc:  # InvalidIdError: the port promises InvalidArgumentError
            raise InvalidArgumentError(f"{exc}; nothing was written") from exc
        text_bytes, title_bytes = utf8(text, "text"), utf8(title, "title")
        what = "the document"  # not its id: ids are content (errors reach logs whatever the capture)
        check_size(len(text_bytes) + len(title_bytes), what, self._config.max_value_bytes)
        revision = digest_of({"title": title, "text": text})
        # Title words count twice, as in the SQLite store's ranking.
        terms = index_terms(text, index_terms(title, weight=2))
        source = make_source(
            source_id,
            revision,
            "d",
            owner_key(owner),
            title_bytes,
            text_bytes,
            b"",
            "",
            "",
            terms,
            self._config.max_terms_per_source,
            what,
        )
        prefix = tenant_prefix(self._config.key_prefix, owner.tenant)
        link = await self._ready(ctx, "recall index")
        await self._writer.index(link, prefix, [source], ctx, "recall index")
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
        link = await self._ready(ctx, "recall delete")
        call: Call = (DELETE, [source_id, "d", self._config.max_terms_per_call, owner_key(owner)])
        owners = frozenset({owner_key(owner)})
        written = await self._writer.write(link, prefix, [call], ctx, "recall delete", owners=owners)
        self._writer.collect_later(link, prefix, written.backlog)
        return written.results == ["1"]

    async def index_groups(
        self,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        receipts: Sequence[ArchiveReceipt],
        ctx: OpContext,
    ) -> int:
        """Index archived groups of ``key`` under their receipts' digests; returns how many were new.

        Every group is checked against its receipt (and the size and word
        limits) before anything is sent. Each chunk of up to 256 groups and
        ``max_terms_per_call`` words is one atomic script; chunks go 16 to a
        round trip, and a group with more words is staged on its own. If a
        call fails part way, earlier chunks stay indexed and indexing again
        completes the rest (it is idempotent). A group
        indexed earlier with another digest is replaced: the receipts are the
        archive's word.
        """
        ctx.raise_if_expired("recall index")
        config = self._config
        sources = group_sources(key, groups, receipts, config.max_value_bytes, config.max_terms_per_source)
        if not sources:
            return 0
        prefix = tenant_prefix(config.key_prefix, key.tenant)
        link = await self._ready(ctx, "recall index")
        return await self._writer.index(link, prefix, sources, ctx, "recall index")

    async def index_vectors(self, vectors: Sequence[SourceVector], ctx: OpContext) -> int:
        """Store each source's vector beside its row; how many were stored (a stale one is skipped).

        A vector is stored only if its source's current row is at the vector's revision, and replaces the
        row's previous vector; a source that changes or is deleted loses its vector in the script that
        removes its row. A tenant holds vectors of one model: a batch that mixes models, or is of another
        model than the tenant's stored vectors, raises ``EmbeddingModelMismatchError`` and writes nothing.
        Calls carry at most 256 vectors and 1 MiB each, 16 calls per round trip; a batch naming several
        tenants is all or nothing per tenant. A cut-off write's settlement names its sources' owners: an
        erasure of other owners does not wait for it.
        """
        ctx.raise_if_expired("recall index")
        entries = list(vectors)
        for entry in entries:
            if not isinstance(entry, SourceVector) or not isinstance(entry.vector, Vector):
                raise InvalidArgumentError("index_vectors takes SourceVector items; nothing was written")
        models = {entry.vector.model for entry in entries}
        if len(models) > 1:
            raise EmbeddingModelMismatchError(
                f"index_vectors was given vectors of {len(models)} models "
                f"({', '.join(sorted(m.key() for m in models))}); one batch, one model; nothing was written"
            )
        if not entries:
            return 0
        model = entries[0].vector.model.key()
        by_tenant: dict[str, dict[str, SourceVector]] = {}
        for entry in entries:
            owner = owner_of_source_id(entry.ref.source_id)
            if owner is not None:  # an id no recall store makes is never indexed: nothing to attach to
                by_tenant.setdefault(owner.tenant, {})[entry.ref.source_id] = entry  # the last one wins
        link = await self._ready(ctx, "recall index")
        stored = 0
        for tenant, found in by_tenant.items():
            prefix = tenant_prefix(self._config.key_prefix, tenant)
            calls: list[Call] = [(VECTORS, [model, count, *args]) for count, args in vector_calls(found)]
            owners = frozenset(owner_key(o) for sid in found if (o := owner_of_source_id(sid)) is not None)
            written = await self._writer.write(link, prefix, calls, ctx, "recall index", owners=owners)
            stored += sum(int(r) for r in written.results)
        return stored

    async def unindexed_groups(
        self, key: SessionKey, end_seq: int, max_groups: int, ctx: OpContext, *, start_seq: int = 0
    ) -> Sequence[int]:
        """Seqs from ``start_seq`` below ``end_seq`` with no indexed group of ``key``: ascending, bounded.

        One round trip, bounded whatever the index holds: a binary search
        (``ZCOUNT``) finds the first missing seq, and one range read over the
        next ``4 × max_groups`` seqs finds the rest. The engine calls it after
        each ``index_groups`` to catch up groups archived while the server was
        down or lost by a restart without persistence.
        """
        ctx.raise_if_expired("recall index")
        if not isinstance(key, SessionKey):
            raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
        # The script holds the server while it scans 4 x limit seqs: a huge max_groups would hang it.
        end, limit = (
            check_count(end_seq, "end_seq"),
            min(MAX_UNINDEXED, max(0, check_count(max_groups, "max_groups"))),
        )
        start = max(0, check_count(start_seq, "start_seq"))
        if end <= start or limit == 0:
            return []
        prefix = tenant_prefix(self._config.key_prefix, key.tenant)
        okey = owner_key(SourceOwner.of_session(key))
        rows = await self._script(
            MISSING, [f"{prefix}:bk"], [prefix, okey, end, limit, 4 * limit, start], ctx, "recall index"
        )
        return [int(seq) for seq in rows or ()]

    async def seek_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Up to ``max_groups`` indexed groups of ``key`` with ``seq >= start_seq``, ascending, checked.

        One round trip. Each group is decoded strictly from its stored
        canonical bytes and checked against the receipt digest kept at
        indexing (a group-set member naming another owner's row is damage
        too); damage raises ``ArchiveCorruptError``, a stored group larger
        than ``max_value_bytes`` raises
        :class:`~agentium_recall_redis.errors.RedisRecallValueTooLargeError`
        (it is never returned in part).
        """
        ctx.raise_if_expired("recall seek")
        if not isinstance(key, SessionKey):
            raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
        start, limit = check_count(start_seq, "start_seq"), max(0, check_count(max_groups, "max_groups"))
        if limit == 0:
            return []
        prefix = tenant_prefix(self._config.key_prefix, key.tenant)
        okey = owner_key(SourceOwner.of_session(key))
        cap = self._config.max_value_bytes
        rows = await self._script(
            SEEK, [f"{prefix}:bk"], [prefix, okey, start, limit, cap], ctx, "recall seek"
        )
        return seek_rows(key, rows, cap, self._where)

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Remove up to ``max_items`` sources of ``target`` with every key they hold (docs/erasure.md).

        Rows, texts, canonical bytes, every posting, revisions and empty
        buckets go at once (:mod:`agentium_recall_redis.erase`); only the
        target's tenant is read, never with ``KEYS`` or ``SCAN``, and a row
        a damaged index no longer leads to is found by a sweep of the
        tenant's rows by number (:mod:`agentium_recall_redis.erase_sweep`),
        erased, and reported as damage. The report
        says ``unreferenced``: persistence files and replicas written before
        are beyond the store.
        """
        ctx.raise_if_expired("recall erase")
        check_target(target)
        bound = check_max_items(max_items)
        return await erase_target(self._erase_ops, target, ctx, dry_run=dry_run, max_items=bound)

    async def aclose(self) -> None:
        """Close the clients the store created, each on its own event loop; a lent client is never closed.

        Idempotent: a later call (any task, thread or loop) waits for the first's
        close to end, within the close's own bound, and every caller hears the same
        outcome (``plugin_api.CloseOnce``): the first's :class:`RedisRecallError` naming
        what did not close is raised to later callers too, and to the next caller when
        the first was cancelled natively (the close goes on; a WARNING says it failed).
        Writes cut off earlier may still be settling, on any loop: they get
        ``settle_timeout_s`` at most. Safe under trio too (the store refuses its other calls there).
        """
        await self._closing.run(self._close_all)

    async def _close_all(self) -> None:
        settlements = self._writer.settlements
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            # Trio (every other call is refused there): the settlements are asyncio tasks of the loops
            # the store served, awaited from an asyncio loop of a worker thread (they are watched and
            # cancelled thread-safe on their own loops); asyncio.get_running_loop() failed here.
            drain = partial(asyncio.run, settlements.drain(self._config.settle_timeout_s))
            await anyio.to_thread.run_sync(drain)
        else:
            await settlements.drain(self._config.settle_timeout_s)
        problems = await self._loops.aclose(self._close_connection, _CLOSE_S)
        if problems:
            raise RedisRecallError(f"redis recall store at {self._where}: closing: " + "; ".join(problems))

    def _connection(self) -> _LoopConnection:
        """The running loop's connection: the lent client, or a client of its own for this loop."""
        if self._closing.claimed:  # checked again under PerLoop's lock, which aclose() collects under
            raise RedisRecallError("redis recall store: refused: the store is closed")
        client = self._lent if self._lent is not None else make_client(self._config, self._errors)
        return _LoopConnection(client, Link(client, owned=self._lent is None), asyncio.Lock())

    async def _close_connection(self, conn: _LoopConnection) -> None:
        conn.link.closed = True  # a read the close cuts off is not sent again on a new connection
        if self._lent is None:
            with anyio.CancelScope(shield=True):
                await conn.client.aclose()

    def _discard(self, conn: _LoopConnection) -> None:
        """A connection whose loop has finished: its sockets went with the loop; keep its count."""
        self._ended_trips += conn.link.round_trips

    async def _ready(self, ctx: OpContext, operation: str) -> Link:
        """The running loop's link, connecting and checking the server on that loop's first call."""
        if self._closing.claimed:
            raise RedisRecallError(f"redis recall store: {operation} refused: the store is closed")
        require_asyncio(operation)
        conn = self._loops.get()
        if conn.open:
            return conn.link
        async with conn.lock:
            if conn.open:
                return conn.link
            replies = await self._call(OPEN_COMMANDS, ctx, operation, ready=conn.link, checked=True)
            report = check_server(replies, self._errors)
            before = self._report
            first = before is None
            # Another loop opened first: what this check read updates its report (a new run_id is a
            # restart), as a reconnected connection's check does.
            self._report = report if before is None else recheck(before, [replies[0], *replies[2:4]])
            # From now on every connection that (re)connects re-reads the server's identity and
            # persistence on its first round trip: a restart is noticed on the next call.
            conn.link.on_check = self._note_check
            conn.open = True
            if first:
                logger.info("redis recall store at %s: %s", self._where, report.describe())
        return conn.link

    async def _call(
        self,
        commands: Sequence[Command],
        ctx: OpContext,
        operation: str,
        *,
        ready: Link | None = None,
        checked: bool = False,
    ) -> list[Reply]:
        """One round trip of read-only commands; errors become the store's typed errors."""
        from redis.exceptions import RedisError

        link = ready if ready is not None else await self._ready(ctx, operation)
        ctx.raise_if_expired(operation)
        try:
            return await link.call(commands, deadline=ctx.deadline, checked=checked)
        except TimeoutError:
            raise OperationCancelledError(
                f"{operation} stopped: its deadline passed before the server at {self._where} answered; "
                "nothing was returned",
                "deadline passed",
            ) from None
        except (RedisError, OSError) as exc:
            self._errors.fail(exc, operation)

    async def _script(
        self, script: Script, keys: Sequence[str], args: Sequence[Arg], ctx: OpContext, operation: str
    ) -> Reply:
        """Run a read-only script: ``EVALSHA``, and ``EVAL`` once more if the server lost its script cache."""
        from redis.exceptions import NoScriptError, ResponseError

        [reply] = await self._call([("EVALSHA", script.sha, len(keys), *keys, *args)], ctx, operation)
        if isinstance(reply, NoScriptError):
            [reply] = await self._call([("EVAL", script.source, len(keys), *keys, *args)], ctx, operation)
        if isinstance(reply, ResponseError):
            self._errors.refused(reply, operation)
        return reply
