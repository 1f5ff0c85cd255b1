"""A memory write's and a document index's second erasure read stays bounded, whatever came before.

After a fenced write, when the tenant's ledger moved since its first read,
the fence asks whether a finished erasure covering the write joined the
ledger since (:meth:`.ErasureFence.covering_since`). It used to read every
page of the tenant's, the user's (and each named session's) index chains
and one join record per covering erasure: the cost of one write grew with
every erasure its user ever had. Each chain is now read newest first and
stops at the first entry that joined before the write's first read (every
entry listed before it joined before it): the reads stay the same after 10
erasures of the user or 100 (counted as store loads, never timed), and an
erasure that joined during the write still takes it back.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from _erasure_records import as_earlier_versions, joined_record

from agentium_harness import (
    EraseTarget,
    ErasureInProgressError,
    ErasureKind,
    MemoryFact,
    MemoryLimits,
    MemoryManager,
    MemoryScope,
    OperatorAttestation,
    SeqRange,
    SessionKey,
    SourceOwner,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine import erasure_index, erasure_index_add
from agentium_harness._engine.document_fence import index_document_fenced
from agentium_harness._engine.erasure_api import run_erasure
from agentium_harness._engine.erasure_fence import ErasureFence
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._engine.memory_fence import _FactWrite, fence_memory
from agentium_harness._ports.memory import GroupRef
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import ERASURE_RECORDS_TENANT, OpContext, SourceRef

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

ANA = MemoryScope("acme", "ana")
ANA_DOC = SourceOwner("acme", "ana")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
TEXT = "Ana's VPN certificate expires on March 3rd"
USER = EraseTarget.user("acme", "ana")
BOB = EraseTarget.user("acme", "bob")  # another user's: moves the ledger, erases nothing of ana's


class _Counted(InMemorySessionStore):
    """Counts the loads of the erasure index's chains and of the erasures' join records."""

    loads = 0

    async def load(self, key: SessionKey, ctx: Any) -> Any:
        if key.tenant == ERASURE_RECORDS_TENANT and key.session.startswith(("by-", "index", "j-")):
            self.loads += 1
        return await super().load(key, ctx)


class _World:
    """An eraser runtime and a fenced writer on one session store; ``during`` runs inside the next write."""

    def __init__(self) -> None:
        self.during: Any = None
        self.after_write: Any = None  # called once the next document landed in the store
        self.sessions = _Counted()
        world = self

        class Facts(InMemoryMemoryStore):
            async def remember(self, fact: MemoryFact, ctx: OpContext) -> Any:
                await world.run_during()
                return await super().remember(fact, ctx)

        class Recall(InMemoryRecallStore):
            async def index_document(
                self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
            ) -> SourceRef:
                await world.run_during()
                ref: SourceRef = await super().index_document(owner, doc_id, text, ctx, title=title)
                after, world.after_write = world.after_write, None
                if after is not None:
                    after()
                return ref

        provider = ScriptedProvider(replies=["noted"], cycle=True)
        facts, self.recall = Facts(), Recall()
        self.eraser = create_harness_runtime(
            provider=provider, archive=InMemoryArchive(), session_store=self.sessions, recall=self.recall
        )
        self.manager = MemoryManager(facts, limits=MemoryLimits(op_timeout_s=30.0))
        fence_memory(self.manager, self.sessions, 30.0)

    async def run_during(self) -> None:
        during, self.during = self.during, None
        if during is not None:
            await self.eraser.erase(during, reason="dsr", attestation=OPERATOR)
            self.sessions.loads = 0  # from here on: the write's second read

    async def write(self, what: str, during: EraseTarget) -> tuple[bool, int]:
        """Ana's fact or document, ``during`` erased inside the write: (kept?, its second read's loads)."""
        self.during = during
        try:
            if what == "fact":
                await self.manager.remember(MemoryFact(ANA, TEXT))
            else:
                fence = ErasureFence(self.sessions, 30.0)
                await index_document_fenced(
                    fence, Ticket(None, "test", 30.0), self.recall, ANA_DOC, "v.md", TEXT
                )
        except ErasureInProgressError:
            return False, self.sessions.loads
        return True, self.sessions.loads


@pytest.mark.parametrize("what", ["fact", "document"])
@pytest.mark.parametrize(("during", "kept"), [(BOB, True), (USER, False)], ids=["bob", "ana"])
async def test_a_writes_second_read_is_the_same_after_10_or_100_erasures_of_its_user(
    monkeypatch: pytest.MonkeyPatch, what: str, during: EraseTarget, kept: bool
) -> None:
    # Four headers a page: 100 erasures make 25 pages of the user's chain (as 1,600 would at 64).
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 4)
    reads = []
    for count in (10, 100):
        world = _World()
        async with world.eraser:
            with anyio.fail_after(30):
                for _ in range(count):
                    await world.eraser.erase(USER, reason="dsr", attestation=OPERATOR)
                outcome, loads = await world.write(what, during)
        # Ana's erasures all joined before the write's first read: bob's during it leaves it; hers
        # during it takes it back (the newest entry of her chain).
        assert outcome is kept
        reads.append(loads)
    # The heads of the tenant's index and of the tenant's and ana's chains, and one join record: the
    # newest of ana's erasures (joined before the first read: it settles; during the write: found).
    assert reads == [4, 4], reads


@pytest.mark.parametrize(("during", "kept"), [("bob", True), ("s1", False)])
async def test_a_facts_second_read_stops_at_the_sessions_retention_erasures(
    monkeypatch: pytest.MonkeyPatch, during: str, kept: bool
) -> None:
    # A fact sourced from s1, whose chain holds one erasure of the whole session under 100 retention
    # erasures (25 pages, past a cap of 3): the newest entry joined before the first read settles it.
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 4)
    monkeypatch.setattr(erasure_index, "MAX_CHAIN_PAGES_READ", 3)
    world = _World()
    key = SessionKey("acme", "ana", "s1")
    async with world.eraser:
        with anyio.fail_after(30):
            await world.eraser.erase(
                EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR
            )
            for _ in range(100):
                groups = EraseTarget.groups_of(key, [SeqRange(0, 1)])
                await run_erasure(world.eraser, groups, "retention", OPERATOR, ErasureKind.RETENTION)
            write = _FactWrite(ANA, (GroupRef("s1", 0, "sha256:" + "d" * 64),))
            fence = ErasureFence(world.sessions, 30.0)
            seen = await fence.check(write)
            world.during = BOB if during == "bob" else EraseTarget.session("acme", "ana", "s1")
            await world.run_during()
            found = await fence.covering_since(seen)
    assert (found is None) is kept
    # The four heads (the tenant's index, the tenant's, ana's and s1's chains) and one join record.
    assert world.sessions.loads == 4 + 1, world.sessions.loads


async def test_an_earlier_versions_chain_past_the_cap_is_still_read_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # s1 erased whole, then 20 retention erasures, all as an earlier version ran them: no join
    # records, pages moved with no mark (11 pages of two, past a cap of 3). Nothing settles the
    # newest-first read: the fence reads every covering erasure, as it did, and the erasure of s1
    # (no join record, completed just now by the clocks) takes the fact back, as it did. The fact
    # cites group 3, which retention leaves (retention of a cited group takes it back too).
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 2)
    monkeypatch.setattr(erasure_index, "MAX_CHAIN_PAGES_READ", 3)

    async def no_mark(*args: Any) -> None:
        return None

    monkeypatch.setattr(erasure_index_add, "_mark_pages", no_mark)
    world = _World()
    key = SessionKey("acme", "ana", "s1")
    async with world.eraser:
        with anyio.fail_after(30):
            with as_earlier_versions(monkeypatch):
                whole = await world.eraser.erase(
                    EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR
                )
                for _ in range(20):
                    groups = EraseTarget.groups_of(key, [SeqRange(0, 1)])
                    await run_erasure(world.eraser, groups, "retention", OPERATOR, ErasureKind.RETENTION)
            assert await joined_record(world.sessions, "acme", whole.record.erasure_id) is None
            write = _FactWrite(ANA, (GroupRef("s1", 3, "sha256:" + "d" * 64),))
            fence = ErasureFence(world.sessions, 30.0)
            seen = await fence.check(write)
            world.during = BOB
            await world.run_during()
            found = await fence.covering_since(seen)
    assert found is not None and found.erasure_id == whole.record.erasure_id


async def test_an_erasure_of_the_session_under_retention_erasures_since_the_first_read_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # During the write: s1 erased whole, then 7 retention erasures of it (two headers a page: the
    # whole-session erasure is on the pages). The fact cites group 3, which retention leaves (one
    # citing group 0 is taken by those erasures themselves: test_memory_groups_erased_during_write).
    # The walk goes on past entries that joined since but take no fact, and reads the pages to the
    # erasure that does (a fact citing groups is not answered by the pages' mark): it takes it back.
    monkeypatch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 2)
    world = _World()
    key = SessionKey("acme", "ana", "s1")
    groups = EraseTarget.groups_of(key, [SeqRange(0, 1)])
    async with world.eraser:
        with anyio.fail_after(30):
            for _ in range(5):  # before the write: joined before its first read
                await run_erasure(world.eraser, groups, "retention", OPERATOR, ErasureKind.RETENTION)
            write = _FactWrite(ANA, (GroupRef("s1", 3, "sha256:" + "d" * 64),))
            fence = ErasureFence(world.sessions, 30.0)
            seen = await fence.check(write)
            whole = await world.eraser.erase(
                EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR
            )
            for _ in range(7):
                await run_erasure(world.eraser, groups, "retention", OPERATOR, ErasureKind.RETENTION)
            found = await fence.covering_since(seen)
    assert found is not None and found.erasure_id == whole.record.erasure_id


async def test_a_fence_gained_after_the_first_read_reads_the_same_after_10_or_100_erasures() -> None:
    """``covering_after`` (a store that began fencing the writer after its first read: no revision
    seen, the clocks judge) read every page of the write's chains: 5 loads after 10 erasures of
    its user, 27 after 100, four headers a page. Each chain is now read newest first to its first
    entry that completed a margin before the bound; what counts is unchanged: an erasure that
    completed since the bound takes the write back, none that completed long before it does."""
    reads = []
    for count in (10, 100):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(erasure_index, "INDEX_PAGE_RECORDS", 4)
            world = _World()
            async with world.eraser:
                with anyio.fail_after(30):
                    for _ in range(count):
                        await world.eraser.erase(USER, reason="dsr", attestation=OPERATOR)
                    fence = ErasureFence(world.sessions, 30.0)
                    ticket = Ticket(None, "test", 30.0)
                    head = await erasure_index.tenant_index_head(ticket, world.sessions, "acme")
                    done = head.records[-1].completed_at
                    assert done is not None
                    write = _FactWrite(ANA, ())
                    world.sessions.loads = 0
                    later = await fence.covering_after(write, done + timedelta(hours=1))
                    reads.append(world.sessions.loads)
                    found = await fence.covering_after(write, done - timedelta(hours=1))
                    other = await fence.covering_after(_FactWrite(MemoryScope("acme", "bob"), ()), done)
        assert later is None  # all of them completed long before the write's first read
        assert found is not None and found.target == USER  # ana's: completed since that read
        assert other is None  # none of them takes bob's fact
    # The heads of the tenant's index and of the tenant's and ana's chains: ana's newest entry
    # completed long before, so nothing listed before it counts.
    assert reads == [3, 3], reads


_PAST_THE_MARGIN = pytest.mark.xfail(
    strict=True,
    reason="known limit (docs/erasure.md): a later erasure stamped by a clock more than the margin "
    "behind ends covering_after's newest-first read before an earlier covering erasure",
)


@pytest.mark.parametrize("behind_s", [280.0, pytest.param(320.0, marks=_PAST_THE_MARGIN)])
async def test_a_fence_gained_after_the_first_read_stops_by_the_clocks_within_the_margin_only(
    monkeypatch: pytest.MonkeyPatch, behind_s: float
) -> None:
    """docs/erasure.md: ``covering_after``'s newest-first read stops at the first entry that completed
    a margin before its bound, which holds while the erasing processes' clocks are within the
    margin of each other. Ana's user erased 290 s before the write's first read by its clock (it
    counts: within the 300 s margin), then again by a process whose clock runs ``behind_s``
    behind: 280 s, that later entry neither counts nor ends the read, and the first is found;
    320 s, it looks a margin older than the bound and ends the read before the first: the limit
    the docs state, a strict xfail (reading every page, as before 32b5e0e3, found it)."""
    from agentium_harness._engine import erasure_tombstone

    world = _World()
    async with world.eraser:
        with anyio.fail_after(30):
            first = (await world.eraser.erase(USER, reason="dsr", attestation=OPERATOR)).record
            assert first.completed_at is not None

            class Behind(datetime):  # what erasure_tombstone stamps completed_at with, behind
                @classmethod
                def now(cls, tz: Any = None) -> Any:
                    return datetime.now(tz) - timedelta(seconds=behind_s)

            with monkeypatch.context() as patch:
                patch.setattr(erasure_tombstone, "datetime", Behind)
                await world.eraser.erase(USER, reason="dsr again", attestation=OPERATOR)
            fence = ErasureFence(world.sessions, 30.0)
            at = first.completed_at + timedelta(seconds=290)
            covering = await fence.covering_after(_FactWrite(ANA, ()), at)
    assert covering is not None and covering.erasure_id == first.erasure_id


@pytest.mark.parametrize("where", ["store", "read"])
async def test_a_document_whose_fence_is_cancelled_after_the_write_is_still_taken_back(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Ana's user erased while her document was being indexed (its inventory saw no document), then
    the write's caller cancelled (Ctrl-C to ``agentium recall add``) as the store answered
    (``store``) or during the fence's second read (``read``): the document stayed indexed, an
    erased user's, the erasure ``complete``. The check and the delete run again, shielded."""
    world = _World()
    fence = ErasureFence(world.sessions, 30.0)
    async with world.eraser:
        with anyio.fail_after(30):
            with anyio.CancelScope() as scope:
                world.during = USER
                if where == "store":
                    world.after_write = scope.cancel
                else:
                    look = ErasureFence.covering_since

                    async def cancelled_read(self: ErasureFence, seen: Any) -> Any:
                        scope.cancel()
                        await anyio.lowlevel.checkpoint()  # the cancellation lands here, the read not done
                        return await look(self, seen)

                    monkeypatch.setattr(ErasureFence, "covering_since", cancelled_read)
                await index_document_fenced(
                    fence, Ticket(None, "test", 30.0), world.recall, ANA_DOC, "v.md", TEXT
                )
            assert scope.cancelled_caught
            monkeypatch.undo()
            # True if it was still there (the erased user's document, kept)
            kept = await world.recall.delete_document(ANA_DOC, "v.md", OpContext.with_timeout(30.0))
    assert kept is False
