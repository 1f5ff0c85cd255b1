"""A session store holding one snapshot, and its stored row as damage or a stray tool sees it.

Shared by the tests that damage a stored snapshot in place and check that every store refuses it
on decode and leaves the row as it is (in-memory and SQLite stores alike).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentium_harness._codec import canonical_json, digest_bytes
from agentium_harness._errors import SnapshotCorruptError
from agentium_harness._ports import OpContext
from agentium_harness._scope import SessionKey
from agentium_harness.adapters.memory import InMemorySessionStore
from agentium_harness.adapters.sqlite import SQLiteConfig, SQLiteSessionStore
from agentium_harness.testing import scoped_snapshot
from agentium_harness.testing.sqlite_rows import set_snapshot_row, snapshot_row

KEY = SessionKey("tenant", "user", "session")


def resealed(data: bytes, edit: Callable[[dict[str, Any]], None]) -> bytes:
    """``data`` with ``edit`` applied and a digest matching it: only the edited value is wrong."""
    plain = json.loads(data)
    edit(plain)
    plain["digest"] = None
    plain["digest"] = digest_bytes(canonical_json(plain))
    return canonical_json(plain)


class Rows:
    """One session store holding a snapshot of ``KEY``, and its stored row as a stray tool sees it."""

    def __init__(self, store: Any, read: Callable[[], Any], write: Callable[[bytes], None]) -> None:
        self.store, self.read, self.write = store, read, write

    def data(self) -> bytes:
        """The stored snapshot's bytes."""
        found = self.read()
        assert found is not None
        return bytes(found[1])


#: The stores :func:`stored_rows` makes, for a fixture's ``params``.
KINDS = ("memory", "sqlite")


@asynccontextmanager
async def stored_rows(kind: str, tmp_path: Path) -> AsyncIterator[Rows]:
    """An in-memory (``kind="memory"``) or a SQLite session store holding ``scoped_snapshot(KEY)``."""
    if kind == "memory":
        memory = InMemorySessionStore()
        await memory.save(KEY, scoped_snapshot(KEY), None, OpContext())

        def put(data: bytes) -> None:
            found = memory.raw(KEY)
            assert found is not None
            memory.put_raw(KEY, found[0], data)

        yield Rows(memory, lambda: memory.raw(KEY), put)
        return
    db = tmp_path / "agentium.db"
    sqlite = SQLiteSessionStore(SQLiteConfig(path=str(db)))
    try:
        await sqlite.save(KEY, scoped_snapshot(KEY), None, OpContext())
        yield Rows(sqlite, lambda: snapshot_row(db, KEY), lambda data: set_snapshot_row(db, KEY, data))
    finally:
        await sqlite.aclose()


async def refused_and_left_alone(rows: Rows, damaged: bytes) -> None:
    """``damaged`` written over the row is refused on load, twice, and the row stays as written."""
    rows.write(damaged)
    before = rows.read()
    for _ in range(2):  # refused each time: nothing was rewritten in between
        with pytest.raises(SnapshotCorruptError, match="cannot be decoded"):
            await rows.store.load(KEY, OpContext())
    assert rows.read() == before
