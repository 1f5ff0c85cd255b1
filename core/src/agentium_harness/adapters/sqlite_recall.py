"""The embedded SQLite recall store: an FTS5 index over archived groups and host documents.

:class:`SQLiteRecallStore` is the built-in recall store (plugin name
``sqlite``). It declares every recall capability and implements each one:
bounded discovery, bounded reads, revision and current-view validation,
canonical archive reads (:meth:`~SQLiteRecallStore.seek_groups`), document
indexing and archive indexing.

Storage: the tables are prefixed ``recall_`` (``recall_meta``,
``recall_sources``, ``recall_texts``, the FTS5 table ``recall_fts``), so by
default the store shares ``agentium.db`` with the SQLite archive and session
store. A source row holds its owner (tenant, user, session, project,
repository; NULL when absent), source id, kind, revision, title and size;
groups also keep their ``seq`` and the archive receipt's digest. The text
(and a group's canonical bytes) is in ``recall_texts``, same id.
Connections, WAL mode, worker threads, the busy timeout and closing work as
in :mod:`agentium_harness.adapters.sqlite` (the same base class).

Scope: discovery ranks in one SQL statement with the scope filter inside it,
before any LIMIT, so a foreign source can neither be returned nor take a
place (the term-frequency probes before it return counts, not sources).
Reads and validations decide visibility from the source id alone (source ids
are injective in their owner), so a foreign id is ``FORBIDDEN`` whether or
not it exists. Queries become quoted FTS5 strings, one per term, built only
from :func:`~agentium_harness.adapters._excerpts.content_terms` (stop words
dropped, per the ``stopwords`` option) and bound as parameters, so FTS5
syntax in a query is matched as words. Identifiers are always bound as
parameters.

Relevance (schema version 2): words are stemmed (FTS5's ``porter``
tokenizer), each archived group is indexed with its neighbours' edge lines
as a half-weight ``context`` column (see
:mod:`agentium_harness.adapters._sqlite_recall_sql`), and a source is only
returned if the terms it matches hold at least ``min_relevance`` of the
query's weight (each term weighs its smoothed idf): the relevance floor,
inside the ranking statement and before its LIMIT. A version-1 file is
migrated in place, in one transaction, when first opened.

Ranking and scale (the trade-off): FTS5's bm25 costs time linear in the
number of matches, twice over: it scores every match, and it counts every
match of each phrase to find its idf. Plain bm25 ordering of a common word in
most of 100,000 groups takes about 250 ms, against well under 1 ms at 1,000.
So discovery (a) probes each term's frequency by reading at most
``max_ranked_matches`` of its newest matches; (b) for each term takes at most
``max_ranked_matches / terms`` of its newest *visible* matches (rowid order,
where FTS5 stops early; the scope filter is applied inside, before the
limit); (c) scores a rare term (fewer matches than the probe) with its real
bm25 contribution, and a common one with a constant: bm25's contribution of
one occurrence, from an idf estimated by how densely its newest matches fill
the rowid range; (d) sums the contributions per source, since bm25 is a sum
over phrases, and keeps the best. When no term is common the ranking is
exactly bm25 over all matches. When one is, older sources matched *only*
through it are not ranked, and its part of a score ignores term frequency
and length; rare terms, the ones that find evidence, are always ranked in
full. Discovery latency is then bounded by ``max_ranked_matches``, not by the
index size: ``benchmarks/recall.py`` measures 100k ÷ 1k at about 2
(target <= 3). Text and canonical bytes live in their own table
(``recall_texts``), so ranking reads only narrow rows.

Revisions: a document's revision is the digest of the canonical JSON of
``{"title": ..., "text": ...}``, a group's the archive receipt's digest, so a
revision changes exactly when the content does. Re-indexing identical content
writes nothing; a changed document gets a new row (and counts as newest).

Cancellation: every call checks its context before it starts, again in its
worker thread and between steps; a progress handler aborts a running
statement once the signal is cancelled, the deadline passes or the calling
task is cancelled, and the transaction is rolled back, so a cancelled call
writes nothing. If the local SQLite lacks FTS5, building the store raises
:class:`FTS5UnavailableError`.
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
from collections.abc import Sequence
from typing import Any, ClassVar, Final

import attrs

from .._codec import digest_of
from .._errors import (
    AgentiumError,
    ArchiveCorruptError,
    EmbeddingModelMismatchError,
    InvalidArgumentError,
    RecallUnavailableError,
)
from .._history import MessageGroup
from .._ports import OpContext
from .._ports.archive import ArchiveReceipt, checked_index_batch, decode_archived_group
from .._ports.embedder import Vector
from .._ports.erasure import (
    DEFAULT_ERASE_BATCH,
    EraseReport,
    EraseStatus,
    EraseTarget,
    PhysicalErasure,
    check_max_items,
    check_target,
    count_items,
    group_sessions,
)
from .._ports.recall import (
    RecallCapabilities,
    RecallLimits,
    RecallSession,
    RecallStore,
    SourceOwner,
    SourceRef,
    SourceVector,
    document_source_id,
    group_source_id,
    indexed_group_text,
)
from .._ports.recall_args import (
    checked_argument,
    checked_count,
    checked_ctx,
    checked_key,
    checked_owner,
    checked_sequence,
)
from .._scope import Scope, SessionKey
from .._validators import bounded_count, exact_number, keep_exact, shown_number
from ._sqlite_base import SQLiteAdapterBase, SQLiteConfig
from ._sqlite_bounds import JSON_BYTES
from ._sqlite_recall_gaps import UNINDEXED_WINDOW, unindexed_seqs
from ._sqlite_recall_session import STOPWORD_LISTS, SQLiteRecallError, SQLiteRecallSession
from ._sqlite_recall_sql import SCHEMA, SEEK_SQL, checked_rows, erased_groups
from ._sqlite_recall_vectors import write_vectors
from ._sqlite_recall_writes import SourceRow, erase_sources, insert_groups, insert_source, migrate_v1
from ._sqlite_sql import immediate_transaction, schema_current, scrub_log, stored_version

__all__ = [
    "RECALL_SCHEMA_VERSION",
    "UNINDEXED_WINDOW",
    "STOPWORD_LISTS",
    "FTS5UnavailableError",
    "SQLiteRecallConfig",
    "SQLiteRecallError",
    "SQLiteRecallSession",
    "SQLiteRecallStore",
]

#: Version of the ``recall_`` tables, kept in ``recall_meta``. Version 1 files
#: (no stemming, no context column) are migrated in place when first opened.
RECALL_SCHEMA_VERSION: Final = 2


# Page cache of the store's connection, in KiB.
_CACHE_KIB: Final = 16 * 1024

# A group seq in a source id: canonical decimal, as str(int) writes it.
_SEQ: Final = re.compile(r"0|[1-9][0-9]*")


class FTS5UnavailableError(SQLiteRecallError, RecallUnavailableError):
    """The local SQLite library was built without the FTS5 extension the recall store needs.

    Use a Python whose ``sqlite3`` module links a SQLite with FTS5 (most
    builds do; check with ``python -c "import sqlite3; sqlite3.connect(':memory:')
    .execute('CREATE VIRTUAL TABLE t USING fts5(x)')"``), or another recall store.
    """


@functools.cache
def _fts5_available() -> bool:
    """True if this process's SQLite can create an FTS5 table (an in-memory probe, no file I/O)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE probe USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()
    return True


def _fts5_missing(where: str) -> FTS5UnavailableError:
    return FTS5UnavailableError(
        f"sqlite recall store: {where}: the SQLite library in use ({sqlite3.sqlite_version}) has no FTS5 "
        "full-text extension; use a Python build whose sqlite3 includes FTS5, or another recall store"
    )


def _stopwords_name(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if value not in STOPWORD_LISTS:
        raise InvalidArgumentError(
            f"{attribute.name} must be one of {', '.join(sorted(STOPWORD_LISTS))}, got {value!r}"
        )


def _similarity(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    number = exact_number(value)  # a subclass as its number: its own comparisons are not trusted
    if number is None or not -1.0 <= number <= 1.0:
        raise InvalidArgumentError(
            f"{attribute.name} must be a number from -1 to 1, got {shown_number(value)}"
        )
    keep_exact(instance, attribute, value, number)


def _share(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    number = exact_number(value)  # a subclass as its number: its own comparisons are not trusted
    if number is None or not 0.0 <= number <= 1.0:
        raise InvalidArgumentError(
            f"{attribute.name} must be a number from 0 to 1, got {shown_number(value)}"
        )
    keep_exact(instance, attribute, value, number)


@attrs.frozen(slots=True)
class SQLiteRecallConfig(SQLiteConfig):
    """Options of the SQLite recall store: those of the SQLite archive, plus ranking.

    - ``path`` (a path option), ``busy_timeout_ms`` and ``synchronous`` as for
      the SQLite archive; the default file is the same ``agentium.db``.
    - ``max_ranked_matches``: how many matches one discovery ranks at most,
      shared between the query's terms (each term's newest visible matches).
      Larger ranks more of a very common word's matches at a cost linear in
      it; see the module docs for the trade-off.
    - ``stopwords``: the words dropped from queries, ``"english"`` (the
      built-in list) or ``"none"``.
    - ``min_relevance``: the relevance floor, from 0 to 1: the share of the
      query's weight (the sum of its terms' idf) a source must match to be
      returned at all. 0 returns every source that matches any term.
    - ``min_similarity`` (hybrid recall): the cosine similarity, from -1 to 1,
      a source's vector must reach for the vector ranking to return it.
    - ``max_vector_scan`` (hybrid recall): how many of the scope's newest
      sources have their vectors scored, besides every source the query's
      words reach; the bound on a hybrid discovery's vector work.
    - ``hybrid_depth`` (hybrid recall): how many of each ranking (lexical,
      vector) enter reciprocal rank fusion.
    - ``vector_weight`` (hybrid recall, 0 to 1): what the vector ranking
      counts in the fusion against the lexical ranking's 1.
    - ``fusion_k`` (hybrid recall): reciprocal rank fusion's ``k``; smaller
      favours the top of each ranking more.
    """

    max_ranked_matches: int = attrs.field(default=1000, validator=bounded_count())
    stopwords: str = attrs.field(default="english", validator=_stopwords_name)
    min_relevance: float = attrs.field(default=0.3, validator=_share)
    min_similarity: float = attrs.field(default=0.3, validator=_similarity)
    max_vector_scan: int = attrs.field(default=500, validator=bounded_count(ceiling=1_000_000))
    hybrid_depth: int = attrs.field(default=50, validator=bounded_count(ceiling=10_000))
    vector_weight: float = attrs.field(default=0.5, validator=_share)
    fusion_k: int = attrs.field(default=20, validator=bounded_count(minimum=0, ceiling=10_000))


def _utf8(text: str, what: str) -> int:
    """UTF-8 length of ``text``; refuse what SQLite cannot store (a non-str, a lone surrogate)."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(text).__name__}; nothing was written")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{what} is not valid Unicode text ({exc}); nothing was written") from exc
    if size > JSON_BYTES:  # reads refuse a longer value as damage (see _sqlite_bounds)
        raise InvalidArgumentError(
            f"{what} is {size} bytes, over the {JSON_BYTES} stored; nothing was written"
        )
    return size


class SQLiteRecallStore(SQLiteAdapterBase, RecallStore):
    """The built-in recall store: FTS5 over archived groups and host documents in a SQLite file.

    Build it with a :class:`SQLiteRecallConfig` (default file ``agentium.db``,
    shared with the SQLite archive and session store). Building does no file
    I/O; it raises :class:`FTS5UnavailableError` if SQLite lacks FTS5.
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
    session_class: ClassVar[type[RecallSession]] = SQLiteRecallSession
    storage_error: ClassVar[type[AgentiumError]] = SQLiteRecallError
    adapter_name: ClassVar[str] = "sqlite recall store"

    def __init__(self, config: SQLiteRecallConfig | None = None) -> None:
        if not _fts5_available():
            raise _fts5_missing("cannot build the store")
        recall_config = config if config is not None else SQLiteRecallConfig()
        if not isinstance(recall_config, SQLiteRecallConfig):
            raise InvalidArgumentError(f"config must be a SQLiteRecallConfig, got {type(config).__name__}")
        super().__init__(recall_config)
        self._recall_config = recall_config

    @property
    def config(self) -> SQLiteRecallConfig:
        """The options this store was built with."""
        return self._recall_config

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        # A larger page cache than SQLite's 2 MiB default keeps the index's
        # inner pages and the hot source rows in memory (a bounded 16 MiB).
        conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
        if schema_current(conn, "recall_meta", RECALL_SCHEMA_VERSION, SCHEMA):
            return  # read without the write lock
        with immediate_transaction(conn):
            try:
                conn.execute(SCHEMA[0])  # recall_meta, which says what the other tables are
                found = stored_version(conn, "recall_meta")  # bounded: a huge value is not read
                if found not in (None, "1", str(RECALL_SCHEMA_VERSION)):
                    raise SQLiteRecallError(
                        f"{self.adapter_name}: {self._path} has recall schema version {found}, this "
                        f"version of agentium-harness understands {RECALL_SCHEMA_VERSION}; upgrade or use "
                        "another file"
                    )
                # Version 1 to 2, in this transaction: a crash leaves version 1 whole.
                if found == "1":
                    migrate_v1(conn)
                for statement in SCHEMA[1:]:
                    conn.execute(statement)
                if found == "1":
                    conn.execute("INSERT INTO recall_fts (recall_fts) VALUES ('rebuild')")
            except sqlite3.OperationalError as exc:
                if "fts5" in str(exc).lower():
                    raise _fts5_missing(f"cannot open {self._path}") from exc
                raise
            if found != str(RECALL_SCHEMA_VERSION):
                conn.execute(
                    "INSERT OR REPLACE INTO recall_meta (key, value) VALUES ('schema_version', ?)",
                    (str(RECALL_SCHEMA_VERSION),),
                )

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        """A session confined to ``scope``. Acquires nothing: calls share the store's connection."""
        checked_ctx(ctx, "recall open").raise_if_expired("recall open")
        if not isinstance(scope, Scope):
            raise InvalidArgumentError(f"scope must be a Scope, got {type(scope).__name__}")
        if not isinstance(limits, RecallLimits):
            raise InvalidArgumentError(f"limits must be RecallLimits, got {type(limits).__name__}")
        self.refuse_if_closed("recall open")
        return SQLiteRecallSession(self, scope, limits)

    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        """Add or replace document ``doc_id`` of ``owner``; identical content writes nothing."""
        checked_ctx(ctx, "recall index").raise_if_expired("recall index")
        if not isinstance(owner, SourceOwner):
            raise InvalidArgumentError(f"owner must be a SourceOwner, got {type(owner).__name__}")
        try:
            source_id = document_source_id(owner, doc_id)
        except AgentiumError as exc:  # InvalidIdError: the port promises InvalidArgumentError
            raise InvalidArgumentError(f"{exc}; nothing was written") from exc
        _utf8(text, "text")
        _utf8(title, "title")
        revision = digest_of({"title": title, "text": text})
        row = SourceRow(source_id, "document", owner, revision, title, text)

        def work(conn: sqlite3.Connection) -> None:
            with immediate_transaction(conn):
                ctx.raise_if_expired("recall index")
                insert_source(conn, row)

        await self.run(ctx, "recall index", work)
        return SourceRef(source_id, revision)

    async def delete_document(self, owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        """Remove document ``doc_id`` of ``owner``; True if it was indexed."""
        checked_ctx(ctx, "recall delete").raise_if_expired("recall delete")
        checked_owner(owner, "recall delete")
        try:
            source_id = document_source_id(owner, doc_id)
        except AgentiumError as exc:
            raise InvalidArgumentError(f"{exc}; nothing was written") from exc

        def work(conn: sqlite3.Connection) -> bool:
            with immediate_transaction(conn):
                ctx.raise_if_expired("recall delete")
                cursor = conn.execute(
                    "DELETE FROM recall_sources WHERE source_id = ? AND kind = 'document'", (source_id,)
                )
                return cursor.rowcount > 0

        return await self.run(ctx, "recall delete", work)

    async def index_groups(
        self,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        receipts: Sequence[ArchiveReceipt],
        ctx: OpContext,
    ) -> int:
        """Index archived groups of ``key`` in one transaction; already indexed ones cost one lookup.

        Every group is checked against its receipt before anything is
        written. A group indexed earlier with another digest (the archive was
        reconciled) is replaced: the receipts are the archive's word.
        """
        checked_ctx(ctx, "recall index").raise_if_expired("recall index")
        key = checked_key(key, "recall index")
        checked_sequence(groups, "groups", "recall index")
        checked_sequence(receipts, "receipts", "recall index")
        rows = self._group_rows(key, groups, receipts)

        def work(conn: sqlite3.Connection) -> int:
            with immediate_transaction(conn):
                written = insert_groups(conn, rows, lambda: ctx.raise_if_expired("recall index"))
                ctx.raise_if_expired("recall index")
            return written

        return await self.run(ctx, "recall index", work)

    def _group_rows(
        self, key: SessionKey, groups: Sequence[MessageGroup], receipts: Sequence[ArchiveReceipt]
    ) -> list[SourceRow]:
        """Check the batch and build its rows; any mismatch raises before anything is written."""
        batch = checked_index_batch(key, groups, receipts)
        owner = SourceOwner.of_session(key)
        rows: list[SourceRow] = []
        for group, receipt in batch:
            if group.size_bytes > JSON_BYTES:  # as _utf8: more than a read of the row accepts
                raise InvalidArgumentError(
                    f"group {group.seq} is over {JSON_BYTES} bytes; nothing was written"
                )
            rows.append(
                SourceRow(
                    source_id=group_source_id(key, group.seq),
                    kind="group",
                    owner=owner,
                    revision=group.digest,
                    title="",
                    text=indexed_group_text(group),
                    seq=group.seq,
                    data=group.canonical_bytes(),
                    receipt_digest=receipt.digest,
                )
            )
        return rows

    async def unindexed_groups(
        self, key: SessionKey, end_seq: int, max_groups: int, ctx: OpContext, *, start_seq: int = 0
    ) -> Sequence[int]:
        """Seqs from ``start_seq`` below ``end_seq`` with no indexed group of ``key``: ascending, bounded.

        One statement, bounded by :data:`UNINDEXED_WINDOW` whatever the
        session holds: it reads the session's newest indexed seqs below
        ``end_seq`` (at most that many, from the ``recall_sources_groups``
        index alone) and returns the lowest gaps among them, from seq 0 when
        the window reaches it. A gap older than the window is not reported
        (``agentium recall rebuild`` indexes it); the engine asks after every
        archiving commit, so a gap is reported while it is recent.
        """
        checked_ctx(ctx, "recall index").raise_if_expired("recall index")
        key = checked_key(key, "recall index")
        # Clamped: a seq or count past SQLite's 64-bit integers would overflow the query.
        end_seq = checked_count(end_seq, "end_seq", "recall index")
        max_groups = checked_count(max_groups, "max_groups", "recall index")
        start_seq = checked_count(start_seq, "start_seq", "recall index")
        start = max(0, start_seq)
        if end_seq <= start or max_groups <= 0:
            return []
        return await self.run(
            ctx, "recall index", lambda conn: unindexed_seqs(conn, key, end_seq, max_groups, start)
        )

    async def index_vectors(self, vectors: Sequence[SourceVector], ctx: OpContext) -> int:
        """Store each source's vector beside its index entry, in one transaction; how many were stored.

        A vector whose source is not indexed at its ref's revision is skipped.
        Every vector is of one model, the index's: a batch that mixes models,
        or is of another model than the vectors already stored, raises
        :class:`~agentium_harness._errors.EmbeddingModelMismatchError` and
        writes nothing.
        """
        checked_ctx(ctx, "recall index").raise_if_expired("recall index")
        entries: list[SourceVector] = []
        for entry in checked_sequence(vectors, "vectors", "recall index"):
            if not isinstance(entry, SourceVector) or not isinstance(entry.vector, Vector):
                raise InvalidArgumentError("index_vectors takes SourceVector items; nothing was written")
            entries.append(entry)
        models = {entry.vector.model for entry in entries}
        if len(models) > 1:
            raise EmbeddingModelMismatchError(
                f"index_vectors was given vectors of {len(models)} models "
                f"({', '.join(sorted(m.key() for m in models))}); one batch, one model; nothing was written"
            )
        path = self._path

        def work(conn: sqlite3.Connection) -> int:
            with immediate_transaction(conn):
                stored = write_vectors(conn, entries, path, lambda: ctx.raise_if_expired("recall index"))
                ctx.raise_if_expired("recall index")
            return stored

        return await self.run(ctx, "recall index", work)

    async def health(self, ctx: OpContext) -> str:
        """Run constant-time probe statements (no index scan); a file not created yet is not created."""

        def probe(conn: sqlite3.Connection) -> str:
            conn.execute("SELECT 1").fetchone()
            mode = conn.execute("PRAGMA journal_mode").fetchone()
            return (
                f"sqlite recall ok: {os.path.basename(self.path)}, sqlite {sqlite3.sqlite_version}, "
                f"journal_mode={mode[0] if mode else '?'}"
            )

        return await self.probe_health(ctx, "recall health", probe)

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
        scrub: bool = True,
    ) -> EraseReport:
        """Delete the target's group entries and documents (at most ``max_items``), postings included.

        One transaction deletes the sources (their texts and index entries go
        with them, and the context of a surviving neighbour of an erased group
        is rebuilt) and runs FTS5's ``optimize``, which rewrites the index
        without the deleted postings (its cost grows with the index); the WAL
        is then checkpointed and truncated. With ``secure_delete`` on, the
        freed pages hold zeros.

        ``scrub=False`` (the engine's erasure, for every SQLite store on one
        file) leaves the file's rebuild and log checkpoint to one
        :meth:`scrub_erased` call once every store on the file has erased.
        """
        check_target(target)
        # A str such as "no" would be truthy: a dry run asked for by mistake, or the reverse.
        checked_argument(dry_run, bool, "dry_run", "recall erase")
        checked_argument(scrub, bool, "scrub", "recall erase")
        bound = check_max_items(max_items)

        def work(conn: sqlite3.Connection) -> EraseReport:
            with immediate_transaction(conn):
                taken, more = erase_sources(
                    conn, target, bound, dry_run=dry_run, check=lambda: ctx.raise_if_expired("recall erase")
                )
                if taken and not dry_run:
                    # In the same transaction: the postings go with the rows or neither does.
                    conn.execute("INSERT INTO recall_fts (recall_fts) VALUES ('optimize')")
            physical, detail = (
                (PhysicalErasure.REMOVED, "")
                if dry_run or not taken or not scrub
                else scrub_log(conn, time_left=ctx.time_left())
            )
            groups, damaged = erased_groups(taken)
            return EraseReport(
                count_items(group=len(groups), damaged=damaged, document=len(taken) - len(groups) - damaged),
                group_sessions(groups),
                EraseStatus.PARTIAL if more else EraseStatus.COMPLETE,
                physical,
                detail,
            )

        return await self.run(ctx, "recall erase", work)

    async def seek_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        """Up to ``max_groups`` indexed groups of ``key`` with ``seq >= start_seq``, ascending, checked.

        Each is decoded strictly from its stored canonical bytes and checked
        against the receipt digest kept at indexing; a damaged or misfiled
        row raises :class:`~agentium_harness._errors.ArchiveCorruptError`.
        """
        checked_ctx(ctx, "recall seek").raise_if_expired("recall seek")
        key = checked_key(key, "recall seek")
        start_seq = checked_count(start_seq, "start_seq", "recall seek")  # clamped to SQLite's integers
        # A negative LIMIT would mean "no limit" to SQLite.
        limit = max(0, checked_count(max_groups, "max_groups", "recall seek"))

        def work(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            # Bounded: a value longer than any the store writes is refused unread.
            rows = conn.execute(SEEK_SQL, (key.tenant, key.user, key.session, start_seq, limit)).fetchall()
            return checked_rows(rows, f"an indexed group of session {key.key()}", ArchiveCorruptError)

        rows = await self.run(ctx, "recall seek", work)
        return [self._decode_group(key, seq, digest, data) for seq, digest, data in rows]

    def _decode_group(self, key: SessionKey, seq: object, digest: object, data: object) -> MessageGroup:
        return decode_archived_group(
            key, seq, digest, data, lambda: f"indexed group {seq!r} of session {key.key()} in {self._path}"
        )
