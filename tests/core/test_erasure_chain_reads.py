"""The fences' and recall's reads of the erasure index stay bounded however many erasures came before.

The commit fence and the turn fence (a new session's first turn, the
ledger moved meanwhile) ask whether a finished erasure of the whole
session joined the ledger after the run's load; recall's document check
asks which finished erasure of the session's scopes came last. Both used
to read every page of the tenant's, the user's and the session's index
chains, oldest first, to keep the last entry of each: the reads grew with
every erasure those scopes ever had (a session id erased and used again,
retention of a long-lived session). They now read each chain newest
first and stop at the first entry that settles it: pages read stay the
same after 10 erasures or 1,000 (counted as store loads, never timed).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from _effects_support import DEPLOY
from _erasure_harness import ANA, OPERATOR, HeldOnce, tool_turn_while, turn_while_held

from agentium_harness import (
    CommitState,
    EffectLevel,
    EraseTarget,
    ErasureKind,
    ErasureRecord,
    ErasureState,
    SeqRange,
    SessionConflictError,
    SessionKey,
    SessionStoreError,
    SnapshotCorruptError,
    Tool,
    ToolRegistry,
    create_harness_runtime,
)
from agentium_harness._engine import erasure_index, erasure_index_add
from agentium_harness._engine.erasure_api import run_erasure
from agentium_harness._engine.recall_readback import SessionGroups
from agentium_harness._ports.erasure import ErasureLedger
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import (
    ERASURE_RECORDS_TENANT,
    OpContext,
    Scope,
    SessionSnapshot,
    SourceOwner,
    seal_snapshot,
)

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

S1 = EraseTarget.session("acme", "ana", "s1")
KEY = SessionKey("acme", "ana", "s1")
GROUPS = EraseTarget.groups_of(KEY, [SeqRange(0, 1)])
BOB = EraseTarget.session("acme", "bob", "b1")  # another user's: moves the ledger, erases nothing of ana's


class _Counted:
    """Counts the loads of the erasure index's chains (heads and pages), nothing else."""

    chain_loads = 0

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        if key.tenant == ERASURE_RECORDS_TENANT and key.session.startswith(("by-", "index")):
            self.chain_loads += 1
        return await super().load(key, ctx)  # type: ignore[misc]


class ChainReads(_Counted, InMemorySessionStore):
    """The in-memory session store, its chain loads counted."""


class SQLiteChainReads(_Counted, SQLiteSessionStore):
    """The SQLite session store, its chain loads counted."""


Stores = tuple[Any, Any]


def _stores(kind: str, tmp_path: Path) -> Stores:
    if kind == "memory":
        return ChainReads(), InMemoryArchive()
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    return SQLiteChainReads(config), SQLiteArchive(config)


def _runtime(store: Any, archive: Any, provider: Any = None) -> Any:
    return create_harness_runtime(provider=provider or HeldOnce(), archive=archive, session_store=store)


async def _erase_many(rt: Any, target: EraseTarget, count: int) -> None:
    for _ in range(count):
        if target.groups:  # as retention erases archived groups (no operator call takes a groups target)
            await run_erasure(rt, target, "retention", OPERATOR, ErasureKind.RETENTION)
        else:
            await rt.erase(target, reason="dsr", attestation=OPERATOR)


async def _first_turn(store: Any, archive: Any, during: EraseTarget) -> tuple[int, BaseException | None]:
    """s1's first turn while ``during`` is erased: the chain loads of its commit fence, and its error."""
    provider = HeldOnce()
    slow, other = _runtime(store, archive, provider), _runtime(store, archive)

    async def meanwhile() -> None:
        await other.erase(during, reason="dsr", attestation=OPERATOR)  # the ledger moves
        store.chain_loads = 0

    try:
        error = await turn_while_held(slow, provider, "s1", "a new session's first turn", meanwhile)
        page = await slow.read_history(ANA, "s1", max_groups=10, view=False)
        assert len(page.groups) == (1 if error is None else 0)
        return store.chain_loads, error
    finally:
        await slow.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_the_commit_fence_reads_the_same_pages_after_10_or_100_erasures_of_the_session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    # Four headers a page: 100 erasures make 25 pages (as 1,600 would at 64).
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 4)
    reads = []
    for count in (10, 100):
        store, archive = _stores(kind, tmp_path / str(count))
        rt = _runtime(store, archive)
        with anyio.fail_after(30):
            await _erase_many(rt, S1, count)
        await rt.aclose()
        with anyio.fail_after(30):
            loads, error = await _first_turn(store, archive, BOB)
        assert error is None, error  # committed: every erasure of s1 joined before the turn's load
        reads.append(loads)
    # The tenant's head and the heads of the tenant's, the user's and the session's chains.
    assert reads == [4, 4], reads


@pytest.mark.parametrize("before", ["whole", "retention"])
async def test_an_erasure_of_the_session_during_the_turn_still_refuses_it_after_100(
    monkeypatch: pytest.MonkeyPatch, before: str
) -> None:
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 4)
    store, archive = ChainReads(), InMemoryArchive()
    rt = _runtime(store, archive)
    with anyio.fail_after(30):
        await _erase_many(rt, S1 if before == "whole" else GROUPS, 100)
    await rt.aclose()
    with anyio.fail_after(30):
        loads, error = await _first_turn(store, archive, S1)
    assert isinstance(error, SessionConflictError), error
    assert error.commit_state is CommitState.NOT_COMMITTED
    assert loads == 4, loads  # the erasure during the turn is the newest of the session's chain


async def test_the_commit_fence_stops_at_a_retention_erasure_that_joined_before_the_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The session erased whole once, then 60 erasures of its archived groups (as retention makes).
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 4)
    store, archive = ChainReads(), InMemoryArchive()
    rt = _runtime(store, archive)
    with anyio.fail_after(30):
        await _erase_many(rt, S1, 1)
        await _erase_many(rt, GROUPS, 60)
    await rt.aclose()
    with anyio.fail_after(30):
        loads, error = await _first_turn(store, archive, BOB)
    assert error is None, error
    assert loads == 4, loads  # the session's newest entry joined before the load: no page read


async def _finished_for_recall(
    store: ChainReads, archive: InMemoryArchive
) -> tuple[int, list[ErasureRecord]]:
    """Chain loads of recall's document check for s1 (nothing cached), and the erasures it returned."""
    rt = _runtime(store, archive)
    try:
        async with rt.parts.admission.admit_shared(KEY, "recall check") as ticket:
            reader = SessionGroups(
                ticket, archive, store, KEY, SessionSnapshot(memory_scope=Scope("acme", "ana", "s1"))
            )
            store.chain_loads = 0
            found = await reader.finished_erasures(time.monotonic() + 30)
        return store.chain_loads, list(found)
    finally:
        await rt.aclose()


async def _erased_whole_for_recall(store: ChainReads, archive: InMemoryArchive) -> tuple[int, bool]:
    """Chain loads of recall's "was s1 erased whole" check (no ``loaded_at``: every chain to its answer)."""
    rt = _runtime(store, archive)
    try:
        async with rt.parts.admission.admit_shared(KEY, "recall check") as ticket:
            reader = SessionGroups(
                ticket, archive, store, KEY, SessionSnapshot(memory_scope=Scope("acme", "ana", "s1"))
            )
            store.chain_loads = 0
            erased = await reader.erased_whole(time.monotonic() + 30)
        return store.chain_loads, erased
    finally:
        await rt.aclose()


def _as_an_earlier_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages moved from here on get no mark, as a version before the marks moved them."""

    async def no_mark(*args: Any) -> None:
        return None

    monkeypatch.setattr(erasure_index_add, "_mark_pages", no_mark)


async def test_recalls_document_check_reads_the_same_pages_after_10_or_100_erasures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 4)
    reads = []
    for count in (10, 100):
        store, archive = ChainReads(), InMemoryArchive()
        rt = _runtime(store, archive)
        with anyio.fail_after(30):
            await _erase_many(rt, S1, count)
            user = await rt.erase(EraseTarget.user("acme", "ana"), reason="dsr", attestation=OPERATOR)
            await _erase_many(rt, S1, 1)
            last = (await rt.erase(S1, reason="dsr", attestation=OPERATOR)).record
        await rt.aclose()
        with anyio.fail_after(30):
            loads, found = await _finished_for_recall(store, archive)
        # What decides each document: the last erasure covering its owner (as the check picks it).
        for owner, expected in (
            (SourceOwner("acme", "ana"), user.record),
            (SourceOwner("acme", "ana", "s1"), last),
        ):
            assert [r for r in found if r.target.covers_owner(owner)][-1].erasure_id == expected.erasure_id
        assert not [r for r in found if r.target.covers_owner(SourceOwner("acme"))]
        reads.append(loads)
    assert reads == [4, 4], reads


async def test_a_chain_past_the_read_cap_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Groups erasures only, none of the whole session: recall's check must look back for one.
    # Pages an earlier version moved (no marks): the walk, capped.
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 2)
    monkeypatch.setattr(erasure_index, "MAX_CHAIN_PAGES_READ", 3, raising=False)
    _as_an_earlier_version(monkeypatch)
    store, archive = ChainReads(), InMemoryArchive()
    rt = _runtime(store, archive)
    with anyio.fail_after(30):
        await _erase_many(rt, GROUPS, 9)
    await rt.aclose()
    with anyio.fail_after(30):
        with pytest.raises(SessionStoreError, match="more than 3 pages"):
            await _finished_for_recall(store, archive)
    assert store.chain_loads <= 4 + 1 + 3  # the heads, the absent mark, then no page past the cap


def _old_header(i: int, session: str) -> ErasureRecord:
    return ErasureRecord(
        erasure_id=f"{i:024x}",
        kind=ErasureKind.ERASURE,
        target=EraseTarget.session("acme", "ana", session),
        reason="dsr",
        operator=OPERATOR.operator,
        state=ErasureState.COMPLETE,
        started_at=datetime(2025, 1, 1, tzinfo=UTC),
        completed_at=datetime(2025, 1, 1, tzinfo=UTC),
    )


async def test_an_earlier_versions_index_is_read_newest_first_and_its_erasure_still_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every header in the tenant's head, no scope chains, no join records (as earlier versions wrote it):
    # s1's erasure is the 10th of 150. Its pages are fixed in number: read to the end past the cap.
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 4)
    monkeypatch.setattr(erasure_index, "MAX_CHAIN_PAGES_READ", 3)
    store, archive = ChainReads(), InMemoryArchive()
    old = ErasureLedger(tuple(_old_header(i, "s1" if i == 9 else f"old{i}") for i in range(150)))
    index = SessionKey(ERASURE_RECORDS_TENANT, "acme", "index")
    scope = Scope(ERASURE_RECORDS_TENANT, "acme", "index")
    await store.save(index, seal_snapshot(SessionSnapshot(memory_scope=scope, ledger=old)), None, OpContext())
    with anyio.fail_after(30):
        loads, error = await _first_turn(store, archive, BOB)  # bob's erasure moves the old entries to pages
    # It may have joined at any time (no join record): refused, as before.
    assert isinstance(error, SessionConflictError), error
    assert "000000000000000000000009" in str(error)
    # The heads, then the earlier version's pages newest first down to the one holding it (of 38).
    assert loads == 4 + 36, loads
    rt = _runtime(store, archive)
    with anyio.fail_after(30):
        await _erase_many(rt, S1, 1)  # a new erasure of s1, before the next turn's load: it decides now
    await rt.aclose()
    with anyio.fail_after(30):
        loads, error = await _first_turn(store, archive, BOB)
    assert error is None, error
    assert loads == 4, loads


def _held_deploy() -> tuple[anyio.Event, anyio.Event, ToolRegistry]:
    """A ``deploy`` tool that sets ``entered`` and waits for ``release``: (entered, release, its registry)."""
    entered, release = anyio.Event(), anyio.Event()

    async def deploy(args: Any) -> str:
        entered.set()
        with anyio.fail_after(30):
            await release.wait()
        return "deployed"

    return entered, release, ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)])


async def test_a_tool_turns_fences_read_the_same_pages_after_10_or_100_erasures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The turn fence before the second model call and the commit fence after it: each reads the heads.
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 4)
    reads = []
    for count in (10, 100):
        store, archive = ChainReads(), InMemoryArchive()
        other = _runtime(store, archive)
        with anyio.fail_after(30):
            await _erase_many(other, S1, count)
        entered, release, tools = _held_deploy()
        provider = ScriptedProvider(replies=[DEPLOY, "Deployed."])
        mine = create_harness_runtime(provider=provider, archive=archive, session_store=store, tools=tools)

        async def erase_bob(other: Any = other, store: ChainReads = store) -> None:
            await other.erase(BOB, reason="dsr", attestation=OPERATOR)  # the ledger moves mid-run
            store.chain_loads = 0

        try:
            result = await tool_turn_while(mine, entered, release, erase_bob)
        finally:
            await mine.aclose()
            await other.aclose()
        assert not isinstance(result, BaseException), repr(result)
        assert result.committed
        reads.append(store.chain_loads)
    assert reads == [8, 8], reads


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_retention_erasures_past_the_cap_still_answer_from_the_chains_mark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    # s1 erased whole, then 20 retention erasures: 11 pages of two headers, past a cap of 3 pages
    # (as 8,192 retention erasures would pass 128 pages of 64). Recall's checks must find that erasure.
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 2)
    monkeypatch.setattr(erasure_index, "MAX_CHAIN_PAGES_READ", 3)
    store, archive = _stores(kind, tmp_path)
    rt = _runtime(store, archive)
    with anyio.fail_after(30):
        first = (await rt.erase(S1, reason="dsr", attestation=OPERATOR)).record
        await _erase_many(rt, GROUPS, 20)
    await rt.aclose()
    with anyio.fail_after(30):
        loads, found = await _finished_for_recall(store, archive)
    assert [r.erasure_id for r in found] == [first.erasure_id]
    assert loads == 4 + 1, loads  # the heads, then the session chain's mark: no page
    with anyio.fail_after(30):
        loads, erased = await _erased_whole_for_recall(store, archive)
    assert erased and loads == 4 + 1, loads
    # One more erasure of the whole session: the newest, found in its chain's head.
    rt = _runtime(store, archive)
    with anyio.fail_after(30):
        last = (await rt.erase(S1, reason="dsr", attestation=OPERATOR)).record
        await _erase_many(rt, GROUPS, 3)
    await rt.aclose()
    with anyio.fail_after(30):
        loads, found = await _finished_for_recall(store, archive)
    assert [r.erasure_id for r in found] == [last.erasure_id]
    assert loads == 4 + 1, loads


async def test_retention_erasures_only_answer_none_from_the_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 2)
    monkeypatch.setattr(erasure_index, "MAX_CHAIN_PAGES_READ", 3)
    store, archive = ChainReads(), InMemoryArchive()
    rt = _runtime(store, archive)
    with anyio.fail_after(30):
        await _erase_many(rt, GROUPS, 20)
    await rt.aclose()
    with anyio.fail_after(30):
        loads, found = await _finished_for_recall(store, archive)
        assert (loads, found) == (4 + 1, [])
        loads, erased = await _erased_whole_for_recall(store, archive)
        assert (loads, erased) == (4 + 1, False)


async def test_an_earlier_versions_pages_get_their_mark_at_the_next_move(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # s1 erased whole, then 4 retention erasures, their pages moved with no mark (an earlier version);
    # then 10 more by this version: its first move looks back once, finds the erasure, marks it.
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 2)
    monkeypatch.setattr(erasure_index, "MAX_CHAIN_PAGES_READ", 3)
    mark_pages = erasure_index_add._mark_pages
    _as_an_earlier_version(monkeypatch)
    store, archive = ChainReads(), InMemoryArchive()
    rt = _runtime(store, archive)
    with anyio.fail_after(30):
        first = (await rt.erase(S1, reason="dsr", attestation=OPERATOR)).record
        await _erase_many(rt, GROUPS, 4)
        monkeypatch.setattr(erasure_index_add, "_mark_pages", mark_pages)
        await _erase_many(rt, GROUPS, 10)
    await rt.aclose()
    with anyio.fail_after(30):
        loads, found = await _finished_for_recall(store, archive)
    assert [r.erasure_id for r in found] == [first.erasure_id]
    assert loads == 4 + 1, loads  # a walk would read 7 pages, past the cap


async def test_a_damaged_mark_fails_the_check_and_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 2)
    store, archive = ChainReads(), InMemoryArchive()
    rt = _runtime(store, archive)
    with anyio.fail_after(30):
        groups = (await run_erasure(rt, GROUPS, "retention", OPERATOR, ErasureKind.RETENTION)).record
        await _erase_many(rt, GROUPS, 2)  # the head moves: page 1 and its mark (none)
    await rt.aclose()
    chain = erasure_index._scope_chain("session", "ana", "s1")
    mark = SessionKey(ERASURE_RECORDS_TENANT, "acme", f"{chain}-w1")
    stored = await store.load(mark, OpContext())
    assert stored is not None and stored.snapshot.ledger == ErasureLedger()
    # A groups erasure's header as the newest erasure of the whole session: damage, said as such.
    bad = SessionSnapshot(
        memory_scope=Scope(ERASURE_RECORDS_TENANT, "acme", mark.session), ledger=ErasureLedger((groups,))
    )
    await store.save(mark, seal_snapshot(bad), stored.revision, OpContext())
    before = await store.load(mark, OpContext())
    with anyio.fail_after(30):
        with pytest.raises(SnapshotCorruptError, match="not a mark"):
            await _finished_for_recall(store, archive)
    assert await store.load(mark, OpContext()) == before


async def test_recalls_document_check_orders_the_scopes_last_erasures_as_they_ran_not_by_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ana erased by a process whose clock is an hour ahead, then s1 by one on time: s1's erasure ran
    # last (they overlap: one after the other), though its completed_at is earlier. A session-owned
    # document is decided by the erasure that ran last.
    from agentium_harness._engine import erasure_tombstone

    class Ahead(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + timedelta(hours=1)

    store, archive = ChainReads(), InMemoryArchive()
    rt = _runtime(store, archive)
    with anyio.fail_after(30):
        monkeypatch.setattr(erasure_tombstone, "datetime", Ahead)
        user = (await rt.erase(EraseTarget.user("acme", "ana"), reason="dsr", attestation=OPERATOR)).record
        monkeypatch.undo()
        last = (await rt.erase(S1, reason="dsr", attestation=OPERATOR)).record
    await rt.aclose()
    assert last.completed_at is not None and user.completed_at is not None
    assert last.completed_at < user.completed_at  # the clocks disagree with the order they ran in
    with anyio.fail_after(30):
        _, found = await _finished_for_recall(store, archive)
    covering = [r for r in found if r.target.covers_owner(SourceOwner("acme", "ana", "s1"))]
    assert [r.erasure_id for r in covering] == [user.erasure_id, last.erasure_id]


class _HoldsTheScopeAdd(ChainReads):
    """Holds (or fails) the first save of s1's chain head: a completion stopped between its two adds."""

    def __init__(self, fail: bool) -> None:
        super().__init__()
        self.fail, self.armed = fail, True
        self.held, self.release = anyio.Event(), anyio.Event()

    async def save(self, key: SessionKey, snapshot: Any, expected_revision: int | None, ctx: Any) -> int:
        if self.armed and key.tenant == ERASURE_RECORDS_TENANT and key.session == _S1_CHAIN:
            self.armed = False
            if self.fail:
                raise SessionStoreError("the process stopped here")
            self.held.set()
            await self.release.wait()
        return await super().save(key, snapshot, expected_revision, ctx)


_S1_CHAIN = erasure_index._scope_chain("session", "ana", "s1")


@pytest.mark.parametrize("fail", [True, False], ids=["crashed", "stalled"])
async def test_a_completion_stopped_between_its_tenant_and_scope_adds_is_indexed_by_the_resume(
    fail: bool,
) -> None:
    # A completion added s1's erasure to the tenant's chain and stopped (crashed, or stalled in its
    # write) before the session's chain; a resume in another runtime completes it and takes it out of
    # pending. The session's chain lists it, once, and the fences find it.
    store, archive = _HoldsTheScopeAdd(fail), InMemoryArchive()
    first, second = _runtime(store, archive), _runtime(store, archive)
    try:
        with anyio.fail_after(30):
            if fail:
                with pytest.raises(Exception, match="stopped here"):
                    await first.erase(S1, reason="dsr", attestation=OPERATOR)
                (resumed,) = await second.resume_erasures(OPERATOR)
            else:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: first.erase(S1, reason="dsr", attestation=OPERATOR))
                    await store.held.wait()
                    (resumed,) = await second.resume_erasures(OPERATOR)
                    store.release.set()
        assert resumed.state is ErasureState.COMPLETE
        done = resumed.record.erasure_id
        chain = SessionKey(ERASURE_RECORDS_TENANT, "acme", _S1_CHAIN)
        stored = await store.load(chain, OpContext())
        assert stored is not None and [r.erasure_id for r in stored.snapshot.ledger.records] == [done]
        pending = await store.load(SessionKey(ERASURE_RECORDS_TENANT, "acme", "pending"), OpContext())
        assert pending is None or not pending.snapshot.ledger.records
        with anyio.fail_after(30):
            _, found = await _finished_for_recall(store, archive)
        assert [r.erasure_id for r in found] == [done]
    finally:
        await first.aclose()
        await second.aclose()


async def test_the_commit_fence_walks_past_the_mark_when_its_erasure_has_no_join_record(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # s1 erased whole (its join record then damaged: it may have joined at any time), then 4 retention
    # erasures before a new turn's load and 2 during it. The head's entry joined after the load and the
    # mark names the erasure without a join record: the pages are walked, and the retention erasure
    # that joined before the load settles it (nothing of the whole session joined since): committed.
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 2)
    store, archive = ChainReads(), InMemoryArchive()
    rt = _runtime(store, archive)
    with anyio.fail_after(30):
        whole = (await rt.erase(S1, reason="dsr", attestation=OPERATOR)).record
        await _erase_many(rt, GROUPS, 4)
    await rt.aclose()
    joined = SessionKey(ERASURE_RECORDS_TENANT, "acme", f"j-{whole.erasure_id}")
    stored = await store.load(joined, OpContext())
    assert stored is not None
    other = erasure_index_add.header(await _first_groups_header(store))
    damaged = SessionSnapshot(
        memory_scope=Scope(ERASURE_RECORDS_TENANT, "acme", joined.session),
        ledger=ErasureLedger((other,), joined_after=0),
    )
    await store.save(joined, seal_snapshot(damaged), stored.revision, OpContext())
    provider = HeldOnce()
    slow, eraser = _runtime(store, archive, provider), _runtime(store, archive)
    try:

        async def meanwhile() -> None:
            await _erase_many(eraser, GROUPS, 2)

        with anyio.fail_after(30):
            error = await turn_while_held(slow, provider, "s1", "a new session's first turn", meanwhile)
    finally:
        await slow.aclose()
        await eraser.aclose()
    assert error is None, error
    assert "is damaged" in caplog.text  # the erasure's join record, said as such


async def _first_groups_header(store: ChainReads) -> ErasureRecord:
    """The header of s1's first retention erasure (on the session chain's first page)."""
    page = await store.load(SessionKey(ERASURE_RECORDS_TENANT, "acme", f"{_S1_CHAIN}-1"), OpContext())
    assert page is not None
    return next(r for r in page.snapshot.ledger.records if r.target.groups)
