"""An archive may answer ``read_groups`` with a shorter page: every engine reader reads on, loses nothing.

The SQLite archive stops a page before the group that would take its canonical
bytes past a per-call budget (a deflated row may be a thousandth of what it
inflates to), and the port allows it: a page never empty while a group at or
past ``start_seq`` exists, only an empty page the end. Here a real in-memory
archive answers at most ``cap`` groups a call (a legal short page), and each
engine path that reads archived groups must still see every one of them:
history reads (with and without a bytes bound), reconcile, the recall
catch-up, the check after indexing, and summaries. Before the engine read on,
a short page was damage to history reads, the end of the archive to
reconcile, groups "erased meanwhile" to the check after indexing (their index
entries erased), and a gap to summaries and the catch-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from agentium_harness import (
    EvictionStatus,
    HarnessRuntime,
    Message,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SessionKey,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.catch_up import catch_up_index
from agentium_harness._engine.index_recheck import drop_erased_meanwhile
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import ArchiveReceipt, MessageGroup, OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")


class ShortPages(InMemoryArchive):
    """The in-memory archive answering at most ``cap`` groups a read (never none while one is left)."""

    def __init__(self, cap: int | None = None) -> None:
        super().__init__()
        self.cap = cap
        self.short = 0  # reads answered shorter than asked while groups were left

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        real = list(await super().read_groups(key, start_seq, max_groups, ctx))
        if self.cap is None or len(real) <= self.cap:
            return real
        self.short += 1
        return real[: self.cap]


class DownIndex(InMemoryRecallStore):
    """The in-memory recall store, refusing to index while ``down``."""

    down = False

    async def index_groups(
        self,
        key: SessionKey,
        groups: Sequence[MessageGroup],
        receipts: Sequence[ArchiveReceipt],
        ctx: OpContext,
    ) -> int:
        if self.down:
            raise RuntimeError("the index is down")
        return await super().index_groups(key, groups, receipts, ctx)


def _pair(n: int) -> list[Message]:
    return [Message(Role.USER, f"u{n}"), Message(Role.ASSISTANT, f"a{n}")]


def _runtime(
    archive: InMemoryArchive, store: InMemorySessionStore | None = None, **kw: Any
) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store or InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
        **kw,
    )


async def _indexed(store: InMemoryRecallStore) -> list[int]:
    return [g.seq for g in await store.seek_groups(KEY, 0, 1000, OpContext.with_timeout(30))]


async def test_history_reads_read_on_past_a_short_page() -> None:
    archive = ShortPages()
    rt = _runtime(archive)
    for n in range(12):
        await rt.append(ANA, "s1", _pair(n))
    archive.cap = 3
    with anyio.fail_after(20):
        whole = await rt.read_history(ANA, "s1", max_groups=12)
        within = await rt.read_history(ANA, "s1", max_groups=12, max_bytes=10**6)
    assert [g.seq for g in whole.groups] == list(range(12)) == [g.seq for g in within.groups]
    assert archive.short >= 2  # the archived groups (0-9) came in pages of 3
    assert [g.group.messages[0].content for g in whole.groups] == [f"u{n}" for n in range(12)]


async def test_reconcile_reads_the_whole_archive_past_a_short_page() -> None:
    archive = ShortPages()
    old = _runtime(archive)
    for n in range(8):
        await old.append(ANA, "s1", _pair(n))
    rt = _runtime(archive)  # the snapshot store was lost; the archive kept groups 0-5
    evictions = [(await rt.append(ANA, "s1", _pair(10 + n))).eviction for n in range(3)]
    assert evictions[-1] is EvictionStatus.DIVERGED
    archive.cap = 2
    with anyio.fail_after(20):
        report = await rt.reconcile_session(ANA, "s1")
    # Every archived group is kept where it is and the resident ones follow all of them: a short
    # page taken for the end put the boundary at 2 and renumbered resident groups onto 2, 3, ...
    assert report.changed and report.adopted_seqs == tuple(range(6)) and archive.short >= 1
    assert [new for _, new in report.renumbered] == [6, 7, 8]
    archive.cap = None
    page = await rt.read_history(ANA, "s1", max_groups=20)
    assert [g.seq for g in page.groups] == list(range(len(page.groups)))
    assert [g.group.messages[0].content for g in page.groups][:6] == [f"u{n}" for n in range(6)]


async def test_the_recall_catch_up_reads_on_past_a_short_page() -> None:
    archive, store = ShortPages(), DownIndex()
    rt = _runtime(archive, recall=store)
    for n in range(3):
        await rt.run(ANA, "s1", f"note {n} about kiwis")
    store.down = True
    for n in range(3, 6):
        await rt.run(ANA, "s1", f"note {n} about plums")
    store.down = False
    assert await _indexed(store) == [0]
    archive.cap = 1
    with anyio.fail_after(20):
        result = await rt.run(ANA, "s1", "note 6 about figs")
    codes = [d.code for d in result.diagnostics]
    assert "recall_index_caught_up" in codes and "recall_index_behind" not in codes, codes
    assert {1, 2, 3} <= set(await _indexed(store)) and archive.short >= 1


async def test_the_check_after_indexing_erases_nothing_on_a_short_page() -> None:
    archive, store = ShortPages(), InMemoryRecallStore()
    groups = [MessageGroup(n, tuple(_pair(n))) for n in range(5)]
    receipts = list(await archive.append(KEY, groups, OpContext.with_timeout(30)))
    await store.index_groups(KEY, groups, receipts, OpContext.with_timeout(30))
    archive.cap = 2
    with anyio.fail_after(20):
        notes = await drop_erased_meanwhile(store, archive, Ticket(KEY, "test", 30.0), KEY, groups)
    # A short page read as "the rest was erased meanwhile" erased groups 2-4 from the index.
    assert notes == [] and archive.short >= 1
    assert await _indexed(store) == [0, 1, 2, 3, 4]


async def test_a_summary_reads_on_past_a_short_page_without_a_gap() -> None:
    archive, store = ShortPages(), InMemorySessionStore()
    before = _runtime(archive, store)  # no summarizer yet: the first summary reads the archive
    for n in range(8):
        await before.run(ANA, "s1", f"Fact {n}: the widget number {n} weighs {n * 7} grams.")
    limits = SummaryLimits(background=False)
    rt = _runtime(archive, store, summarizer=ExtractiveSummarizer(), summary_limits=limits)
    archive.cap = 2
    with anyio.fail_after(20):
        result = await rt.run(ANA, "s1", "Fact 8: the widget number 8 weighs 56 grams.")
    assert result.committed and result.summary is not None and archive.short >= 1
    assert result.summary.gaps == () and result.summary.summary.frontier == result.boundary


class SlowShortPages(ShortPages):
    """Answers one group a read, each read taking ``delay`` seconds (under the op deadline)."""

    delay = 0.0

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        await anyio.sleep(self.delay)
        return await super().read_groups(key, start_seq, max_groups, ctx)


async def test_reading_on_stays_within_one_operation_deadline() -> None:
    # Catch-up and the check after indexing run inside the turn that archived. Each read of one
    # group takes 0.25 s, under the 1 s op deadline; eight such reads (2 s at least) took one call
    # per page, each with its own deadline: an archive answering a group a read held the turn for
    # up to 64 (the catch-up's span) op deadlines. Read on within one call, the read is cut.
    archive, store = SlowShortPages(cap=1), InMemoryRecallStore()
    groups = [MessageGroup(n, tuple(_pair(n))) for n in range(8)]
    receipts = list(await archive.append(KEY, groups, OpContext.with_timeout(30)))
    await store.index_groups(KEY, groups[:1], receipts[:1], OpContext.with_timeout(30))
    archive.delay = 0.25
    with anyio.fail_after(20):
        caught = await catch_up_index(store, archive, Ticket(KEY, "test", 1.0), KEY, 8)
        await store.index_groups(KEY, groups, receipts, OpContext.with_timeout(30))
        checked = await drop_erased_meanwhile(store, archive, Ticket(KEY, "test", 1.0), KEY, groups)
    assert [d.code for d in caught] == ["recall_catch_up_failed"], caught
    assert "could not be indexed (OperationTimeoutError" in caught[0].message
    assert [d.code for d in checked] == ["recall_index_erased_meanwhile"], checked
    assert "could not check" in checked[0].message and "OperationTimeoutError" in checked[0].message
    assert await _indexed(store) == list(range(8))  # nothing was erased on a cut read
