"""A host document an erasure took never reaches the model from a recall store the erasure missed.

An operator erases user ana from a process (here: a runtime over the same
session store and archive) that has no recall store configured: the erasure
completes, and its tombstone names the stores that took part — no recall
store. The recall store the serving runtime uses still holds ana's document.
When ana runs again (a new session), recall finds the document; without the
check its text went to the model. With it, the document is hidden, with the
WARNING diagnostic ``recall_document_erased``, a WARNING log and no content
in either.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from _recall_erasure_support import ANA, QUESTION
from _recall_erasure_support import SourceRecording as Recording

from agentium_harness import (
    EraseTarget,
    ErasureState,
    OperatorAttestation,
    SourceOwner,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import RecallStore

pytestmark = pytest.mark.anyio

OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")


@pytest.fixture(params=["memory", "sqlite"])
async def recall(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RecallStore]:
    store: Any = (
        InMemoryRecallStore()
        if request.param == "memory"
        else SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "r.db")))
    )
    yield store
    await store.aclose()


def _pair(recall: RecallStore, provider: Recording, *, eraser_recall: bool) -> tuple[Any, Any]:
    """The serving runtime (with ``recall``) and the eraser's (with it only if ``eraser_recall``)."""
    archive, sessions = InMemoryArchive(), InMemorySessionStore()
    serving = create_harness_runtime(
        provider=provider, archive=archive, session_store=sessions, recall=recall
    )
    eraser = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=sessions,
        recall=recall if eraser_recall else None,
    )
    return serving, eraser


async def _erase_ana(eraser: Any) -> Any:
    done = await eraser.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
    assert done.tombstone is not None and done.tombstone.state is ErasureState.COMPLETE
    return done.tombstone


async def test_a_document_of_a_user_erased_without_the_recall_store_is_hidden(
    recall: RecallStore, caplog: pytest.LogCaptureFixture
) -> None:
    provider = Recording()
    serving, eraser = _pair(recall, provider, eraser_recall=False)
    try:
        await serving.index_document(SourceOwner("acme", "ana"), "vpn.md", "VPN certificate qzexpiresq March")
        await serving.index_document(SourceOwner("acme"), "wide.md", "VPN certificate tenant-wide note")
        await serving.run(ANA, "s1", QUESTION)
        assert any("qzexpiresq" in s for s in provider.sources)  # recall finds it before the erasure
        tombstone = await _erase_ana(eraser)
        assert tombstone.store("recall") is None  # the recall store did not take part
        provider.sources.clear()
        caplog.set_level(logging.WARNING)
        result = await serving.run(ANA, "s2", QUESTION)
        assert result.committed
        assert not [s for s in provider.sources if "qzexpiresq" in s], provider.sources
        assert any("tenant-wide note" in s for s in provider.sources)  # not the user erasure's
        [note] = [d for d in result.diagnostics if d.code == "recall_document_erased"]
        assert note.severity.value == "warning" and tombstone.erasure_id in note.message
        assert "qzexpiresq" not in note.message
        warned = [r for r in caplog.records if "hidden" in r.getMessage() and r.levelno == logging.WARNING]
        assert warned and not [r for r in caplog.records if "qz" in r.getMessage()]
    finally:
        await serving.aclose()
        await eraser.aclose()


async def test_a_document_indexed_after_an_erasure_the_recall_store_took_part_in_is_shown(
    recall: RecallStore,
) -> None:
    """The guard: the last erasure of ana reached the recall store, so what it holds now is new."""
    provider = Recording()
    serving, eraser = _pair(recall, provider, eraser_recall=True)
    try:
        await serving.index_document(SourceOwner("acme", "ana"), "vpn.md", "VPN certificate qzoldq March")
        tombstone = await _erase_ana(eraser)
        assert tombstone.store("recall") is not None
        await serving.index_document(SourceOwner("acme", "ana"), "vpn.md", "VPN certificate qznewq April")
        result = await serving.run(ANA, "s2", QUESTION)
        assert any("qznewq" in s for s in provider.sources), provider.sources
        assert not [s for s in provider.sources if "qzoldq" in s]
        assert not result.has("recall_document_erased")
    finally:
        await serving.aclose()
        await eraser.aclose()
