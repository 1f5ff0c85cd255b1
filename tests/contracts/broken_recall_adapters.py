"""Recall stores with one realistic bug each, run through RecallStoreContract by a pytester session.

Each wraps the real SQLite recall store and changes one behaviour, so every
other standard test still passes and the failing ones name the bug.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest

from agentium_harness import ArchiveCorruptError, InvalidArgumentError
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallError, SQLiteRecallStore
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    Candidate,
    EmbeddingModel,
    Excerpt,
    MessageGroup,
    OpContext,
    RecallCapabilities,
    RecallLimits,
    RecallSession,
    RecallStore,
    Scope,
    SessionKey,
    SourceOwner,
    SourceRef,
    SourceVector,
    Validation,
    ValidationStatus,
    Vector,
    document_source_id,
    from_json,
    make_excerpt,
    source_owner,
)
from agentium_harness.testing import RecallStoreContract

pytestmark = pytest.mark.anyio

ALL = RecallCapabilities(
    bounded_discovery=True,
    bounded_reads=True,
    revision_validation=True,
    bounded_current_validation=True,
    canonical_archive_reads=True,
    document_indexing=True,
    archive_indexing=True,
)


class WrapSession(RecallSession):
    def __init__(self, inner: RecallSession, store: Wrap) -> None:
        self.inner, self.store = inner, store

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        return await self.inner.discover(query, max_candidates, ctx)

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        return await self.inner.read(refs, max_excerpt_bytes, ctx)

    async def validate(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        return await self.inner.validate(refs, ctx)

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        return await self.inner.validate_current(refs, ctx)

    async def close(self) -> None:
        await self.inner.close()


class Wrap(RecallStore):
    capabilities: ClassVar[RecallCapabilities] = ALL
    session_class: ClassVar[type[RecallSession]] = WrapSession
    inner_class: ClassVar[type[SQLiteRecallStore]] = SQLiteRecallStore

    def __init__(self, path: Path) -> None:
        self.inner = self.inner_class(SQLiteRecallConfig(path=str(path)))
        self.seen: list[tuple[SourceOwner, str, str]] = []
        self.scopes: dict[int, Scope] = {}

    async def open(self, scope: Any, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        session = type(self).session_class(await self.inner.open(scope, limits, ctx), self)  # type: ignore[call-arg]
        self.scopes[id(session)] = scope
        return session

    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        ref = await self.inner.index_document(owner, doc_id, text, ctx, title=title)
        self.seen.append((owner, doc_id, text))
        return ref

    async def delete_document(self, owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        return await self.inner.delete_document(owner, doc_id, ctx)

    async def index_groups(self, key: Any, groups: Any, receipts: Any, ctx: OpContext) -> int:
        return await self.inner.index_groups(key, groups, receipts, ctx)

    async def seek_groups(self, key: Any, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        return await self.inner.seek_groups(key, start_seq, max_groups, ctx)

    async def aclose(self) -> None:
        await self.inner.aclose()


class UncheckedTextSession(WrapSession):
    """Where the real store finds a stored text damaged, returns it as it found it."""

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        try:
            return await self.inner.read(refs, max_excerpt_bytes, ctx)
        except (SQLiteRecallError, ArchiveCorruptError) as exc:
            if "damaged" not in str(exc):
                raise
        assert isinstance(self.store, ReturnsEditedText)
        conn = sqlite3.connect(self.store.path)
        try:
            out = []
            for ref in refs:
                row = conn.execute(
                    "SELECT t.text FROM recall_sources AS s JOIN recall_texts AS t ON t.id = s.id "
                    "WHERE s.source_id = ? AND s.revision = ?",
                    (ref.source_id, ref.revision),
                ).fetchone()
                owner = source_owner(ref.source_id)
                if row is not None and owner is not None:
                    out.append(make_excerpt(ref, owner, row[0], (), max_excerpt_bytes))
            return out
        finally:
            conn.close()


class EscapingSession(WrapSession):
    """Writes the line breaks of a group's excerpt as escapes: no longer a piece of its indexed text."""

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        out = await self.inner.read(refs, max_excerpt_bytes, ctx)
        return [
            attrs.evolve(e, text=e.text.replace("\n", "\\n")) if e.ref.source_id.startswith("group/") else e
            for e in out
        ]


class RewritesGroupExcerpts(Wrap):
    """Escapes the line breaks of group excerpts itself: the engine can no longer find them in the group."""

    capabilities = ALL
    session_class = EscapingSession


class _Suite(RecallStoreContract):
    store_class: ClassVar[type[Wrap]] = Wrap

    @pytest.fixture
    async def recall_store(self, tmp_path: Path) -> AsyncIterator[Wrap]:
        store = self.store_class(tmp_path / "r.db")
        yield store
        await store.aclose()

    @pytest.fixture
    def corrupt_indexed_group(self, tmp_path: Path) -> Callable[..., None]:
        def corrupt(key: SessionKey, seq: int, transform: Callable[[bytes], bytes]) -> None:
            conn = sqlite3.connect(tmp_path / "r.db", isolation_level=None)
            try:
                row = conn.execute(
                    "SELECT t.id, t.data FROM recall_sources AS s JOIN recall_texts AS t ON t.id = s.id "
                    "WHERE s.kind = 'group' AND s.tenant_id = ? AND s.user_id = ? AND s.session_id = ? "
                    "AND s.seq = ?",
                    (key.tenant, key.user, key.session, seq),
                ).fetchone()
                conn.execute("UPDATE recall_texts SET data = ? WHERE id = ?", (transform(row[1]), row[0]))
            finally:
                conn.close()

        return corrupt

    @pytest.fixture
    def corrupt_indexed_text(self, tmp_path: Path) -> Callable[..., None]:
        def corrupt(ref: SourceRef, transform: Callable[[bytes], bytes]) -> None:
            conn = sqlite3.connect(tmp_path / "r.db", isolation_level=None)
            try:
                row = conn.execute(
                    "SELECT t.id, t.text FROM recall_sources AS s JOIN recall_texts AS t ON t.id = s.id "
                    "WHERE s.source_id = ?",
                    (ref.source_id,),
                ).fetchone()
                text = transform(row[1].encode("utf-8")).decode("utf-8")
                conn.execute("UPDATE recall_texts SET text = ? WHERE id = ?", (text, row[0]))
            finally:
                conn.close()

        return corrupt


# -- the bugs ----------------------------------------------------------------------------------


def _running_loop() -> object:
    """The running event loop (asyncio) or run (trio), as a client library would bind to it."""
    import sniffio

    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_trio_token()
    import asyncio

    return asyncio.get_running_loop()


class _FirstLoopClient:
    """A client bound to the event loop of its first call, as asyncio streams, redis.asyncio and httpx pools
    are: from any other loop it fails, as they do (``attached to a different loop``)."""

    _bound_loop: object = None

    def _client(self) -> None:
        loop = _running_loop()
        if self._bound_loop is None:
            self._bound_loop = loop
        elif self._bound_loop is not loop:
            raise RuntimeError("Future attached to a different loop")


class LoopBound(_FirstLoopClient, Wrap):
    """Keeps the client of its first event loop and uses it from every other loop."""

    capabilities = ALL

    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        self._client()
        return await super().index_document(owner, doc_id, text, ctx, title=title)


class InheritedCaps(Wrap):
    """Declares nothing in its own class body."""

    capabilities = Wrap.capabilities
    del capabilities  # inherits Wrap's declaration instead


class StubSeek(Wrap):
    """Declares canonical_archive_reads but leaves seek_groups as the port's stub."""

    capabilities = ALL
    seek_groups = RecallStore.seek_groups  # type: ignore[assignment]


class LeakySession(WrapSession):
    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        found = list(await self.inner.discover(query, max_candidates, ctx))
        words = set(query.lower().split())
        for owner, doc_id, text in self.store.seen:  # every owner's documents, whoever asks
            if words & set(text.lower().split()):
                ref = SourceRef(document_source_id(owner, doc_id), "r")
                if ref.source_id not in {c.ref.source_id for c in found}:
                    found.append(Candidate(ref, owner, 0.0, len(text)))
        return found


class Leaky(Wrap):
    """Discovery matches documents of every owner, not only the session's scope."""

    capabilities = ALL
    session_class = LeakySession


class CountlessSession(WrapSession):
    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        return await self.inner.discover(query, max_candidates + 5, OpContext())


class IgnoresDiscoveryBounds(Wrap):
    """Asks the backend for more than max_candidates and drops the byte budget."""

    capabilities = ALL
    session_class = CountlessSession


class GreedySession(WrapSession):
    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        return await self.inner.read(refs, max_excerpt_bytes * 4, OpContext())


class IgnoresReadBounds(Wrap):
    """Reads four times the excerpt cap and ignores the remaining bytes and tokens."""

    capabilities = ALL
    session_class = GreedySession


class StaleSession(WrapSession):
    async def validate(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        return [Validation(r, ValidationStatus.CURRENT, r.revision) for r in refs]

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        return await self.validate(refs, ctx)


class StaleValidation(Wrap):
    """Says every ref is current, whatever happened to it."""

    capabilities = ALL
    session_class = StaleSession


class SyntaxSession(WrapSession):
    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        if any(ch in query for ch in '"*('):
            raise InvalidArgumentError(f"fts5: syntax error near {query!r}")
        return await self.inner.discover(query, max_candidates, ctx)


class InterpretsSyntax(Wrap):
    """Hands the query to a query language, so its syntax errors surface."""

    capabilities = ALL
    session_class = SyntaxSession


class EmptySession(WrapSession):
    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        if not query.strip():
            raise InvalidArgumentError("empty query")
        return await self.inner.discover(query, max_candidates, ctx)


class RefusesEmptyQuery(Wrap):
    """Raises on an empty query instead of finding nothing."""

    capabilities = ALL
    session_class = EmptySession


class WritesFirst(Wrap):
    """Writes the document before looking at the context."""

    capabilities = ALL

    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        ref = await self.inner.index_document(owner, doc_id, text, OpContext(), title=title)
        ctx.raise_if_expired("recall index")
        return ref


class FragileSession(WrapSession):
    cancelled = False

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        if ctx.expired:
            self.cancelled = True
        return await self.inner.discover(query, max_candidates, ctx)

    async def close(self) -> None:
        await self.inner.close()
        if self.cancelled:
            raise RuntimeError("cursor left open by the cancelled call")


class CloseFailsAfterCancel(Wrap):
    """Its session's close raises after a cancelled call."""

    capabilities = ALL
    session_class = FragileSession


class SeekIgnoresBounds(Wrap):
    """seek_groups returns every group from the start, however many were asked for."""

    capabilities = ALL

    async def seek_groups(self, key: Any, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        return await self.inner.seek_groups(key, 0, 10_000, ctx)


class TrustsItsOwnDigests(Wrap):
    """Indexes groups under digests it computes itself, ignoring the receipts it was given."""

    capabilities = ALL

    async def index_groups(self, key: Any, groups: Any, receipts: Any, ctx: OpContext) -> int:
        mine = [ArchiveReceipt(g.seq, g.digest, "mine") for g in groups]
        return await self.inner.index_groups(key, groups, mine, ctx)


class CountsPastTheEnd(Wrap):
    """Reports the unindexed seqs below ``end_seq``, and ``end_seq`` itself (an off-by-one)."""

    capabilities = ALL

    async def unindexed_groups(
        self, key: Any, end_seq: int, max_groups: int, ctx: OpContext, *, start_seq: int = 0
    ) -> list[int]:
        held = {g.seq for g in await self.inner.seek_groups(key, 0, end_seq + 1, ctx)}
        return [seq for seq in range(start_seq, end_seq + 1) if seq not in held][:max_groups]


class CountsFromZero(Wrap):
    """Reports the unindexed seqs from 0 whatever ``start_seq`` says (groups erased, not lost)."""

    capabilities = ALL

    async def unindexed_groups(
        self, key: Any, end_seq: int, max_groups: int, ctx: OpContext, *, start_seq: int = 0
    ) -> list[int]:
        held = {g.seq for g in await self.inner.seek_groups(key, 0, end_seq, ctx)}
        return [seq for seq in range(end_seq) if seq not in held][:max_groups]


def joined(*ids: str | None) -> str:
    """The naive key: ids joined with '/', absent ones skipped (not injective)."""
    return "/".join(i for i in ids if i is not None)


class JoinedOwnerSession(WrapSession):
    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        found = list(await self.inner.discover(query, max_candidates, ctx))
        scope = self.store.scopes[id(self)]
        mine = joined(scope.tenant, scope.user)
        for owner, _, _ in self.store.seen:
            if owner.tenant != scope.tenant and joined(owner.tenant, owner.user) == mine:
                # The index is keyed by the joined owner: the other tenant's bucket is "ours".
                other = Scope(owner.tenant, owner.user or scope.user, scope.session)
                session = await self.store.inner.open(other, RecallLimits(), ctx)
                try:
                    extra = await session.discover(query, max_candidates, ctx)
                finally:
                    await session.close()
                known = {c.ref.source_id for c in found}
                found += [c for c in extra if c.ref.source_id not in known]
        return found[:max_candidates]


class JoinsOwnerKeys(Wrap):
    """Buckets documents by tenant and user joined with '/': tenant a + user b/c is tenant a/b + user c."""

    capabilities = ALL
    session_class = JoinedOwnerSession


class JoinsSessionKeys(Wrap):
    """Keys archived groups by tenant/user/session joined with '/': colliding sessions share groups."""

    capabilities = ALL

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.keys: dict[str, SessionKey] = {}

    async def index_groups(self, key: Any, groups: Any, receipts: Any, ctx: OpContext) -> int:
        first = self.keys.setdefault(joined(key.tenant, key.user, key.session), key)
        return await self.inner.index_groups(key, groups, receipts, ctx) if first == key else 0

    async def seek_groups(self, key: Any, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        stored = self.keys.get(joined(key.tenant, key.user, key.session), key)
        return await self.inner.seek_groups(stored, start_seq, max_groups, ctx)


class NoDigestCheckSQLite(SQLiteRecallStore):
    def _decode_group(self, key: SessionKey, seq: object, digest: object, data: object) -> MessageGroup:
        assert isinstance(data, bytes)
        return from_json(data, MessageGroup)  # the receipt digest kept at indexing is never compared


class SeekSkipsTheDigest(Wrap):
    """seek_groups decodes what is stored without checking it against the receipt digest."""

    capabilities = ALL
    inner_class = NoDigestCheckSQLite


class ReturnsEditedText(Wrap):
    """read returns a document's stored text as found, never checked against its revision."""

    capabilities = ALL
    session_class = UncheckedTextSession

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.path = path


class SeeksUndeclared(Wrap):
    """Answers seek_groups without declaring canonical_archive_reads (so its tests are skipped)."""

    capabilities = attrs.evolve(ALL, canonical_archive_reads=False)


class TestLoopBound(_Suite):
    store_class = LoopBound


class TestInheritedCaps(_Suite):
    store_class = InheritedCaps


class TestStubSeek(_Suite):
    store_class = StubSeek


class TestLeaky(_Suite):
    store_class = Leaky


class TestIgnoresDiscoveryBounds(_Suite):
    store_class = IgnoresDiscoveryBounds


class TestIgnoresReadBounds(_Suite):
    store_class = IgnoresReadBounds


class TestStaleValidation(_Suite):
    store_class = StaleValidation


class TestInterpretsSyntax(_Suite):
    store_class = InterpretsSyntax


class TestRefusesEmptyQuery(_Suite):
    store_class = RefusesEmptyQuery


class TestWritesFirst(_Suite):
    store_class = WritesFirst


class TestCloseFailsAfterCancel(_Suite):
    store_class = CloseFailsAfterCancel


class TestSeekIgnoresBounds(_Suite):
    store_class = SeekIgnoresBounds


class TestTrustsItsOwnDigests(_Suite):
    store_class = TrustsItsOwnDigests


class TestCountsPastTheEnd(_Suite):
    store_class = CountsPastTheEnd


class TestCountsFromZero(_Suite):
    store_class = CountsFromZero


# -- hybrid recall bugs (issue 25): the store keeps vectors and fuses, with one bug each -----------

HYBRID = RecallCapabilities(
    bounded_discovery=True,
    bounded_reads=True,
    revision_validation=True,
    bounded_current_validation=True,
    canonical_archive_reads=True,
    document_indexing=True,
    archive_indexing=True,
    vector_indexing=True,
    hybrid_discovery=True,
)


class HybridSession(WrapSession):
    async def discover_hybrid(
        self, query: str, vector: Vector, max_candidates: int, ctx: OpContext
    ) -> Sequence[Candidate]:
        return await self.inner.discover_hybrid(query, vector, max_candidates, ctx)


class Hybrid(Wrap):
    capabilities = HYBRID
    session_class = HybridSession

    async def index_vectors(self, vectors: Sequence[SourceVector], ctx: OpContext) -> int:
        return await self.inner.index_vectors(vectors, ctx)


class WordsOnlySession(HybridSession):
    async def discover_hybrid(
        self, query: str, vector: Vector, max_candidates: int, ctx: OpContext
    ) -> Sequence[Candidate]:
        return await self.inner.discover(query, max_candidates, ctx)  # the vector is ignored


class HybridIsWordsOnly(Hybrid):
    capabilities = HYBRID
    session_class = WordsOnlySession


class VectorsOnlySession(HybridSession):
    async def discover_hybrid(
        self, query: str, vector: Vector, max_candidates: int, ctx: OpContext
    ) -> Sequence[Candidate]:
        return await self.inner.discover_hybrid("", vector, max_candidates, ctx)  # the words are dropped


class HybridIsVectorsOnly(Hybrid):
    capabilities = HYBRID
    session_class = VectorsOnlySession


class UncappedSession(HybridSession):
    async def discover_hybrid(
        self, query: str, vector: Vector, max_candidates: int, ctx: OpContext
    ) -> Sequence[Candidate]:
        return await self.inner.discover_hybrid(
            query, vector, max_candidates * 10, OpContext.with_timeout(30.0)
        )


class HybridIgnoresBounds(Hybrid):
    capabilities = HYBRID
    session_class = UncappedSession


class LeakyVectorSession(HybridSession):
    async def discover_hybrid(
        self, query: str, vector: Vector, max_candidates: int, ctx: OpContext
    ) -> Sequence[Candidate]:
        # The vector scan forgot the tenant: it looks at every tenant the store has seen.
        found = list(await self.inner.discover_hybrid(query, vector, max_candidates, ctx))
        scope = self.inner.scope  # type: ignore[attr-defined]
        for owner, _doc, _text in self.store.seen:
            if owner.tenant != scope.tenant:
                other = await self.store.inner.open(
                    Scope(owner.tenant, scope.user, scope.session), RecallLimits(), ctx
                )
                found += await other.discover_hybrid("", vector, max_candidates, ctx)
                await other.close()
        return found[:max_candidates]


class HybridLeaks(Hybrid):
    capabilities = HYBRID
    session_class = LeakyVectorSession


class MixingSession(HybridSession):
    async def discover_hybrid(
        self, query: str, vector: Vector, max_candidates: int, ctx: OpContext
    ) -> Sequence[Candidate]:
        model = self.store.model or vector.model  # type: ignore[attr-defined]
        return await self.inner.discover_hybrid(query, Vector(model, vector.values), max_candidates, ctx)


class MixesModels(Hybrid):
    """Relabels every vector with the first model it saw: two spaces silently become one."""

    capabilities = HYBRID
    session_class = MixingSession
    model: EmbeddingModel | None = None

    async def index_vectors(self, vectors: Sequence[SourceVector], ctx: OpContext) -> int:
        if vectors and self.model is None:
            self.model = vectors[0].vector.model
        relabeled = [SourceVector(v.ref, Vector(self.model, v.vector.values)) for v in vectors]  # type: ignore[arg-type]
        return await self.inner.index_vectors(relabeled, ctx)


class KeepsStaleVectors(Hybrid):
    """Stores a vector for whatever revision the source has now, not the one it was computed from."""

    capabilities = HYBRID

    async def index_vectors(self, vectors: Sequence[SourceVector], ctx: OpContext) -> int:
        fixed = []
        for entry in vectors:
            owner = source_owner(entry.ref.source_id)
            assert owner is not None
            session = await self.inner.open(Scope(owner.tenant, "u", "s"), RecallLimits(), ctx)
            (now,) = await session.validate([entry.ref], ctx)
            await session.close()
            revision = now.current_revision or entry.ref.revision
            fixed.append(SourceVector(SourceRef(entry.ref.source_id, revision), entry.vector))
        return await self.inner.index_vectors(fixed, ctx)


class TestHybridIsWordsOnly(_Suite):
    store_class = HybridIsWordsOnly


class TestHybridIsVectorsOnly(_Suite):
    store_class = HybridIsVectorsOnly


class TestHybridIgnoresBounds(_Suite):
    store_class = HybridIgnoresBounds


class TestHybridLeaks(_Suite):
    store_class = HybridLeaks


class TestMixesModels(_Suite):
    store_class = MixesModels


class TestKeepsStaleVectors(_Suite):
    store_class = KeepsStaleVectors


class TestJoinsOwnerKeys(_Suite):
    store_class = JoinsOwnerKeys


class TestJoinsSessionKeys(_Suite):
    store_class = JoinsSessionKeys


class TestSeekSkipsTheDigest(_Suite):
    store_class = SeekSkipsTheDigest


class TestSeeksUndeclared(_Suite):
    store_class = SeeksUndeclared


class TestReturnsEditedText(_Suite):
    store_class = ReturnsEditedText


class TestRewritesGroupExcerpts(_Suite):
    store_class = RewritesGroupExcerpts
