"""A host document whose index call was abandoned past its deadline, landing during an erasure.

The store's ``index_document`` blocks in a worker thread that ignores its
cancellation (a stuck client call): ``index_document`` times out and walks
away, so the erasure fence's second read never runs. An erasure in the same
process covering the document's owner waits for that call (bounded by
``settle_timeout_s``) as it does for a session's late writes, then erases and
verifies the recall store: the document is not indexed after it completes.
"""

from __future__ import annotations

import threading

import anyio
import pytest

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureState,
    HarnessRuntime,
    OperationTimeoutError,
    OperatorAttestation,
    SourceOwner,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.limits import RuntimeLimits
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, SourceRef, document_source_id

pytestmark = pytest.mark.anyio

OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
ANA_DOC = SourceOwner("acme", "ana")


class StuckIndex(InMemoryRecallStore):
    """Its ``index_document`` blocks in a worker thread until released, then indexes (a stuck PUT)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.landed = threading.Event()
        self.deleted = anyio.Event()

    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        def put() -> SourceRef:  # the blocking client call: it indexes once released, whatever the deadline
            self.release.wait(30.0)
            write = InMemoryRecallStore.index_document(
                self, owner, doc_id, text, OpContext.with_timeout(30.0), title=title
            )
            try:
                write.send(None)  # the in-memory write never awaits: it runs to its end here
            except StopIteration as done:
                self.landed.set()
                ref: SourceRef = done.value
                return ref
            raise AssertionError("the in-memory index awaited")  # pragma: no cover

        return await anyio.to_thread.run_sync(put)  # not abandonable: the engine must walk away from it

    async def delete_document(self, owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        existed = await super().delete_document(owner, doc_id, ctx)
        self.deleted.set()
        return existed


def _runtime(
    store: StuckIndex, settle_s: float, sessions: InMemorySessionStore | None = None
) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions or InMemorySessionStore(),
        recall=store,
        # Generous for every call that must succeed (the erasures, their resumption): only the stuck
        # index is meant to time out, and it has a deadline of its own (``_stuck_index``).
        limits=RuntimeLimits(op_timeout_s=30.0, settle_timeout_s=settle_s),
    )


async def _held(store: InMemoryRecallStore, owner: SourceOwner, doc_id: str) -> bool:
    return bool(await InMemoryRecallStore.delete_document(store, owner, doc_id, OpContext.with_timeout(30.0)))


async def _stuck_index(runtime: HarnessRuntime) -> None:
    with pytest.raises(OperationTimeoutError) as info:
        await runtime.index_document(
            ANA_DOC, "vpn.md", "the VPN certificate expires on March 3rd.", timeout_s=0.3
        )
    assert info.value.abandoned  # still running in its thread: the fence's second read never ran


async def test_an_erasure_waits_for_an_abandoned_document_index_and_erases_what_landed() -> None:
    store = StuckIndex()
    async with _runtime(store, settle_s=30.0) as runtime:
        await _stuck_index(runtime)
        assert not store.landed.is_set()

        async def release_later() -> None:
            await anyio.sleep(0.3)
            store.release.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(release_later)
            result = await runtime.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
        assert result.tombstone is not None and result.tombstone.state is ErasureState.COMPLETE
        # Whenever the late index lands (during the erasure, which waited for it), it is not kept.
        assert await anyio.to_thread.run_sync(store.landed.wait, 30.0)
        assert not await _held(store, ANA_DOC, "vpn.md"), "a document outlived the erasure of its owner"


async def test_an_erasure_stops_pending_while_a_document_index_is_still_running() -> None:
    store = StuckIndex()
    async with _runtime(store, settle_s=0.3) as runtime:
        await _stuck_index(runtime)
        # Another owner's stuck write is not waited for: only the target's own.
        with pytest.raises(ErasureIncompleteError, match="still running"):
            await runtime.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
        other = await runtime.erase(EraseTarget.user("acme", "bob"), reason="DSR", attestation=OPERATOR)
        assert other.tombstone is not None
        store.release.set()
        assert await anyio.to_thread.run_sync(store.landed.wait, 30.0)  # the late index landed
        (resumed,) = await runtime.resume_erasures(OPERATOR)
        assert resumed.tombstone is not None
        assert not await _held(store, ANA_DOC, "vpn.md")


async def test_an_abandoned_document_index_landing_after_another_process_erased_takes_itself_back() -> None:
    # Another process's erasure cannot wait for this process's stuck call: the late landing runs the
    # fence's second read itself and deletes the document the erasure covers.
    store, sessions = StuckIndex(), InMemorySessionStore()
    async with _runtime(store, 10.0, sessions) as writer, _runtime(store, 10.0, sessions) as eraser:
        await _stuck_index(writer)
        result = await eraser.erase(EraseTarget.user("acme", "ana"), reason="DSR", attestation=OPERATOR)
        assert result.tombstone is not None and result.tombstone.state is ErasureState.COMPLETE
        store.release.set()
        assert await anyio.to_thread.run_sync(store.landed.wait, 30.0)
        source = document_source_id(ANA_DOC, "vpn.md")
        with anyio.move_on_after(30.0):
            await store.deleted.wait()  # the take-back runs on the writer's loop, after the landing
        assert source not in store._sources, "a document outlived the erasure of its owner"
