"""A damaged SQLite file's erasure leaves no row of the erased session and says what it erased.

Two states no write of the adapters makes, but a damaged or hand-edited file
can hold (docs/adapters.md): a session with no snapshot still holding store
rows, one of them beside the archive's own row of the same group; and a
watermark moved back below a boundary that is itself damaged, where the rows
between the two may be archived groups or the store's.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_sqlite_layout import (
    KEY,
    OPERATOR,
    _by_session,
    _runtime,
    _three_sessions_one_watermark_moved_back,
)

from agentium_harness import EraseTarget, ErasureState, OpContext

pytestmark = pytest.mark.anyio

TARGET = EraseTarget.session("acme", "ana", "s1")


def _ana_s1(conn: sqlite3.Connection) -> int:
    (sid,) = conn.execute("SELECT sid FROM sessions WHERE user_id = 'ana' AND session_id = 's1'").fetchone()
    return int(sid)


def _digests(path: Path, seqs: range) -> list[tuple[int, str]]:
    """The digest of each of ana/s1's store rows (``archived = 0``) of ``seqs``."""
    with sqlite3.connect(path) as conn:
        sid = _ana_s1(conn)
        return [
            (
                seq,
                conn.execute(
                    "SELECT digest FROM groups WHERE id = ?", ((sid << 33) + (seq << 1),)
                ).fetchone()[0],
            )
            for seq in seqs
        ]


@pytest.mark.parametrize("first", ["archive", "store", "runtime"])
async def test_store_rows_of_a_session_with_no_snapshot_are_erased_and_reported(
    tmp_path: Path, first: str
) -> None:
    # ana/s1 lost its snapshot columns (revision NULL) but kept its resident rows 4 and 5, and
    # group 4 has an archive row of its own too. The store's erasure covers only sessions with a
    # snapshot and the archive's took only rows below the watermark (4): both said complete and
    # rows 4 and 5 of the store were left in the file, the session's row with them.
    path = tmp_path / "agentium.db"
    before = await _three_sessions_one_watermark_moved_back(path)
    with sqlite3.connect(path) as conn:
        sid = _ana_s1(conn)
        conn.execute(
            "UPDATE sessions SET adopted = 4, revision = NULL, boundary = NULL, next_seq = NULL, "
            "inline = NULL, snapshot = NULL WHERE sid = ?",
            (sid,),
        )
        conn.execute(
            "INSERT INTO groups (id, digest, data) SELECT id + 1, digest, data FROM groups WHERE id = ?",
            ((sid << 33) + (4 << 1),),
        )
    digests = _digests(path, range(6))
    runtime, archive, store = _runtime(path, max_groups=2)
    async with runtime:
        if first == "runtime":
            result = await runtime.erase(TARGET, reason="dsr", attestation=OPERATOR)
            assert result.record.state is ErasureState.COMPLETE
            counts = {s.role: {c.kind: c.count for c in s.counts} for s in result.record.stores}
            assert counts["archive"] == {"group": 6, "damaged": 1}
        else:
            adapters = (archive, store) if first == "archive" else (store, archive)
            reports = [await adapter.erase(TARGET, OpContext()) for adapter in adapters]
            assert all(r.status.value == "complete" for r in reports)
            erased = reports[0] if first == "archive" else reports[1]
            # Groups 0-5 (4 by the archive's own row, 5 by the store's: no other copy of it), and
            # the store's copy of group 4 counted as damaged: it may hold other content.
            assert [g for s in erased.sessions for g in s.groups] == digests
            assert erased.count("group") == 6 and erased.count("damaged") == 1
        assert await archive.read_groups(KEY, 0, 10, OpContext()) == []
    after = _by_session(path)
    assert "ana/s1" not in after
    assert after["ana/s2"] == before["ana/s2"] and after["bob/s1"] == before["bob/s1"]


@pytest.mark.parametrize("how", ["adapters", "runtime"])
async def test_rows_between_a_watermark_moved_back_and_a_damaged_boundary_are_reported(
    tmp_path: Path, how: str
) -> None:
    # With the boundary no seq of the session, the store's erasure cannot tell its rows from the
    # archive's adopted ones above the moved-back watermark (1): it deleted rows 1-5 and reported
    # the snapshot with no groups, the archive group 0 only; groups 1-3 (archived) left no trace.
    path = tmp_path / "agentium.db"
    before = await _three_sessions_one_watermark_moved_back(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE sessions SET boundary = ?, next_seq = 6 WHERE sid = ?", (2**40, _ana_s1(conn)))
    digests = _digests(path, range(6))
    runtime, archive, store = _runtime(path, max_groups=2)
    async with runtime:
        if how == "runtime":
            result = await runtime.erase(TARGET, reason="dsr", attestation=OPERATOR)
            assert result.record.state is ErasureState.COMPLETE
            (erased,) = result.record.sessions
            assert erased.count == 6 and erased.snapshot
            assert [(r.start, r.stop) for r in erased.ranges] == [(0, 6)]
        else:
            dry = await store.erase(TARGET, OpContext(), dry_run=True)
            report = await store.erase(TARGET, OpContext())
            assert dry.sessions == report.sessions
            assert report.count("snapshot") == 1
            assert [g for s in report.sessions for g in s.groups] == digests[1:]
            archived = await archive.erase(TARGET, OpContext())
            assert [g for s in archived.sessions for g in s.groups] == digests[:1]
    after = _by_session(path)
    assert "ana/s1" not in after
    assert after["ana/s2"] == before["ana/s2"] and after["bob/s1"] == before["bob/s1"]
