"""The SQLite archive hands back the group it decoded from the same row bytes, and re-checks any change.

An agent loop reads the same archived history every turn; decoding and
re-checking identical bytes again would give an equal group at a cost that
grows with the history (issue 22, item 4). Reuse is keyed by the row's exact
bytes: a row changed in any way is decoded and checked afresh, so damage is
still refused on the next read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentium_harness import ArchiveCorruptError, Message, Role, VerifiedIdentity
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig
from agentium_harness.plugin_api import MessageGroup, OpContext, SessionKey
from agentium_harness.testing.sqlite_rows import group_row, set_group_row

pytestmark = pytest.mark.anyio

KEY = SessionKey.of(VerifiedIdentity("acme", "ana", "sso"), "chat-1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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
