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
re-checks the digest of what it returns. The optional
``corrupt_indexed_text`` fixture returns ``corrupt(ref, transform)``
rewriting the stored text of an indexed document in place; with it the
suite checks that ``read`` never returns text edited in the backend.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import pytest

from .._errors import AgentiumError, CapabilityError, OperationCancelledError
from .._history import estimate_tokens
from .._ports import OpContext, is_port_stub
from .._ports.archive import ArchiveReceipt
from .._ports.recall import (
    Completeness,
    OmittedContext,
    RecallCapabilities,
    RecallLimits,
    RecallStore,
    SourceOwner,
    SourceRef,
    ValidationStatus,
    document_source_id,
    source_owner,
)
from .._scope import Scope, SessionKey
from ._recall_helpers import AddDocument
from ._recall_helpers import discover as _discover
from ._recall_helpers import open_session as _session
from ._recall_helpers import recall_caps as _caps
from ._recall_helpers import scope_of as _scope
from ._suite import (
    ContractSuite,
    CorruptStored,
    call_hook,
    expired_context,
    from_threads,
    past_deadline_context,
    plain_group,
    require_flag,
)
from .helpers import COLLIDING_SOURCE_OWNERS, HOSTILE_IDS, replace_once
from .index_erasure_contract import RecallErasureTests
from .recall_archive_contract import RecallArchiveTests
from .recall_hybrid_contract import RecallHybridTests
from .recall_hybrid_contract import hybrid_once as _hybrid_once

__all__ = ["HOSTILE_IDS", "RecallStoreContract"]


# The parts come after the suite's own tests in every listing, in this order: archive, hybrid, erasure
# (``standard_tests`` walks the bases from the last).
class RecallStoreContract(RecallErasureTests, RecallHybridTests, RecallArchiveTests, ContractSuite):
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

    @pytest.fixture
    def corrupt_indexed_text(self) -> CorruptStored | None:
        """Override to return ``corrupt(ref, transform)`` rewriting a document's stored text in place.

        ``transform`` takes and returns the text's UTF-8 bytes; the hook
        writes the result where the store keeps the text, bypassing the
        store (no revision, digest or index entry is updated).
        """
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

    async def test_text_edited_in_the_backend_is_never_read_as_evidence(
        self, recall_store: RecallStore, add_document: AddDocument, corrupt_indexed_text: CorruptStored | None
    ) -> None:
        """A document's text changed behind the store's back is never returned by ``read`` at its revision.

        Runs with ``document_indexing`` and a ``corrupt_indexed_text``
        fixture. One word of the stored text is changed (still valid text;
        the revision, as the store keeps it, is not). ``read`` must raise an
        ``AgentiumError`` (a typed error, as the SQLite store's
        ``SQLiteRecallError``) or leave the source out, on every call. A
        failure means ``read`` returns what it finds: anyone who can write
        the backend can put words into the model's evidence at a revision
        validation calls current. Check each text against its revision (or a
        digest kept with it at indexing) before returning it.
        """
        require_flag(recall_store, RecallCapabilities, "recall store", "document_indexing")
        if corrupt_indexed_text is None:
            pytest.skip("no corrupt_indexed_text fixture: reads of edited text are not tested")
        owner = SourceOwner("t-edited", "u")
        ref = await add_document(recall_store, owner, "ledger", "the intact ledger opens on monday")
        scope = _scope(owner)
        session = await _session(recall_store, scope)
        try:
            await session.discover("intact ledger", 5, OpContext.with_timeout(10.0))
            intact = list(await session.read([ref], 1000, OpContext.with_timeout(10.0)))
            assert [e.ref for e in intact] == [ref], "the intact document must be read before it is edited"
            await call_hook(corrupt_indexed_text, ref, replace_once(b"intact", b"FORGED"))
            for attempt in ("first", "second"):
                try:
                    got = list(await session.read([ref], 1000, OpContext.with_timeout(10.0)))
                except AgentiumError:
                    continue
                forged = [e.text for e in got if "FORGED" in e.text]
                assert not forged, f"{attempt} read returned text edited in the backend: {forged!r}"
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
