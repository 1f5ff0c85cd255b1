"""The SQLite archive hands back the group it decoded from the same row bytes, and re-checks any change.

An agent loop reads the same archived history every turn; decoding and
re-checking identical bytes again would give an equal group at a cost that
grows with the history (issue 22, item 4). Reuse is keyed by the row's exact
bytes: a row changed in any way is decoded and checked afresh, so damage is
still refused on the next read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from agentium_harness import ArchiveCorruptError, Message, Role, VerifiedIdentity
from agentium_harness.adapters._sqlite_archive import RECENT_BYTES
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig
from agentium_harness.plugin_api import EraseTarget, MessageGroup, OpContext, SeqRange, SessionKey
from agentium_harness.testing.sqlite_rows import group_row, set_group_row

T = TypeVar("T")

pytestmark = pytest.mark.anyio

KEY = SessionKey.of(VerifiedIdentity("acme", "ana", "sso"), "chat-1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class CountingArchive(SQLiteArchive):
    """Counts the calls that went to a worker thread."""

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.threaded: list[str] = []

    async def run(self, ctx: OpContext, operation: str, work: Callable[[Any], T]) -> T:
        self.threaded.append(operation)
        return await super().run(ctx, operation, work)


def group(seq: int) -> MessageGroup:
    return MessageGroup(
        seq, [Message(Role.USER, f"question {seq}"), Message(Role.ASSISTANT, f"answer {seq}")]
    )


async def test_unchanged_rows_come_back_as_the_groups_already_decoded(tmp_path: Path) -> None:
    archive = SQLiteArchive(SQLiteConfig(path=str(tmp_path / "a.db")))
    try:
        await archive.append(KEY, [group(n) for n in range(3)], OpContext())
        first = await archive.read_groups(KEY, 0, 10, OpContext())
        second = await archive.read_groups(KEY, 0, 10, OpContext())
        assert list(first) == [group(n) for n in range(3)]
        assert all(a is b for a, b in zip(first, second, strict=True))
    finally:
        await archive.aclose()


async def test_a_row_changed_after_it_was_read_is_checked_again_and_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    try:
        await archive.append(KEY, [group(0)], OpContext())
        await archive.read_groups(KEY, 0, 10, OpContext())
        _, data = group_row(path, KEY, 0)
        set_group_row(path, KEY, 0, data.replace(b"answer", b"Answer"))
        with pytest.raises(ArchiveCorruptError, match="digest"):
            await archive.read_groups(KEY, 0, 10, OpContext())
        set_group_row(path, KEY, 0, data, "sha256:00")  # the bytes back, the digest column damaged
        with pytest.raises(ArchiveCorruptError, match="digest"):
            await archive.read_groups(KEY, 0, 10, OpContext())
    finally:
        await archive.aclose()


async def test_an_unchanged_read_is_answered_without_a_worker_thread(tmp_path: Path) -> None:
    archive = CountingArchive(SQLiteConfig(path=str(tmp_path / "a.db")))
    try:
        await archive.append(KEY, [group(n) for n in range(4)], OpContext())
        first = await archive.read_groups(KEY, 1, 2, OpContext())
        archive.threaded.clear()
        for _ in range(3):
            again = await archive.read_groups(KEY, 1, 2, OpContext())
            assert list(again) == [group(1), group(2)]
            assert all(a is b for a, b in zip(first, again, strict=True))
        assert archive.threaded == []
        # Another read (other bounds) still goes to the file.
        assert list(await archive.read_groups(KEY, 2, 5, OpContext())) == [group(2), group(3)]
        assert archive.threaded == ["archive read"]
    finally:
        await archive.aclose()


async def test_every_change_to_the_file_is_read_after_a_remembered_read(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    archive = CountingArchive(SQLiteConfig(path=str(path)))
    other = SQLiteArchive(SQLiteConfig(path=str(path)))
    try:
        await archive.append(KEY, [group(n) for n in range(2)], OpContext())
        assert len(await archive.read_groups(KEY, 0, 10, OpContext())) == 2
        # Its own append (its own commits never change its connection's data_version).
        await archive.append(KEY, [group(2)], OpContext())
        assert list(await archive.read_groups(KEY, 0, 10, OpContext())) == [group(n) for n in range(3)]
        # Another archive object on the file (another connection).
        await other.append(KEY, [group(3)], OpContext())
        assert list(await archive.read_groups(KEY, 0, 10, OpContext())) == [group(n) for n in range(4)]
        # Its own erasure.
        await archive.erase(EraseTarget.groups_of(KEY, [SeqRange(1, 2)]), OpContext())
        assert [g.seq for g in await archive.read_groups(KEY, 0, 10, OpContext())] == [0, 2, 3]
        # Another connection's erasure.
        await other.erase(EraseTarget.groups_of(KEY, [SeqRange(3, 4)]), OpContext())
        assert [g.seq for g in await archive.read_groups(KEY, 0, 10, OpContext())] == [0, 2]
        # A row damaged after it was read (and answered without a thread) is refused.
        archive.threaded.clear()
        await archive.read_groups(KEY, 0, 10, OpContext())
        assert archive.threaded == []
        _, data = group_row(path, KEY, 2)
        set_group_row(path, KEY, 2, data.replace(b"answer", b"Answer"))
        with pytest.raises(ArchiveCorruptError, match="digest"):
            await archive.read_groups(KEY, 0, 10, OpContext())
        with pytest.raises(ArchiveCorruptError, match="digest"):
            await archive.read_groups(KEY, 0, 10, OpContext())
    finally:
        await other.aclose()
        await archive.aclose()


class PausingArchive(SQLiteArchive):
    """Holds an append after it began (before its transaction) until ``resume`` is set."""

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.paused = anyio.Event()
        self.resume = anyio.Event()

    async def run(self, ctx: OpContext, operation: str, work: Callable[[Any], T]) -> T:
        if operation == "archive append" and not self.resume.is_set():
            self.paused.set()
            await self.resume.wait()
        return await super().run(ctx, operation, work)


async def test_a_read_during_its_own_append_is_not_remembered_past_it(tmp_path: Path) -> None:
    """A read that ran while an append of the same archive was under way read the rows before it."""
    archive = PausingArchive(SQLiteConfig(path=str(tmp_path / "a.db")))
    try:
        archive.resume.set()
        await archive.append(KEY, [group(0)], OpContext())
        archive.resume = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(archive.append, KEY, [group(1)], OpContext())
            await archive.paused.wait()
            # Read (and remembered, without the fix) after the append began, before it wrote.
            assert [g.seq for g in await archive.read_groups(KEY, 0, 10, OpContext())] == [0]
            archive.resume.set()
        # The append's own commit leaves this connection's data_version as it is.
        assert [g.seq for g in await archive.read_groups(KEY, 0, 10, OpContext())] == [0, 1]
    finally:
        await archive.aclose()


async def test_the_decoded_groups_are_bounded_by_their_canonical_bytes_not_their_stored_ones(
    tmp_path: Path,
) -> None:
    # Rows are stored deflated (schema version 4): 2 MB of one letter takes a few KB on disk. The
    # decoded groups kept must still be bounded by what they hold (RECENT_BYTES of canonical JSON),
    # or a few MB of stored rows would keep gigabytes decoded.
    archive = SQLiteArchive(SQLiteConfig(path=str(tmp_path / "a.db")))
    try:
        big = [MessageGroup(n, [Message(Role.USER, "a" * (2 * 1024 * 1024))]) for n in range(12)]
        await archive.append(KEY, big, OpContext())
        assert len(await archive.read_groups(KEY, 0, 20, OpContext())) == 12
        held = sum(entry[1].size_bytes for entry in archive._decoded.values())
        assert 0 < held <= RECENT_BYTES
    finally:
        await archive.aclose()
