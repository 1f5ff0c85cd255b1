"""The recall store contract suite: :class:`RecallStoreContract`.

Subclass it in a test module and provide the ``recall_store`` fixture::

    class TestMyRecallStore(RecallStoreContract):
        @pytest.fixture
        async def recall_store(self, tmp_path):
            store = MyRecallStore(MyConfig(...))
            yield store
            await store.aclose()

Declared capabilities choose the tests: the data-driven tests put their
sources in through ``index_document`` (``document_indexing``), the archive
tests need ``archive_indexing`` and ``canonical_archive_reads``, the hybrid
tests ``vector_indexing`` and ``hybrid_discovery`` (they plant vectors of a
four-axis test model, so no embedder is involved); the others skip and say
why. Stores that index in another way override
``add_document`` (an async ``(store, owner, doc_id, text) -> SourceRef``).
The optional ``corrupt_indexed_group`` fixture returns
``corrupt(key, seq, transform)`` (like the archive suite's
``corrupt_archived_group``); with it the suite checks that ``seek_groups``
re-checks the digest of what it returns.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import pytest

from .._errors import (
    AgentiumError,
    ArchiveError,
    CapabilityError,
    EmbeddingModelMismatchError,
    InvalidArgumentError,
    OperationCancelledError,
)
from .._history import MessageGroup, estimate_tokens
from .._ports import OpContext, is_port_stub
from .._ports.archive import ArchiveReceipt
from .._ports.embedder import EmbeddingModel, Vector
from .._ports.recall import (
    Candidate,
    Completeness,
    OmittedContext,
    RecallCapabilities,
    RecallLimits,
    RecallSession,
    RecallStore,
    SourceOwner,
    SourceRef,
    SourceVector,
    ValidationStatus,
    document_source_id,
    group_source_id,
    source_owner,
)
from .._scope import Scope, SessionKey
from ._suite import (
    ContractSuite,
    CorruptStored,
    call_hook,
    declared_capabilities,
    expired_context,
    from_threads,
    past_deadline_context,
    plain_group,
    require_flag,
    rich_group,
)
from .helpers import COLLIDING_SESSION_KEYS, COLLIDING_SOURCE_OWNERS, HOSTILE_IDS, replace_once
from .index_erasure_contract import RecallErasureTests

__all__ = ["HOSTILE_IDS", "RecallStoreContract"]

AddDocument = Callable[[RecallStore, SourceOwner, str, str], Awaitable[SourceRef]]


def _caps(store: RecallStore) -> RecallCapabilities:
    return declared_capabilities(store, RecallCapabilities, "recall store")


def _scope(owner: SourceOwner, user: str = "u", session: str = "s") -> Scope:
    return Scope(owner.tenant, owner.user or user, owner.session or session, owner.project, owner.repository)


async def _session(store: RecallStore, scope: Scope, limits: RecallLimits | None = None) -> RecallSession:
    return await store.open(scope, limits or RecallLimits(), OpContext.with_timeout(10.0))


async def _discover(
    store: RecallStore, scope: Scope, query: str, n: int = 8, remaining_bytes: int | None = None
) -> list[Candidate]:
    session = await _session(store, scope)
    try:
        ctx = OpContext.with_timeout(10.0, remaining_bytes=remaining_bytes)
        return list(await session.discover(query, n, ctx))
    finally:
        await session.close()


class RecallStoreContract(RecallErasureTests, ContractSuite):
    """Standard tests every :class:`~agentium_harness._ports.recall.RecallStore` adapter must pass.

    Fixtures the subclass provides: ``recall_store`` (required), a fresh,
    empty store for each test, closed in its teardown.
    """

    __agentium_contract__ = True

    @pytest.fixture
    def recall_store(self) -> RecallStore:
        """Override this fixture: return (or yield) a fresh, empty recall store."""
        pytest.fail(
            f"{type(self).__name__} must provide a `recall_store` fixture that yields a fresh, empty store",
            pytrace=False,
        )

    @pytest.fixture
    def add_document(self) -> AddDocument:
        """Override to index documents another way than ``index_document``."""

        async def add(store: RecallStore, owner: SourceOwner, doc_id: str, text: str) -> SourceRef:
            require_flag(store, RecallCapabilities, "recall store", "document_indexing")
            return await store.index_document(owner, doc_id, text, OpContext.with_timeout(10.0))

        return add

    @pytest.fixture
    def corrupt_indexed_group(self) -> CorruptStored | None:
        """Override to return ``corrupt(key, seq, transform)`` rewriting an indexed group's bytes in place."""
        return None

    # -- declarations ---------------------------------------------------------------------------

    async def test_declares_capabilities(self, recall_store: RecallStore) -> None:
        """The store class declares ``capabilities = RecallCapabilities(...)`` with the four required flags.

        A failure means the declaration is missing, inherited, of the wrong
        type, or lacks bounded discovery, bounded reads, revision validation
        or bounded current validation (R9).
        """
        declared = type(recall_store).__dict__.get("capabilities")
        assert isinstance(declared, RecallCapabilities), (
            f"{type(recall_store).__name__} must declare `capabilities = RecallCapabilities(...)` in its own "
            f"class body, found {declared!r}"
        )
        for flag in RecallCapabilities.REQUIRED:
            assert getattr(declared, flag), f"required capability {flag} is not declared"

    async def test_declared_capabilities_are_implemented(self, recall_store: RecallStore) -> None:
        """Every declared capability has a real method on the store or its session class, not the port's stub.

        A failure names a flag declared true whose method is still the stub.
        """
        caps = _caps(recall_store)
        for flag, method in RecallCapabilities.METHODS.items():
            if not getattr(caps, flag):
                continue
            owner: type = type(recall_store)
            if method.startswith("session:"):
                owner, method = type(recall_store).session_class, method.removeprefix("session:")
            assert not is_port_stub(getattr(owner, method)), f"{flag} is declared but {method} is the stub"

    # -- scope ----------------------------------------------------------------------------------

    async def test_no_scope_sees_another_scopes_sources(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """Over many generated owners with hostile ids and identical words, no scope sees a foreign source.

        Every owner gets a document with the same words. For each scope,
        discovery returns only sources its owner rules allow, each with the
        owner its source id encodes (:func:`source_owner`, which the engine
        checks), a read of every other owner's ref returns nothing, and
        validating a foreign ref says ``forbidden`` (R13). A failure is a leak
        across tenants, users, sessions, projects or repositories, often
        through key building that is not injective or a glob/query pattern
        built from an id.
        """
        rng = random.Random(8)  # a seeded property test: the same owners every run
        owners: list[SourceOwner] = []
        for i in range(24):
            tenant = rng.choice(HOSTILE_IDS) + str(i % 6)
            owners.append(
                SourceOwner(
                    tenant,
                    rng.choice([None, rng.choice(HOSTILE_IDS)]),
                    None,
                    rng.choice([None, None, rng.choice(HOSTILE_IDS)]),
                    rng.choice([None, None, rng.choice(HOSTILE_IDS)]),
                )
            )
        refs: dict[SourceOwner, SourceRef] = {}
        for i, owner in enumerate(dict.fromkeys(owners)):
            refs[owner] = await add_document(recall_store, owner, f"doc{i}", "shared marker words zebra")
        for owner in refs:
            scope = _scope(owner)
            found = await _discover(recall_store, scope, "zebra marker", 64)
            for candidate in found:
                assert candidate.owner.visible_to(scope), f"{candidate.ref.source_id} leaked into {scope}"
                assert source_owner(candidate.ref.source_id) == candidate.owner, (
                    f"{candidate.ref.source_id} declares owner {candidate.owner}, not the one its id encodes"
                )
            assert refs[owner].source_id in {c.ref.source_id for c in found}
            foreign = [r for o, r in refs.items() if not o.visible_to(scope)]
            session = await _session(recall_store, scope)
            try:
                excerpts = await session.read(foreign, 4096, OpContext.with_timeout(10.0))
                assert list(excerpts) == [], f"read returned foreign excerpts in {scope}"
                if foreign:
                    checked = await session.validate(foreign, OpContext.with_timeout(10.0))
                    assert {v.status for v in checked} == {ValidationStatus.FORBIDDEN}
            finally:
                await session.close()

    # -- bounds ---------------------------------------------------------------------------------

    async def test_discovery_respects_its_bounds(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """``discover`` returns at most ``max_candidates``, best first, within ``ctx.remaining_bytes``.

        Discovery bytes are counted as ``Candidate.discovery_bytes``. A failure
        means the store ignores the count or the byte budget it was given.
        """
        owner = SourceOwner("t-bounds")
        for i in range(12):
            await add_document(recall_store, owner, f"d{i}", f"alpha bravo charlie item {i}")
        scope = _scope(owner)
        assert len(await _discover(recall_store, scope, "alpha bravo", 3)) == 3
        found = await _discover(recall_store, scope, "alpha bravo", 12, remaining_bytes=120)
        assert sum(c.discovery_bytes for c in found) <= 120
        scores = [c.score for c in await _discover(recall_store, scope, "alpha", 12)]
        assert scores == sorted(scores, reverse=True), "candidates must come best first"

    async def test_reads_respect_their_bounds(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """``read`` keeps each excerpt within ``max_excerpt_bytes`` and the total within ctx's budgets.

        A long source yields a whole-sentence window marked ``partial`` with
        ``source`` among its omitted context (R18). A failure means an
        excerpt over its cap, a total over the budget, or a window without
        its completeness flags.
        """
        owner = SourceOwner("t-read")
        long_text = " ".join(f"Sentence {i} about the kiwi harvest." for i in range(200))
        ref = await add_document(recall_store, owner, "long", long_text)
        small = [await add_document(recall_store, owner, f"s{i}", f"kiwi note {i}.") for i in range(6)]
        session = await _session(recall_store, _scope(owner))
        try:
            [excerpt] = await session.read([ref], 300, OpContext.with_timeout(10.0))
            assert len(excerpt.text.encode()) <= 300
            assert excerpt.completeness is not Completeness.COMPLETE
            assert OmittedContext.SOURCE in excerpt.omitted
            out = await session.read(small, 300, OpContext.with_timeout(10.0, remaining_bytes=30))
            assert sum(len(e.text.encode()) for e in out) <= 30
            out = await session.read(small, 300, OpContext.with_timeout(10.0, remaining_tokens=8))
            assert sum(estimate_tokens(e.text) for e in out) <= 8
        finally:
            await session.close()

    # -- revisions ------------------------------------------------------------------------------

    async def test_revisions_are_truthful_after_update_and_delete(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """Validation says current, then changed (with the new revision) after an update, then deleted.

        Both ``validate`` and ``validate_current`` must tell the truth, and a
        read of a stale ref returns no excerpt. A failure means revisions
        that do not move with content or deletes that leave the source alive.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "document_indexing")
        owner = SourceOwner("t-rev")
        first = await add_document(recall_store, owner, "doc", "version one of the mango plan")
        scope = _scope(owner)
        for method in ("validate", "validate_current"):
            session = await _session(recall_store, scope)
            try:
                [v] = await getattr(session, method)([first], OpContext.with_timeout(10.0))
                assert v.status is ValidationStatus.CURRENT, method
            finally:
                await session.close()
        second = await add_document(recall_store, owner, "doc", "version two of the mango plan")
        assert second.revision != first.revision
        session = await _session(recall_store, scope)
        try:
            for method in ("validate", "validate_current"):
                [v] = await getattr(session, method)([first], OpContext.with_timeout(10.0))
                assert v.status is ValidationStatus.CHANGED and v.current_revision == second.revision, method
            assert list(await session.read([first], 1000, OpContext.with_timeout(10.0))) == []
        finally:
            await session.close()
        assert await recall_store.delete_document(owner, "doc", OpContext.with_timeout(10.0)) is True
        session = await _session(recall_store, scope)
        try:
            for method in ("validate", "validate_current"):
                [v] = await getattr(session, method)([second], OpContext.with_timeout(10.0))
                assert v.status is ValidationStatus.DELETED, method
            assert await _discover(recall_store, scope, "mango") == []
        finally:
            await session.close()

    # -- queries --------------------------------------------------------------------------------

    async def test_query_syntax_is_matched_as_words(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """Full-text and glob syntax in queries and documents is inert: no error, literal words match.

        A failure means a query was passed to a query language (FTS5 MATCH, a
        regex, a glob) without quoting.
        """
        owner = SourceOwner("t-syntax")
        await add_document(recall_store, owner, "d", 'the "NEAR" operator OR * glob - minus (paren')
        scope = _scope(owner)
        for query in ['"', "*", "NEAR(", "a OR", "-x", "(", "AND NOT", 'q"uote', "x:y", "^"]:
            await _discover(recall_store, scope, query)
        found = await _discover(recall_store, scope, 'NEAR "operator" glob*')
        assert [c.ref.source_id for c in found] == [document_source_id(owner, "d")]

    async def test_empty_and_huge_queries(self, recall_store: RecallStore, add_document: AddDocument) -> None:
        """An empty query finds nothing without error; a 1 MB query works and stays bounded.

        A failure is an error on either, or a store that tries to use every
        word of a huge query.
        """
        owner = SourceOwner("t-huge")
        await add_document(recall_store, owner, "d", "papaya export rules")
        scope = _scope(owner)
        assert await _discover(recall_store, scope, "") == []
        assert await _discover(recall_store, scope, "   \n") == []
        huge = "papaya " + " ".join(f"w{i}" for i in range(150_000))
        assert len(await _discover(recall_store, scope, huge)) <= 8

    # -- cancellation ---------------------------------------------------------------------------

    async def test_cancelled_calls_raise_and_write_nothing(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """A cancelled or expired context raises ``OperationCancelledError`` and writes nothing.

        A failure means work started (a document written) although the
        context was already cancelled or past its deadline.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "document_indexing")
        owner = SourceOwner("t-cancel")
        for ctx in (expired_context(), past_deadline_context()):
            with pytest.raises(OperationCancelledError):
                await recall_store.index_document(owner, "d", "durian", ctx)
        assert await _discover(recall_store, _scope(owner), "durian") == []
        with pytest.raises(OperationCancelledError):
            await recall_store.open(_scope(owner), RecallLimits(), expired_context())

    async def test_one_adapter_serves_threads_each_with_its_own_event_loop(
        self, recall_store: RecallStore, add_document: AddDocument, anyio_backend_name: str
    ) -> None:
        """One recall store object, used at once from four threads that each run an event loop, loses nothing.

        Hosts share one runtime, and so one adapter, between threads with loops
        of their own (the OpenAI Agents SDK's concurrent-access pattern). Each
        thread indexes a document for its own owner and discovers it through a
        recall session of its own; this test's loop, which used the store
        first, finds every one afterwards.

        A failure, or a hang reported after 60 s, means the adapter keeps a
        loop-bound object from one call to the next (an anyio limiter or lock,
        an ``asyncio.Lock``, a client whose connections belong to one loop):
        keep one per loop (``PerLoop`` from ``plugin_api``) or use thread locks
        (docs/sync.md, "Writing adapters that serve any loop").
        """
        await add_document(recall_store, SourceOwner("t-loops"), "first", "kestrel harbour, this loop first")

        async def work(i: int) -> int:
            owner = SourceOwner(f"t-loop-{i}")
            await add_document(recall_store, owner, f"d{i}", f"kestrel harbour seen by thread {i}")
            return len(await _discover(recall_store, _scope(owner), "kestrel harbour"))

        assert await from_threads(work, anyio_backend_name) == [1, 1, 1, 1], "a loop's document is lost"
        for i in range(4):
            assert len(await _discover(recall_store, _scope(SourceOwner(f"t-loop-{i}")), "kestrel")) == 1

    async def test_close_after_a_cancelled_call_and_twice(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """``close`` succeeds after a cancelled call and again after that; the store still works.

        A failure means a session left unusable resources behind or raised
        from ``close`` (the engine closes on every path, cancellation included).
        """
        owner = SourceOwner("t-close")
        await add_document(recall_store, owner, "d", "lychee facts")
        session = await _session(recall_store, _scope(owner))
        with pytest.raises(OperationCancelledError):
            await session.discover("lychee", 4, expired_context())
        await session.close()
        await session.close()
        assert len(await _discover(recall_store, _scope(owner), "lychee")) == 1

    # -- archive indexing -----------------------------------------------------------------------

    async def test_archived_groups_round_trip_through_seek(self, recall_store: RecallStore) -> None:
        """Indexed archived groups are discoverable in their session and come back whole from ``seek_groups``.

        ``seek_groups`` returns complete groups with ``seq >= start``,
        ascending, at most ``max_groups``, equal to what was indexed.
        Re-indexing is idempotent. A failure is a lost, reordered, altered or
        over-returned group.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        require_flag(recall_store, RecallCapabilities, "recall store", "canonical_archive_reads")
        key = SessionKey("t-arch", "u", "s")
        groups = [rich_group(0, key, "papaya seed"), plain_group(1), rich_group(2, key, "plum tree")]
        receipts = [ArchiveReceipt(g.seq, g.digest, "x") for g in groups]
        await recall_store.index_groups(key, groups, receipts, OpContext.with_timeout(10.0))
        await recall_store.index_groups(key, groups, receipts, OpContext.with_timeout(10.0))
        got = list(await recall_store.seek_groups(key, 1, 10, OpContext.with_timeout(10.0)))
        assert got == groups[1:]
        assert list(await recall_store.seek_groups(key, 0, 2, OpContext.with_timeout(10.0))) == groups[:2]
        scope = Scope("t-arch", "u", "s")
        assert len(await _discover(recall_store, scope, "plum")) == 1
        assert await _discover(recall_store, Scope("t-arch", "u", "other"), "plum") == []

    async def test_unindexed_groups_lists_exactly_the_missing_seqs(self, recall_store: RecallStore) -> None:
        """``unindexed_groups`` lists the seqs below ``end_seq`` with no indexed group: ascending, bounded.

        With ``start_seq`` it lists none below it (where a session's groups
        begin after retention erased the oldest).

        Optional: a store that keeps the port's default (``None``, it cannot
        tell) skips this test. The engine indexes what it lists from the
        archive, so a failure means archived groups the index lacks are
        never caught up, or groups it holds are indexed again and again.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        if type(recall_store).unindexed_groups is RecallStore.unindexed_groups:
            pytest.skip("the store does not report unindexed groups (optional)")
        key = SessionKey("t-gaps", "u", "s")
        groups = [plain_group(seq) for seq in (0, 1, 4, 6)]
        receipts = [ArchiveReceipt(g.seq, g.digest, "x") for g in groups]
        await recall_store.index_groups(key, groups, receipts, OpContext.with_timeout(10.0))

        async def gaps(end_seq: int, max_groups: int, session: str = "s", start_seq: int = 0) -> list[int]:
            where = SessionKey("t-gaps", "u", session)
            ctx = OpContext.with_timeout(10.0)
            answer = await recall_store.unindexed_groups(where, end_seq, max_groups, ctx, start_seq=start_seq)
            return list(answer or ())

        assert await gaps(9, 16) == [2, 3, 5, 7, 8]
        assert await gaps(9, 2) == [2, 3]
        assert await gaps(2, 16) == []
        assert await gaps(3, 16, "other") == [0, 1, 2]  # another session's groups are not this one's
        # After retention erased the oldest groups the engine asks from where the archive begins.
        assert await gaps(9, 16, start_seq=3) == [3, 5, 7, 8]
        assert await gaps(9, 16, "other", start_seq=6) == [6, 7, 8]
        assert await gaps(4, 16, start_seq=5) == []

    async def test_mismatched_receipts_are_refused_and_nothing_is_written(
        self, recall_store: RecallStore
    ) -> None:
        """``index_groups`` refuses receipts that do not match their groups and writes none of the batch.

        A failure means a group was indexed under a digest the archive never
        gave, so ``seek_groups`` could not check it.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        key = SessionKey("t-receipts", "u", "s")
        groups = [plain_group(0), plain_group(1)]
        bad = [ArchiveReceipt(0, groups[0].digest, "x"), ArchiveReceipt(1, "sha256:" + "0" * 64, "x")]
        with pytest.raises((InvalidArgumentError, AgentiumError)):
            await recall_store.index_groups(key, groups, bad, OpContext.with_timeout(10.0))
        with pytest.raises((InvalidArgumentError, AgentiumError)):
            await recall_store.index_groups(key, groups, bad[:1], OpContext.with_timeout(10.0))
        if _caps(recall_store).canonical_archive_reads:
            assert list(await recall_store.seek_groups(key, 0, 10, OpContext.with_timeout(10.0))) == []

    # -- hybrid recall: vectors and fused discovery ---------------------------------------------

    async def test_vectors_find_a_source_that_shares_no_word_with_the_query(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """With vectors, ``discover_hybrid`` finds a source by its vector alone, most similar first.

        A failure means the vector half of hybrid discovery is missing: a
        question worded differently from the evidence finds nothing, or the
        less similar source ranks first.
        """
        _require_hybrid(recall_store)
        owner = SourceOwner("t-vec")
        ledger = await add_document(recall_store, owner, "ledger", "quarterly ledger figures")
        roses = await add_document(recall_store, owner, "roses", "garden roses bloom")
        await _index(recall_store, (ledger, _axis(0)), (roses, _axis(1)))
        found = await _hybrid(recall_store, _scope(owner), "zebra xylophone", [0.8, 0.6, 0.0, 0.0])
        assert [c.ref.source_id for c in found][:2] == [ledger.source_id, roses.source_id], found

    async def test_hybrid_discovery_keeps_lexical_matches_and_its_bounds(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """``discover_hybrid`` still returns word matches, and honours ``max_candidates`` and its byte budget.

        A failure means fusion dropped the lexical half (a source matching
        the query's words but not its vector is lost), or returned more
        candidates or discovery bytes than allowed.
        """
        _require_hybrid(recall_store)
        owner = SourceOwner("t-vec-lex")
        refs = [
            await add_document(recall_store, owner, f"r{i}", f"garden roses number {i}") for i in range(4)
        ]
        await _index(recall_store, *((ref, _axis(0)) for ref in refs))
        found = await _hybrid(recall_store, _scope(owner), "roses", [0.0, 0.0, 1.0, 0.0])
        assert {c.ref.source_id for c in found} == {r.source_id for r in refs}, found
        assert len(await _hybrid(recall_store, _scope(owner), "roses", [1.0, 0.0, 0.0, 0.0], n=2)) <= 2
        one = found[0].discovery_bytes
        capped = await _hybrid(recall_store, _scope(owner), "roses", [1.0, 0.0, 0.0, 0.0], remaining=one)
        assert sum(c.discovery_bytes for c in capped) <= one, capped

    async def test_hybrid_discovery_never_crosses_scopes(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """A source of another tenant is never returned by ``discover_hybrid``, even with the query's vector.

        A failure means the vector scan or the fusion ignores the scope: a
        foreign source that is the nearest neighbour leaks (R13).
        """
        _require_hybrid(recall_store)
        mine, theirs = SourceOwner("t-vec-a"), SourceOwner("t-vec-b")
        own = await add_document(recall_store, mine, "note", "harbour notes")
        foreign = await add_document(recall_store, theirs, "secret", "harbour secrets")
        await _index(recall_store, (own, _axis(1)), (foreign, _axis(0)))
        found = await _hybrid(recall_store, _scope(mine), "harbour", [1.0, 0.0, 0.0, 0.0])
        assert foreign.source_id not in {c.ref.source_id for c in found}, found
        assert all(c.owner.visible_to(_scope(mine)) for c in found)
        assert own.source_id in {c.ref.source_id for c in found}

    async def test_vectors_of_another_model_are_refused_and_nothing_is_mixed(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """A vector of another model is refused, indexing or querying, with ``EmbeddingModelMismatchError``.

        A failure means the store mixed two vector spaces (their similarities
        mean nothing together) or changed its vectors when it refused.
        """
        _require_hybrid(recall_store)
        owner = SourceOwner("t-vec-model")
        ref = await add_document(recall_store, owner, "doc", "quarterly ledger figures")
        await _index(recall_store, (ref, _axis(0)))
        other = EmbeddingModel("contract-other", _MODEL.dimension)
        stranger = Vector.normalized(other, [1.0, 0.0, 0.0, 0.0])
        with pytest.raises(EmbeddingModelMismatchError):
            await recall_store.index_vectors([SourceVector(ref, stranger)], OpContext.with_timeout(10.0))
        session = await _session(recall_store, _scope(owner))
        try:
            with pytest.raises(EmbeddingModelMismatchError):
                await session.discover_hybrid("zebra", stranger, 8, OpContext.with_timeout(10.0))
        finally:
            await session.close()
        found = await _hybrid(recall_store, _scope(owner), "zebra", [1.0, 0.0, 0.0, 0.0])
        assert [c.ref.source_id for c in found] == [ref.source_id]

    async def test_stale_vectors_are_skipped_and_dropped_with_their_revision(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """A vector for another revision is not stored, and a changed source loses its old vector.

        A failure means a vector computed from old text can find the new
        text (or a deleted source's vector lingers): evidence found for
        words it no longer holds.
        """
        _require_hybrid(recall_store)
        owner = SourceOwner("t-vec-stale")
        ref = await add_document(recall_store, owner, "doc", "quarterly ledger figures")
        stale = SourceRef(ref.source_id, ref.revision + "-old")
        assert await _index(recall_store, (stale, _axis(0))) == 0
        assert await _hybrid(recall_store, _scope(owner), "zebra", [1.0, 0.0, 0.0, 0.0]) == []
        assert await _index(recall_store, (ref, _axis(0))) == 1
        await add_document(recall_store, owner, "doc", "the garden is new")
        assert await _hybrid(recall_store, _scope(owner), "zebra", [1.0, 0.0, 0.0, 0.0]) == []

    #: The vector space of the hybrid tests: four axes, so each test plants exactly the similarities it needs.
    # -- colliding ids, corruption, undeclared operations ----------------------------------------

    async def test_colliding_owners_stay_apart(
        self, recall_store: RecallStore, add_document: AddDocument
    ) -> None:
        """Owners whose naive keys collide (``COLLIDING_SOURCE_OWNERS``) stay apart in every scoped call.

        Both owners of each pair index a document with the same id and words.
        Each scope discovers exactly the documents its owner rules allow, its
        own included; a read of any other returns nothing and validation
        says ``forbidden``; deleting the document as the other owner of the
        pair deletes nothing. A failure means keys are built by joining ids
        (tenant ``a`` + user ``b/c`` is tenant ``a/b`` + user ``c``), or an
        absent id is written as a marker another id can spell.
        """
        refs: dict[SourceOwner, SourceRef] = {}
        for one, other in COLLIDING_SOURCE_OWNERS:
            for owner in (one, other):
                refs[owner] = await add_document(recall_store, owner, "doc", "shared collision words quokka")
        owners = list(refs)
        for owner in owners:
            scope = _scope(owner)
            found = {c.ref.source_id: c for c in await _discover(recall_store, scope, "quokka collision", 32)}
            expected = {refs[o].source_id for o in owners if o.visible_to(scope)}
            assert set(found) == expected, (
                f"discover in {scope} found {sorted(found)}, expected {sorted(expected)}"
            )
            for candidate in found.values():
                assert source_owner(candidate.ref.source_id) == candidate.owner
            foreign = [refs[o] for o in owners if not o.visible_to(scope)][:16]
            session = await _session(recall_store, scope)
            try:
                assert list(await session.read(foreign, 4096, OpContext.with_timeout(10.0))) == []
                checked = await session.validate(foreign, OpContext.with_timeout(10.0))
                assert {v.status for v in checked} <= {ValidationStatus.FORBIDDEN}
            finally:
                await session.close()
        if not _caps(recall_store).document_indexing:
            return
        for one, other in COLLIDING_SOURCE_OWNERS:
            for actor, victim in ((one, other), (other, one)):
                deleted = await recall_store.delete_document(actor, "doc", OpContext.with_timeout(10.0))
                assert deleted is True, f"{actor}'s own document was not there to delete"
                after = await _discover(recall_store, _scope(victim), "quokka", 32)
                assert refs[victim].source_id in {c.ref.source_id for c in after}, (
                    f"deleting {actor}'s document deleted {victim}'s"
                )
                refs[actor] = await add_document(recall_store, actor, "doc", "shared collision words quokka")

    async def test_colliding_sessions_stay_apart_in_index_and_seek(self, recall_store: RecallStore) -> None:
        """Session keys whose naive keys collide (``COLLIDING_SESSION_KEYS``) index and seek their own groups.

        Runs with ``archive_indexing`` and ``canonical_archive_reads``. Both
        sessions of each pair index a group 0 with different content:
        ``seek_groups`` of each returns its own, and discovery in each
        session finds only its own group. A failure means group keys join
        tenant, user and session without an injective encoding.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        require_flag(recall_store, RecallCapabilities, "recall store", "canonical_archive_reads")
        indexed: dict[SessionKey, MessageGroup] = {}
        for i, pair in enumerate(COLLIDING_SESSION_KEYS):
            for side, key in enumerate(pair):
                group = rich_group(0, key, f" wombat pair {i} side {side}")
                receipt = ArchiveReceipt(0, group.digest, "x")
                await recall_store.index_groups(key, [group], [receipt], OpContext.with_timeout(10.0))
                indexed[key] = group
        for key, group in indexed.items():
            got = list(await recall_store.seek_groups(key, 0, 5, OpContext.with_timeout(10.0)))
            assert got == [group], f"seek_groups of {key} returned another session's groups"
            scope = Scope(key.tenant, key.user, key.session)
            found = await _discover(recall_store, scope, "wombat", 8)
            assert [c.ref.source_id for c in found] == [group_source_id(key, 0)]

    async def test_seek_rechecks_digests_of_indexed_groups(
        self, recall_store: RecallStore, corrupt_indexed_group: CorruptStored | None
    ) -> None:
        """An indexed group changed behind the store's back makes ``seek_groups`` raise ``ArchiveError``.

        Runs with ``archive_indexing``, ``canonical_archive_reads`` and a
        ``corrupt_indexed_group`` fixture. One letter of a message is changed
        (still valid data, only its digest disagrees). A failure means the
        seek returned damaged history instead of checking the receipt digest
        kept at indexing; raise ``ArchiveCorruptError`` (an ``ArchiveError``).
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "archive_indexing")
        require_flag(recall_store, RecallCapabilities, "recall store", "canonical_archive_reads")
        if corrupt_indexed_group is None:
            pytest.skip("no corrupt_indexed_group fixture: seek digest re-checks are not tested")
        key = SessionKey("t-corrupt", "u", "s")
        groups = [plain_group(0), plain_group(1, " corruption-target"), plain_group(2)]
        receipts = [ArchiveReceipt(g.seq, g.digest, "x") for g in groups]
        await recall_store.index_groups(key, groups, receipts, OpContext.with_timeout(10.0))
        await call_hook(
            corrupt_indexed_group, key, 1, replace_once(b"corruption-target", b"corruption-tarGet")
        )
        for attempt in ("first", "second"):
            with pytest.raises(ArchiveError):
                got = list(await recall_store.seek_groups(key, 0, 10, OpContext.with_timeout(10.0)))
                pytest.fail(f"{attempt} seek over a damaged group returned {got!r}")
        assert list(await recall_store.seek_groups(key, 0, 1, OpContext.with_timeout(10.0))) == groups[:1]

    async def test_undeclared_operations_are_refused(self, recall_store: RecallStore) -> None:
        """Every optional operation the store does not declare is refused and writes nothing.

        ``seek_groups`` without ``canonical_archive_reads``; ``index_document``
        and ``delete_document`` without ``document_indexing``;
        ``index_groups`` without ``archive_indexing``; ``health`` without
        ``health_check``; ``index_vectors`` without ``vector_indexing``;
        ``discover_hybrid`` without ``hybrid_discovery``. ``NotImplementedError`` (which
        ``UnsupportedOperationError`` is) or ``CapabilityError`` is accepted.
        A failure means the store answers what it does not declare: the
        engine then never uses it, and its tests were skipped.
        """
        caps = _caps(recall_store)
        key = SessionKey("t-undeclared", "u", "s")
        owner = SourceOwner("t-undeclared")
        group = plain_group(0)
        calls: dict[str, list[Callable[[], Awaitable[object]]]] = {
            "canonical_archive_reads": [
                lambda: recall_store.seek_groups(key, 0, 5, OpContext.with_timeout(10.0)),
            ],
            "document_indexing": [
                lambda: recall_store.index_document(owner, "d", "numbat", OpContext.with_timeout(10.0)),
                lambda: recall_store.delete_document(owner, "d", OpContext.with_timeout(10.0)),
            ],
            "archive_indexing": [
                lambda: recall_store.index_groups(
                    key, [group], [ArchiveReceipt(0, group.digest, "x")], OpContext.with_timeout(10.0)
                ),
            ],
            "health_check": [lambda: recall_store.health(OpContext.with_timeout(10.0))],
            "vector_indexing": [lambda: recall_store.index_vectors([], OpContext.with_timeout(10.0))],
            "hybrid_discovery": [lambda: _hybrid_once(recall_store, Scope("t-undeclared", "u", "s"))],
        }
        undeclared = [flag for flag in calls if not getattr(caps, flag)]
        if not undeclared:
            pytest.skip("the store declares every optional recall capability")
        for flag in undeclared:
            for call in calls[flag]:
                with pytest.raises((NotImplementedError, CapabilityError)):
                    answer = await call()
                    pytest.fail(f"the store does not declare {flag} but answered {answer!r}")
        assert await _discover(recall_store, Scope("t-undeclared", "u", "s"), "numbat") == []


_MODEL = EmbeddingModel("contract-axes", 4)


def _axis(i: int) -> Vector:
    values = [0.0] * _MODEL.dimension
    values[i] = 1.0
    return Vector.normalized(_MODEL, values)


async def _hybrid_once(store: RecallStore, scope: Scope) -> object:
    session = await _session(store, scope)
    try:
        return await session.discover_hybrid("numbat", _axis(0), 4, OpContext.with_timeout(10.0))
    finally:
        await session.close()


def _require_hybrid(store: RecallStore) -> None:
    caps = _caps(store)
    if not (caps.vector_indexing and caps.hybrid_discovery):
        pytest.skip("recall store does not declare vector_indexing and hybrid_discovery")


async def _index(store: RecallStore, *pairs: tuple[SourceRef, Vector]) -> int:
    entries = [SourceVector(ref, vector) for ref, vector in pairs]
    return await store.index_vectors(entries, OpContext.with_timeout(10.0))


async def _hybrid(
    store: RecallStore,
    scope: Scope,
    query: str,
    values: list[float],
    n: int = 8,
    remaining: int | None = None,
) -> list[Candidate]:
    session = await _session(store, scope)
    try:
        ctx = OpContext.with_timeout(10.0, remaining_bytes=remaining)
        return list(await session.discover_hybrid(query, Vector.normalized(_MODEL, values), n, ctx))
    finally:
        await session.close()
