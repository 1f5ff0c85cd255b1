"""``erasure_status`` lists a tenant's erasures in bounded pages (docs/erasure.md, "Erasure records").

It used to return every erasure the tenant ever completed in one tuple,
reading every page of its index: unbounded for a long-lived tenant. It now
returns at most ``limit`` records (100 by default) and a ``next_after``
cursor, reading a bounded part of the index per call; bad paging input is a
typed error and changes nothing.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from agentium_harness import (
    MAX_STATUS_LIMIT,
    ArchiveError,
    BlockingRuntime,
    EraseTarget,
    ErasureIncompleteError,
    ErasureKind,
    ErasureRecord,
    ErasureState,
    ErasureStatusPage,
    InvalidArgumentError,
    OperatorAttestation,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._ports.erasure import ErasureLedger
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    ERASURE_RECORDS_TENANT,
    OpContext,
    Scope,
    SessionSnapshot,
    seal_snapshot,
    snapshot_bytes,
)

pytestmark = pytest.mark.anyio

ALICE = VerifiedIdentity("acme", "alice", "test-auth")
OPS = VerifiedIdentity("acme", "ops-1", "sso")
OPERATOR = OperatorAttestation(OPS, "request 42")


class MeteredStore(InMemorySessionStore):
    """Counts the loads of erasure records (and their bytes)."""

    loads = 0
    read = 0

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        stored = await super().load(key, ctx)
        if key.tenant == ERASURE_RECORDS_TENANT:
            self.loads += 1
            if stored is not None:
                self.read += len(snapshot_bytes(stored.snapshot))
        return stored


class StallingArchive(InMemoryArchive):
    """An archive whose erase fails while ``stall`` is set: the erasure stays pending."""

    stall = False

    async def erase(self, target: Any, ctx: Any, **kw: Any) -> Any:
        if self.stall:
            raise ArchiveError("the archive is down")
        return await super().erase(target, ctx, **kw)


def _runtime(store: InMemorySessionStore, archive: InMemoryArchive | None = None) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive or InMemoryArchive(),
        session_store=store,
    )


async def _erase(rt: Any, session: str) -> str:
    result = await rt.erase(EraseTarget.session("acme", "alice", session), reason="dsr", attestation=OPERATOR)
    erasure_id: str = result.record.erasure_id
    return erasure_id


async def _pages(rt: Any, limit: int, target: EraseTarget | None = None) -> list[ErasureStatusPage]:
    pages: list[ErasureStatusPage] = []
    after = None
    while True:
        page = await rt.erasure_status(OPERATOR, target, after=after, limit=limit)
        pages.append(page)
        if (after := page.next_after) is None:
            return pages


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # 150 erasures: one event loop is enough
async def test_status_pages_are_bounded_and_together_list_every_erasure_once_in_order() -> None:
    store = MeteredStore()
    rt = _runtime(store)
    ids = [await _erase(rt, f"s{i}") for i in range(150)]
    # The default page: 100 records, and where the rest starts; the old callers' tuple still.
    first = await rt.erasure_status(OPERATOR)
    assert isinstance(first, tuple) and len(first) == 100 and first.next_after is not None
    assert [r.erasure_id for r in first] == ids[:100]
    store.loads = store.read = 0
    one = await rt.erasure_status(OPERATOR, after=first.next_after, limit=1)
    assert [r.erasure_id for r in one] == [ids[100]]
    # One page of one record reads the pending fence, the index head and one page: not 150 headers.
    assert store.loads <= 3, store.loads
    for limit in (1, 7, 64, 100, MAX_STATUS_LIMIT):
        pages = await _pages(rt, limit)
        assert all(len(p) <= limit for p in pages)
        assert [r.erasure_id for p in pages for r in p] == ids, limit
        assert pages[-1].next_after is None
    # A target's filter: the erasures overlapping it, whatever page of the index they are on.
    target = EraseTarget.session("acme", "alice", "s140")
    assert [r.erasure_id for p in await _pages(rt, 5, target) for r in p] == [ids[140]]
    await rt.aclose()


async def test_pending_erasures_come_after_the_finished_ones_and_page_too() -> None:
    archive = StallingArchive()
    rt = _runtime(InMemorySessionStore(), archive)
    done = [await _erase(rt, f"d{i}") for i in range(3)]
    archive.stall = True
    pending: list[str] = []
    for i in range(4):
        await rt.run(ALICE, f"p{i}", "hello")
        with pytest.raises(ErasureIncompleteError) as stopped:
            await _erase(rt, f"p{i}")
        assert stopped.value.record is not None
        pending.append(stopped.value.record.erasure_id)
    for limit in (1, 2, 3, 5, 100):
        pages = await _pages(rt, limit)
        listed = [r for p in pages for r in p]
        assert [r.erasure_id for r in listed] == [*done, *pending], limit
        assert [r.state for r in listed] == [ErasureState.COMPLETE] * 3 + [ErasureState.PENDING] * 4
    # A pending one that completes while a listing pages through the pending ones is not lost.
    page = await rt.erasure_status(OPERATOR, limit=4)
    assert [r.erasure_id for r in page] == [*done, pending[0]]
    archive.stall = False
    await rt.resume_erasures(OPERATOR)
    rest = await rt.erasure_status(OPERATOR, after=page.next_after, limit=100)
    assert sorted(r.erasure_id for r in rest) == sorted(pending[1:]) and rest.next_after is None
    await rt.aclose()


@pytest.mark.parametrize(
    ("after", "limit"),
    [
        (None, 0),
        (None, MAX_STATUS_LIMIT + 1),
        (None, 10**100),
        (None, True),
        (None, "10"),
        (None, None),
        ("garbage", 10),
        (5, 10),
        ("f1.0x", 10),
        ("p12.ab", 10),
        ("f1.0~12.zz", 10),
        ("f1.0~12.ff", 10),  # not UTF-8
        ("f" + "9" * 700, 10),
        ("f99.0", 10),  # past the end of the index
        ("f1.65", 10),  # past the end of the head
    ],
)
async def test_bad_paging_input_is_refused_typed_and_changes_nothing(after: object, limit: object) -> None:
    store = InMemorySessionStore()
    rt = _runtime(store)
    erased = await _erase(rt, "s1")
    with pytest.raises(InvalidArgumentError):
        await rt.erasure_status(OPERATOR, after=after, limit=limit)
    assert [r.erasure_id for r in await rt.erasure_status(OPERATOR)] == [erased]
    await rt.aclose()


def test_the_blocking_twin_pages_and_refuses_bad_input_alike() -> None:
    with BlockingRuntime(_runtime(InMemorySessionStore())) as blocking:
        ids = [
            blocking.erase(EraseTarget.session("acme", "alice", f"s{i}"), reason="dsr", attestation=OPERATOR)
            for i in range(3)
        ]
        first = blocking.erasure_status(OPERATOR, limit=2)
        assert [r.erasure_id for r in first] == [r.record.erasure_id for r in ids[:2]]
        rest = blocking.erasure_status(OPERATOR, after=first.next_after, limit=2)
        assert [r.erasure_id for r in rest] == [ids[2].record.erasure_id] and rest.next_after is None
        with pytest.raises(InvalidArgumentError):
            blocking.erasure_status(OPERATOR, limit=0)
        with pytest.raises(InvalidArgumentError):
            blocking.erasure_status(OPERATOR, after="nope")


def _header(i: int) -> ErasureRecord:
    return ErasureRecord(
        erasure_id=f"{i:024x}",
        kind=ErasureKind.ERASURE,
        target=EraseTarget.session("acme", "alice", f"old{i}"),
        reason="dsr",
        operator=OPS,
        state=ErasureState.COMPLETE,
        started_at=datetime(2025, 1, 1, tzinfo=UTC),
        completed_at=datetime(2025, 1, 1, tzinfo=UTC),
    )


async def test_a_cursor_into_an_index_written_by_an_earlier_version_survives_its_split() -> None:
    # An earlier version kept every header in the index itself; its next update moves them to
    # pages. A listing that started before the move goes on where it was.
    store = InMemorySessionStore()
    rt = _runtime(store)
    ledger = ErasureLedger(tuple(_header(i) for i in range(150)))
    snapshot = seal_snapshot(
        SessionSnapshot(memory_scope=Scope(ERASURE_RECORDS_TENANT, "acme", "index"), ledger=ledger)
    )
    await store.save(SessionKey(ERASURE_RECORDS_TENANT, "acme", "index"), snapshot, None, OpContext())
    old = [r.erasure_id for r in ledger.records]
    first = await rt.erasure_status(OPERATOR)
    assert [r.erasure_id for r in first] == old[:100]
    new = await _erase(rt, "s1")  # moves the 150 headers to pages of 64, 64 and 22
    rest = await rt.erasure_status(OPERATOR, after=first.next_after)
    assert [r.erasure_id for r in rest] == [*old[100:], new] and rest.next_after is None
    await rt.aclose()


def test_a_page_is_a_frozen_tuple_that_keeps_its_cursor_when_copied() -> None:
    # copy and deepcopy rebuild the page by the reduce protocol (its __dict__ restored as is).
    page = ErasureStatusPage((_header(1),), "f1.1")
    assert page == (_header(1),) and page.records == (_header(1),)
    for made in (copy.copy(page), copy.deepcopy(page)):
        assert made == page and made.next_after == "f1.1"
    with pytest.raises(AttributeError):
        page.next_after = None  # type: ignore[misc]
