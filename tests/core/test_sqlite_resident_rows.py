"""Which resident rows a SQLite snapshot save writes, rewrites and deletes (schema versions 2 and 3).

A save writes only the resident rows that are new or hold another digest,
in seq order, and deletes the rows the snapshot no longer holds; the file
then holds exactly the snapshot's groups, and a fresh store loads it back
byte for byte.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentium_harness import Scope, SessionKey
from agentium_harness._ports import OpContext
from agentium_harness.adapters.sqlite import SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import SessionSnapshot, seal_snapshot, snapshot_bytes
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")


def _snapshot(boundary: int, next_seq: int, texts: dict[int, str]) -> SessionSnapshot:
    groups = tuple(plain_group(seq, texts.get(seq, "")) for seq in range(boundary, next_seq))
    scope = Scope(KEY.tenant, KEY.user, KEY.session)
    return seal_snapshot(SessionSnapshot(scope, boundary, next_seq, groups))


def _resident_rows(path: Path) -> dict[int, bytes]:
    """The session store's rows (even ids): seq to data."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT id, data FROM groups WHERE (id & 1) = 0").fetchall()
    return {(i >> 1) & 0xFFFFFFFF: bytes(d) for i, d in rows}


async def test_a_save_writes_new_and_changed_rows_and_deletes_the_rows_it_no_longer_holds(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agentium.db"
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    try:
        revision = None
        steps = [
            (0, 4, {}),
            (1, 5, {2: " changed"}),  # 0 dropped, 2 rewritten, 4 new
            (1, 6, {2: " changed", 3: " again", 4: " again"}),  # two rewritten, one new
            (3, 6, {3: " again", 4: " again"}),  # two dropped, none new
            (3, 6, {}),  # all three rewritten
        ]
        for boundary, next_seq, texts in steps:
            snapshot = _snapshot(boundary, next_seq, texts)
            revision = await store.save(KEY, snapshot, revision, OpContext())
            assert _resident_rows(path) == {g.seq: g.canonical_bytes() for g in snapshot.resident}
            fresh = SQLiteSessionStore(SQLiteConfig(path=str(path)))
            try:
                loaded = await fresh.load(KEY, OpContext())
            finally:
                await fresh.aclose()
            assert loaded is not None and loaded.revision == revision
            assert snapshot_bytes(loaded.snapshot) == snapshot_bytes(snapshot)
        # A snapshot this layout cannot split (seqs not from the boundary on) is stored whole:
        # the resident rows go.
        whole = seal_snapshot(SessionSnapshot(Scope("acme", "ana", "s1"), 3, 9, (plain_group(5),)))
        revision = await store.save(KEY, whole, revision, OpContext())
        assert _resident_rows(path) == {}
        assert (await store.load(KEY, OpContext())) is not None
    finally:
        await store.aclose()
