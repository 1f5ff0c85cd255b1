"""What the document erasure fence finds is an event on the ``agentium.document.index`` span.

``runtime.index_document`` had no span of its own: its fence's WARNINGs (a
document deleted again, a write not confirmed against erasures) had no span
to land on. The host call is now one span, the root of its store calls, and
each outcome is an event on it with only ``agentium.document.write`` or
``error.type``: no ids, no content (docs/observability.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from _session_store_support import FailsAfterTheWrite
from _telemetry_support import Telemetered
from test_document_erasure_fence import ANA_DOC, OPERATOR, _hooked, _Hooks

from agentium_harness import EraseTarget, ErasureInProgressError, HarnessRuntime, create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

TEXT = "the VPN certificate expires on March 3rd"


def _runtime(sessions: InMemorySessionStore, recall: Any, t: Telemetered | None = None) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        recall=recall,
        telemetry=None if t is None else t.telemetry(),
    )


def _events(t: Telemetered) -> list[tuple[str, str, dict[str, Any]]]:
    return t.events("agentium.document.")


def _erasing_ana(eraser: HarnessRuntime) -> Callable[[], Awaitable[None]]:
    """What erases user ana on ``eraser`` (completed: checked), for a hook to run meanwhile."""

    async def erase_meanwhile() -> None:
        done = await eraser.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
        assert done.tombstone is not None

    return erase_meanwhile


def _private(t: Telemetered) -> None:
    carried = " ".join(t.carried())
    assert TEXT not in carried and "vpn.md" not in carried and "disk gone" not in carried


async def test_a_document_deleted_again_is_an_event_on_its_index_span() -> None:
    t, hooks, sessions = Telemetered(), _Hooks(), InMemorySessionStore()
    recall = _hooked(InMemoryRecallStore)()
    recall.hooks = hooks
    async with _runtime(sessions, recall, t) as writer, _runtime(sessions, recall) as eraser:
        hooks.before_index = _erasing_ana(eraser)
        with pytest.raises(ErasureInProgressError, match="was deleted: it was not kept"):
            await writer.index_document(ANA_DOC, "vpn.md", TEXT, timeout_s=30.0)
    taken = (
        "agentium.document.index",
        "agentium.document.taken_back",
        {"agentium.document.write": "answered"},
    )
    assert _events(t) == [taken]
    index = t.one("agentium.document.index")
    assert t.child_of("agentium.recall.delete", index), "the fence's delete is not under the index span"
    _private(t)


async def test_a_document_not_confirmed_against_erasures_is_an_event_with_its_error_type() -> None:
    t, hooks, sessions = Telemetered(), _Hooks(), FailsAfterTheWrite()
    recall = _hooked(InMemoryRecallStore)()
    recall.hooks = hooks

    async def fail_now() -> None:
        sessions.fail = True

    hooks.before_index = fail_now
    async with _runtime(sessions, recall, t) as writer:
        result = await writer.index_document(ANA_DOC, "vpn.md", TEXT, timeout_s=30.0)
        sessions.fail = False
    assert [d.code for d in result.diagnostics] == ["erasure_fence_unchecked"]
    unconfirmed = ("agentium.document.unconfirmed", {"error.type": "SessionStoreError"})
    assert [e[1:] for e in _events(t)] == [unconfirmed]
    assert _events(t)[0][0] == "agentium.document.index"
    _private(t)


async def test_a_document_that_could_not_be_deleted_again_is_an_event_with_its_error_type() -> None:
    t, hooks, sessions = Telemetered(), _Hooks(), InMemorySessionStore()

    class FailsToDelete(_hooked(InMemoryRecallStore)):  # type: ignore[misc]
        async def delete_document(self, owner: Any, doc_id: str, ctx: OpContext) -> bool:
            raise OSError("disk gone")

    recall = FailsToDelete()
    recall.hooks = hooks
    async with _runtime(sessions, recall, t) as writer, _runtime(sessions, recall) as eraser:
        hooks.before_index = _erasing_ana(eraser)
        with pytest.raises(ErasureInProgressError, match="deleting it failed"):
            await writer.index_document(ANA_DOC, "vpn.md", TEXT, timeout_s=30.0)
    failed = ("agentium.document.take_back_failed", {"error.type": "OSError"})  # the store's, as logged
    assert [e[1:] for e in _events(t)] == [failed]
    assert _events(t)[0][0] == "agentium.document.index"
    _private(t)
