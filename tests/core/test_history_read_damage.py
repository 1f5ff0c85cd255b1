"""``read_history`` over the SQLite adapters fails closed on damage found after a read was answered.

The SQLite archive and session store answer a read whose rows did not change
since they last read them without reading them again (issue 22, item 4).
Every change to the file, damage included, must still be read and refused
with the same typed error as on a first read: nothing is served stale.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentium_harness import (
    ArchiveCorruptError,
    HarnessRuntime,
    Message,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SessionKey,
    SnapshotCorruptError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.testing.sqlite_rows import group_row, set_group_row, set_snapshot_row, snapshot_row

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pair(n: int) -> list[Message]:
    return [Message(Role.USER, f"question {n}"), Message(Role.ASSISTANT, f"answer {n}")]


def _runtime(path: Path) -> HarnessRuntime:
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["x"]),
        archive=archive,
        session_store=store,
        owned=(archive, store),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    return rt


async def test_an_archived_group_damaged_after_it_was_read_fails_the_read_closed(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    rt = _runtime(path)
    async with rt:
        for n in range(5):
            await rt.append(ANA, "s1", pair(n))
        first = await rt.read_history(ANA, "s1", max_groups=4)
        again = await rt.read_history(ANA, "s1", max_groups=4)
        assert [g.seq for g in first.groups] == [g.seq for g in again.groups] == [1, 2, 3, 4]
        assert again.boundary == 3  # groups 1 and 2 came from the archive
        _, data = group_row(path, KEY, 2)
        set_group_row(path, KEY, 2, data.replace(b"question 2", b"question X"))
        for _ in range(2):
            with pytest.raises(ArchiveCorruptError):
                await rt.read_history(ANA, "s1", max_groups=4)
        # The groups above the damage still read: nothing else was touched.
        newest = await rt.read_history(ANA, "s1", max_groups=2)
        assert [m.content for m in newest.messages] == ["question 3", "answer 3", "question 4", "answer 4"]


async def test_a_snapshot_damaged_after_it_was_read_fails_the_read_closed(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    rt = _runtime(path)
    async with rt:
        for n in range(5):
            await rt.append(ANA, "s1", pair(n))
        for _ in range(2):
            await rt.read_history(ANA, "s1", max_groups=2)
        stored = snapshot_row(path, KEY)
        assert stored is not None
        set_snapshot_row(path, KEY, stored[1].replace(b"answer 4", b"answer X"))
        for _ in range(2):
            with pytest.raises(SnapshotCorruptError):
                await rt.read_history(ANA, "s1", max_groups=2)
        assert snapshot_row(path, KEY) == (stored[0], stored[1].replace(b"answer 4", b"answer X"))
