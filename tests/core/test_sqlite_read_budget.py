"""One SQLite archive read inflates at most its budget, however small and compressed the rows.

Since schema version 4 a group row may be deflated, and each row's inflation is
bounded by ``MAX_JSON_BYTES``; but a ``read_groups`` of N rows had no overall
bound, so a small file of N tiny, highly compressed rows made one call inflate
N times that. Now a page stops before the group that would take its canonical
bytes past ``READ_BUDGET`` (the first group always comes back), and paging on
from the last seq + 1 still returns every group. The crafted rows here are
written straight into the file with the adapter's own ``pack`` (their digests
right, so they read as valid groups); inflated bytes are counted by wrapping
zlib's inflater, nothing in the adapter changed. The budget is lowered for the
test (it is ``MAX_JSON_BYTES``, 256 MB, in production) so a few MB show it.
"""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentium_harness import (
    Message,
    ResidentLimits,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._json import MAX_JSON_BYTES
from agentium_harness._ports import OpContext
from agentium_harness._scope import SessionKey
from agentium_harness.adapters import _sqlite_archive
from agentium_harness.adapters import sqlite as sqlite_module
from agentium_harness.adapters._sqlite_pack import pack
from agentium_harness.adapters._sqlite_rows import find_session, row_id
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import (
    EraseStatus,
    EraseTarget,
    MessageGroup,
    Scope,
    SessionSnapshot,
    seal_snapshot,
)
from agentium_harness.testing import plain_group
from agentium_harness.testing.sqlite_rows import put_group_row

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
ANA = VerifiedIdentity("acme", "ana", "test-auth")
#: Each crafted group holds two messages of this many of one letter: 2 MB inflated, a few KB deflated.
BIG = 1 << 20
BUDGET = 4 * BIG
CRAFTED = 16


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Counting:
    """zlib's inflater, counting every byte it hands back into ``counter``."""

    def __init__(self, inner: Any, counter: list[int]) -> None:
        self._inner = inner
        self._counter = counter

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        out: bytes = self._inner.decompress(data, max_length)
        self._counter[0] += len(out)
        return out

    @property
    def eof(self) -> bool:
        return bool(self._inner.eof)

    @property
    def unused_data(self) -> bytes:
        return bytes(self._inner.unused_data)


@pytest.fixture
def inflated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    counter = [0]
    real = zlib.decompressobj
    monkeypatch.setattr(zlib, "decompressobj", lambda *a, **k: _Counting(real(*a, **k), counter))
    return counter


async def _crafted(path: Path) -> list[MessageGroup]:
    """A file whose archive holds group 0 (appended) and CRAFTED groups of BIG bytes written raw."""
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    first = plain_group(0, "hello")
    try:
        await archive.append(KEY, [first], OpContext())
    finally:
        await archive.aclose()
    groups = [first]
    for seq in range(1, CRAFTED + 1):
        group = plain_group(seq, "a" * BIG)
        stored = pack(group.canonical_bytes())
        assert len(stored) < BIG // 100  # tiny on disk
        put_group_row(path, KEY, seq, stored, group.digest)
        groups.append(group)
    assert (await anyio.Path(path).stat()).st_size < 2 * CRAFTED * BIG // 100
    return groups


async def test_one_read_inflates_no_more_than_its_budget_and_paging_on_returns_every_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inflated: list[int]
) -> None:
    monkeypatch.setattr(_sqlite_archive, "READ_BUDGET", BUDGET, raising=False)
    path = tmp_path / "a.db"
    groups = await _crafted(path)
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    try:
        with anyio.fail_after(30):
            page = list(await archive.read_groups(KEY, 0, 100, OpContext()))
        # Before: all 17 groups, 32 MB inflated by one call from a file of a few hundred KB.
        assert inflated[0] <= BUDGET + 1, inflated[0]
        assert 1 <= len(page) < len(groups) and page == groups[: len(page)]
        assert sum(g.size_bytes for g in page) <= BUDGET
        # Paging on from the last seq + 1 until an empty page: every group, in order, each call
        # within the budget.
        read, start, calls = list(page), page[-1].seq + 1, 1
        while True:
            inflated[0] = 0
            with anyio.fail_after(30):
                more = list(await archive.read_groups(KEY, start, 100, OpContext()))
            assert inflated[0] <= BUDGET + 1, inflated[0]
            if not more:
                break
            read.extend(more)
            start, calls = more[-1].seq + 1, calls + 1
        assert read == groups and calls >= CRAFTED * BIG // BUDGET
    finally:
        await archive.aclose()


async def test_a_page_holds_its_first_group_whatever_its_size_and_answers_the_same_from_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Less than one crafted group.
    monkeypatch.setattr(_sqlite_archive, "READ_BUDGET", BIG // 2, raising=False)
    path = tmp_path / "a.db"
    groups = await _crafted(path)
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    try:
        for _ in range(2):  # the second read hands back decoded groups: the same page
            assert list(await archive.read_groups(KEY, 1, 100, OpContext())) == groups[1:2]
            assert list(await archive.read_groups(KEY, 0, 100, OpContext())) == groups[:1]
    finally:
        await archive.aclose()


async def test_a_read_of_many_ordinary_groups_is_one_page_under_the_real_budget(tmp_path: Path) -> None:
    assert _sqlite_archive.READ_BUDGET == MAX_JSON_BYTES  # what docs/adapters.md states
    text = "The archive keeps every word of the conversation, in order, checked on every read. " * 12
    groups = [plain_group(seq, f"{seq} {text}") for seq in range(600)]
    archive = SQLiteArchive(SQLiteConfig(path=str(tmp_path / "a.db")))
    try:
        await archive.append(KEY, groups, OpContext())
        fresh = SQLiteArchive(SQLiteConfig(path=str(tmp_path / "a.db")))  # rows inflated, not cached
        try:
            assert list(await fresh.read_groups(KEY, 0, 1000, OpContext())) == groups
        finally:
            await fresh.aclose()
    finally:
        await archive.aclose()


async def test_the_engine_reads_a_long_history_whole_across_short_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sqlite_archive, "READ_BUDGET", 300_000, raising=False)
    config = SQLiteConfig(path=str(tmp_path / "a.db"))
    rt = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    async with rt:
        for n in range(14):  # ~100 KB a group, deflated to well under 1 KB
            await rt.append(
                ANA, "s1", [Message(Role.USER, f"u{n} " + "b" * 100_000), Message(Role.ASSISTANT, f"a{n}")]
            )
        with anyio.fail_after(30):
            page = await rt.read_history(ANA, "s1", max_groups=14)
    assert [g.seq for g in page.groups] == list(range(14))
    assert [g.group.messages[1].content for g in page.groups] == [f"a{n}" for n in range(14)]


async def _erase_ana_within_budget(
    store: SQLiteSessionStore, sessions: list[str], inflated: list[int], *, read_whole: bool
) -> None:
    """Erase user ana call by call: each call within its read budget, every session erased in order.

    ``read_whole``: every reported session came with its groups (read whole, not as damage).
    """
    target = EraseTarget.user("acme", "ana")
    erased: list[str] = []
    for _ in range(len(sessions)):
        inflated[0] = 0
        with anyio.fail_after(30):
            report = await store.erase(target, OpContext())
        # Before: 12 snapshots, 24 MB inflated by one call. Now at most one snapshot past the budget.
        assert inflated[0] < BUDGET + 2 * BIG + 4096, inflated[0]
        erased += [entry.session.session for entry in report.sessions]
        if read_whole:
            assert all(entry.groups for entry in report.sessions)  # each read whole, not as damage
        if report.status is EraseStatus.COMPLETE:
            break
        assert report.sessions  # a partial call erased something
    assert erased == sessions
    for session in sessions:
        assert await store.load(SessionKey("acme", "ana", session), OpContext()) is None


async def test_a_session_store_erase_call_reads_snapshots_within_its_budget_and_erases_every_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inflated: list[int]
) -> None:
    # Each session's resident group is a crafted 2 MB of one letter, a few KB on disk: an erasure of
    # the user read (inflated) every snapshot for its report in one call, up to max_items of them.
    monkeypatch.setattr(sqlite_module, "READ_BUDGET", BUDGET, raising=False)
    config = SQLiteConfig(path=str(tmp_path / "a.db"))
    store = SQLiteSessionStore(config)
    sessions = [f"s{n:02}" for n in range(12)]
    try:
        for session in sessions:
            snapshot = seal_snapshot(
                SessionSnapshot(Scope("acme", "ana", session), 0, 1, (plain_group(0, "a" * BIG),))
            )
            await store.save(SessionKey("acme", "ana", session), snapshot, None, OpContext())
        await _erase_ana_within_budget(store, sessions, inflated, read_whole=True)
    finally:
        await store.aclose()


async def test_an_erase_call_counts_what_it_inflated_of_a_snapshot_that_turned_out_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inflated: list[int]
) -> None:
    # Each session's snapshot holds a crafted 2 MB resident group (a few KB on disk) and a second
    # group whose row was then deleted: the report's read inflates the 2 MB, then finds the snapshot
    # damaged and reports it without groups. Those bytes were read all the same and must count
    # against the call's budget; counted as the 0 bytes reported, one call read every snapshot.
    monkeypatch.setattr(sqlite_module, "READ_BUDGET", BUDGET, raising=False)
    path = tmp_path / "a.db"
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    sessions = [f"s{n:02}" for n in range(12)]
    try:
        for session in sessions:
            resident = (plain_group(0, "a" * BIG), plain_group(1, "tail"))
            snapshot = seal_snapshot(SessionSnapshot(Scope("acme", "ana", session), 0, 2, resident))
            await store.save(SessionKey("acme", "ana", session), snapshot, None, OpContext())
        conn = sqlite3.connect(str(path))
        try:
            for session in sessions:
                found = find_session(conn, SessionKey("acme", "ana", session))
                assert found is not None
                gone = conn.execute("DELETE FROM groups WHERE id = ?", (row_id(found.sid, 1, False),))
                assert gone.rowcount == 1
            conn.commit()
        finally:
            conn.close()
        await _erase_ana_within_budget(store, sessions, inflated, read_whole=False)
    finally:
        await store.aclose()
