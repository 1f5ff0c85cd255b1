"""The hybrid recall tests of the recall store suite: :class:`RecallHybridTests`.

Part of :class:`~agentium_harness.testing.RecallStoreContract`; they run when
the store declares ``vector_indexing`` and ``hybrid_discovery``. They plant
vectors of a four-axis test model, so no embedder is involved.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from .._errors import EmbeddingModelMismatchError
from .._ports import OpContext
from .._ports.embedder import EmbeddingModel, Vector
from .._ports.recall import Candidate, RecallStore, SourceOwner, SourceRef, SourceVector
from .._scope import Scope
from ._recall_helpers import AddDocument
from ._recall_helpers import open_session as _session
from ._recall_helpers import recall_caps as _caps
from ._recall_helpers import scope_of as _scope

__all__ = ["RecallHybridTests", "hybrid_once"]


class RecallHybridTests:
    """The recall store's vectors and fused discovery; part of :class:`RecallStoreContract`."""

    __agentium_contract__: ClassVar[bool] = True
    __agentium_contract_part__: ClassVar[bool] = True

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
_MODEL = EmbeddingModel("contract-axes", 4)


def _axis(i: int) -> Vector:
    values = [0.0] * _MODEL.dimension
    values[i] = 1.0
    return Vector.normalized(_MODEL, values)


async def hybrid_once(store: RecallStore, scope: Scope) -> object:
    """One ``discover_hybrid`` call in ``scope`` (the undeclared-operations test expects it refused)."""
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
