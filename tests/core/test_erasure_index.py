"""The tenant's index of finished erasures stays bounded (docs/erasure.md, "Where the records live").

Every completed erasure adds its header to the tenant's index, and every
completion rewrites it. It used to keep every header ever written, so each
erasure read and rewrote all earlier ones (retention over N sessions cost
O(N²)) and the index grew past what a store can read or write. It now holds
at most a page of headers; full pages move, unchanged, to keys of their own,
and every tombstone stays listed by ``erasure_status`` and ``inspect_session``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureInProgressError,
    ErasureKind,
    ErasureRecord,
    ErasureState,
    OperatorAttestation,
    SessionKey,
    SessionStoreError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.erasure_index import INDEX_PAGE_RECORDS
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


def _runtime(store: InMemorySessionStore, archive: InMemoryArchive | None = None) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive or InMemoryArchive(),
        session_store=store,
    )


def _key(name: str) -> SessionKey:
    return SessionKey(ERASURE_RECORDS_TENANT, "acme", name)


async def _ledger(store: InMemorySessionStore, name: str) -> tuple[ErasureLedger, int]:
    """The ledger at ``name`` and its size in bytes as stored."""
    stored = await store.load(_key(name), OpContext())
    assert stored is not None and stored.snapshot.ledger is not None
    return stored.snapshot.ledger, len(snapshot_bytes(stored.snapshot))


async def _erase(rt: Any, session: str) -> str:
    result = await rt.erase(EraseTarget.session("acme", "alice", session), reason="dsr", attestation=OPERATOR)
    assert result.state is ErasureState.COMPLETE
    erasure_id: str = result.record.erasure_id
    return erasure_id


async def _status(rt: Any) -> list[ErasureRecord]:
    """Every erasure ``erasure_status`` lists, page after page."""
    records: list[ErasureRecord] = []
    after = None
    while True:
        page = await rt.erasure_status(OPERATOR, after=after)
        records.extend(page)
        if (after := page.next_after) is None:
            return records


class MeteredStore(InMemorySessionStore):
    """Counts the bytes of the erasure records it loads."""

    read = 0

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        stored = await super().load(key, ctx)
        if stored is not None and key.tenant == ERASURE_RECORDS_TENANT:
            self.read += len(snapshot_bytes(stored.snapshot))
        return stored


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # 200 erasures: one event loop is enough
async def test_the_index_stays_bounded_over_many_erasures_and_every_tombstone_stays_listed() -> None:
    store = MeteredStore()
    rt = _runtime(store)
    await rt.run(ALICE, "s7", "hello")
    ids: list[str] = []
    sizes: list[int] = []
    for i in range(200):  # three full index pages of 64 moved out, and a fourth begun
        ids.append(await _erase(rt, f"s{i}"))
        index, size = await _ledger(store, "index")
        assert len(index.records) <= 64, i
        sizes.append(size)
    # Each completion rewrites the index: its size is that of one page at most, whatever came before.
    assert max(sizes) <= max(sizes[:64]) + 64 * 16, (max(sizes[:64]), max(sizes))
    # The fence every load reads holds only what is under way: nothing now.
    pending, _ = await _ledger(store, "pending")
    assert pending.records == ()
    status = await _status(rt)
    assert [r.erasure_id for r in status] == ids
    assert all(r.state is ErasureState.COMPLETE for r in status)
    # A session's erasures are read from its scopes' indexes, not from every erasure of the tenant.
    store.read = 0
    view = await rt.inspect_session(ALICE, "s150")
    assert [e.erasure_id for e in view.erasures] == [ids[150]]
    assert store.read <= max(sizes[:64]) + 64 * 16, (store.read, max(sizes))
    await rt.aclose()


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


async def _write_old_index(store: InMemorySessionStore, count: int) -> list[str]:
    """An index as earlier versions wrote it: every header in one ledger, no pages."""
    ledger = ErasureLedger(tuple(_header(i) for i in range(count)))
    snapshot = seal_snapshot(
        SessionSnapshot(memory_scope=Scope(ERASURE_RECORDS_TENANT, "acme", "index"), ledger=ledger)
    )
    assert b'"pages"' not in snapshot_bytes(snapshot)  # the bytes earlier versions wrote and read
    await store.save(_key("index"), snapshot, None, OpContext())
    return [r.erasure_id for r in ledger.records]


async def test_an_index_written_by_an_earlier_version_loads_and_is_split_on_its_next_update() -> None:
    store = InMemorySessionStore()
    rt = _runtime(store)
    old = await _write_old_index(store, 150)
    assert [r.erasure_id for r in await _status(rt)] == old
    assert [e.erasure_id for e in (await rt.inspect_session(ALICE, "old9")).erasures] == [old[9]]
    new = await _erase(rt, "s1")
    index, _ = await _ledger(store, "index")
    assert [r.erasure_id for r in index.records] == [new] and index.pages == 3
    pages = [await _ledger(store, f"index-{n}") for n in (1, 2, 3)]
    assert [len(ledger.records) for ledger, _ in pages] == [64, 64, 22]
    assert [r.erasure_id for r in await _status(rt)] == [*old, new]
    assert [e.erasure_id for e in (await rt.inspect_session(ALICE, "old140")).erasures] == [old[140]]
    assert [e.erasure_id for e in (await rt.inspect_session(ALICE, "s1")).erasures] == [new]
    await rt.aclose()


class StopsAtTheIndex(InMemorySessionStore):
    """Fails the save of the index (a crash after the full index's pages were written)."""

    armed = False

    async def save(self, key: SessionKey, snapshot: Any, expected_revision: int | None, ctx: Any) -> int:
        if self.armed and key.tenant == ERASURE_RECORDS_TENANT and key.session == "index":
            raise SessionStoreError("the process stopped here")
        return await super().save(key, snapshot, expected_revision, ctx)


async def test_a_crash_between_moving_a_full_index_and_rewriting_it_loses_no_fence_or_tombstone() -> None:
    store = StopsAtTheIndex()
    rt = _runtime(store)
    ids = [await _erase(rt, f"s{i}") for i in range(INDEX_PAGE_RECORDS)]
    await rt.run(ALICE, "last", "hello")
    store.armed = True
    with pytest.raises(ErasureIncompleteError, match="stopped here"):
        await rt.erase(EraseTarget.session("acme", "alice", "last"), reason="dsr", attestation=OPERATOR)
    page, _ = await _ledger(store, "index-1")  # the full index's page was written first
    assert [r.erasure_id for r in page.records] == ids
    index, _ = await _ledger(store, "index")
    assert len(index.records) == INDEX_PAGE_RECORDS and index.pages is None  # the index is as it was
    with pytest.raises(ErasureInProgressError):  # still fenced: the erasure is pending
        await rt.run(ALICE, "last", "again")
    store.armed = False
    (resumed,) = await rt.resume_erasures(OPERATOR)
    assert resumed.state is ErasureState.COMPLETE
    index, _ = await _ledger(store, "index")
    assert [r.erasure_id for r in index.records] == [resumed.record.erasure_id] and index.pages == 1
    assert [r.erasure_id for r in await _status(rt)] == [*ids, resumed.record.erasure_id]
    await rt.aclose()


async def test_two_runtimes_completing_erasures_at_once_lose_no_tombstone() -> None:
    store, archive = InMemorySessionStore(), InMemoryArchive()
    first, second = _runtime(store, archive), _runtime(store, archive)
    before = [await _erase(first, f"s{i}") for i in range(INDEX_PAGE_RECORDS - 3)]
    done: list[str] = []

    async def erase(rt: Any, session: str) -> None:
        done.append(await _erase(rt, session))

    async with anyio.create_task_group() as tg:
        for i in range(12):
            tg.start_soon(erase, first if i % 2 else second, f"c{i}")
    status = [r.erasure_id for r in await _status(first)]
    assert status[: len(before)] == before and sorted(status[len(before) :]) == sorted(done)
    index, _ = await _ledger(store, "index")
    page, _ = await _ledger(store, "index-1")
    assert index.pages == 1 and len(page.records) == INDEX_PAGE_RECORDS
    assert len(page.records) + len(index.records) == len(before) + 12  # each entry once
    await first.aclose()
    await second.aclose()


async def test_an_erasure_resumed_after_its_indexing_is_listed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """An erasure stopped after it was indexed, before it left ``pending``, was indexed again by its
    resume once other users' erasures had moved the tenant's head to a page: ``erasure_status``
    listed it twice. Its scope's head still lists it (nothing else joins that chain while it is
    pending), so the resume adds it to neither chain again."""
    from agentium_harness._engine import erasure_index, erasure_tombstone

    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 1)  # every second listing moves the head
    rt = _runtime(InMemorySessionStore())
    async with rt:
        with anyio.fail_after(30):
            await rt.run(ALICE, "s1", "hello")
            indexed = erasure_tombstone.add_finished

            async def stops_after(*args: Any) -> None:
                await indexed(*args)
                raise OSError("stopped before leaving pending")

            monkeypatch.setattr(erasure_tombstone, "add_finished", stops_after)
            with pytest.raises(ErasureIncompleteError):
                await rt.erase(EraseTarget.session("acme", "alice", "s1"), reason="dsr", attestation=OPERATOR)
            monkeypatch.setattr(erasure_tombstone, "add_finished", indexed)
            others = [
                (
                    await rt.erase(
                        EraseTarget.session("acme", user, "s9"), reason="dsr", attestation=OPERATOR
                    )
                ).record.erasure_id
                for user in ("bob", "cy")
            ]
            (resumed,) = await rt.resume_erasures(OPERATOR)
            assert resumed.state is ErasureState.COMPLETE
            listed: list[str] = []
            after: str | None = None
            while True:  # a page each: one call's listing passed over a second entry it had listed
                page = await rt.erasure_status(OPERATOR, after=after, limit=1)
                listed.extend(r.erasure_id for r in page)
                if (after := page.next_after) is None:
                    break
            assert listed == [resumed.record.erasure_id, *others], listed
            await rt.run(ALICE, "s1", "again")  # it left pending: the session id is usable again
