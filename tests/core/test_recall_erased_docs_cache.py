"""The recall erased-documents check keeps only erasures that can take a document (docs/erasure.md).

:meth:`SessionGroups.finished_erasures` is cached per session store, by
session and ledger revision, up to a fixed number of sessions. A groups
erasure (retention, a forgotten fact's sources) takes no document
(:meth:`EraseTarget.covers_owner`), yet a long-lived session gathers one per
retention run: kept in the cache, each session's entry grew with its
retention history, without bound. Only erasures that can take a document
are kept.
"""

from __future__ import annotations

import pytest
from _recall_erasure_support import ANA, QUESTION
from _recall_erasure_support import SourceRecording as Recording

import agentium_harness._engine.recall_readback as readback
from agentium_harness import (
    EraseTarget,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
    SourceOwner,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")


async def test_the_cache_of_finished_erasures_holds_no_groups_erasure() -> None:
    store, recall = InMemorySessionStore(), InMemoryRecallStore()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=store,
        recall=recall,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        retention=RetentionPolicy(max_archived_groups=1),
    )
    try:
        await runtime.run(ANA, "s1", "turn 0")
        await runtime.run(ANA, "s1", "turn 1")
        for n in range(2, 5):
            await runtime.run(ANA, "s1", f"turn {n}")
            # A retention run: one groups erasure of s1 each time (its archive is past the policy).
            done = await runtime.apply_retention(OPERATOR)
            assert len(done.erasures) == 1, done
        await runtime.index_document(SourceOwner("acme", "ana"), "vpn.md", "VPN certificate expires March")
        result = await runtime.run(ANA, "s1", QUESTION)
        assert result.committed
        cached = readback._FINISHED.get(store)
        assert cached, "the run's recall round read the finished erasures (the test's premise)"
        held = [r for records in cached.values() for r in records]
        assert not [r for r in held if r.target.groups], held
    finally:
        await runtime.aclose()


async def test_a_cache_filled_before_an_erasure_does_not_show_its_documents_after() -> None:
    """Ana's session's cache entry is filled (no erasure of her yet); then she is erased without recall."""
    store, recall = InMemorySessionStore(), InMemoryRecallStore()
    archive = InMemoryArchive()
    provider = Recording()
    serving = create_harness_runtime(provider=provider, archive=archive, session_store=store, recall=recall)
    eraser = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True), archive=archive, session_store=store
    )
    try:
        await serving.run(VerifiedIdentity("acme", "bob", "test-auth"), "s1", "bob's")
        await eraser.erase(EraseTarget.user("acme", "bob"), reason="DSR", attestation=OPERATOR)  # a ledger
        await serving.index_document(SourceOwner("acme", "ana"), "vpn.md", "VPN certificate qzexpiresq March")
        await serving.run(ANA, "s1", QUESTION)
        assert any("qzexpiresq" in s for s in provider.sources)
        assert readback._FINISHED.get(store), "the cache was filled (the test's premise)"
        done = await eraser.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
        assert done.tombstone is not None and done.tombstone.store("recall") is None
        provider.sources.clear()
        result = await serving.run(ANA, "s1", QUESTION)  # same session: a new key by the ledger only
        assert not [s for s in provider.sources if "qzexpiresq" in s], provider.sources
        assert result.has("recall_document_erased")
    finally:
        await serving.aclose()
        await eraser.aclose()
