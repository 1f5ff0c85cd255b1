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
    _runtime,
    _three_sessions_one_watermark_moved_back,
    only_ana_s1_gone,
)

from agentium_harness import EraseTarget, ErasureState, OpContext

pytestmark = pytest.mark.anyio

TARGET = EraseTarget.session("acme", "ana", "s1")
#: ana/s1 lost its snapshot columns (revision NULL) but kept its resident rows 4 and 5.
NO_SNAPSHOT = (
    "UPDATE sessions SET adopted = 4, revision = NULL, boundary = NULL, next_seq = NULL, "
    "inline = NULL, snapshot = NULL WHERE sid = :sid"
)
#: Group 4 gets an archive row of its own beside the store's.
ARCHIVE_COPY_OF_4 = (
    "INSERT INTO groups (id, digest, data) SELECT id + 1, digest, data FROM groups WHERE id = :g4"
)


async def _damaged(
    path: Path, *statements: str, **values: int
) -> tuple[dict[str, list[object]], list[object]]:
    """Three sessions (ana/s1's watermark moved back to 1), then ``statements`` run on ana/s1.

    Returns every session's rows before, and the ``(seq, digest)`` of ana/s1's store row of each
    seq 0-5: the groups its erasure must report.
    """
    before = await _three_sessions_one_watermark_moved_back(path)
    with sqlite3.connect(path) as conn:
        query = "SELECT sid FROM sessions WHERE user_id = 'ana' AND session_id = 's1'"
        (sid,) = conn.execute(query).fetchone()
        for statement in statements:
            conn.execute(statement, {"sid": sid, "g4": (sid << 33) + (4 << 1), **values})
        digests = [
            (
                seq,
                conn.execute(
                    "SELECT digest FROM groups WHERE id = ?", ((sid << 33) + (seq << 1),)
                ).fetchone()[0],
            )
            for seq in range(6)
        ]
    return before, digests


@pytest.mark.parametrize("first", ["archive", "store", "runtime"])
async def test_store_rows_of_a_session_with_no_snapshot_are_erased_and_reported(
    tmp_path: Path, first: str
) -> None:
    # The store's erasure covers only sessions with a snapshot and the archive's took only rows
    # below the watermark (4): both said complete and the store's rows 4 and 5 were left in the
    # file, the session's row with them.
    path = tmp_path / "agentium.db"
    before, digests = await _damaged(path, NO_SNAPSHOT, ARCHIVE_COPY_OF_4)
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
    only_ana_s1_gone(path, before)


@pytest.mark.parametrize("how", ["adapters", "runtime"])
@pytest.mark.parametrize(("boundary", "next_seq", "archived"), [(2**40, 6, 1), (2**32, 2**32, 6)])
async def test_rows_between_a_watermark_moved_back_and_a_damaged_boundary_are_reported(
    tmp_path: Path, how: str, boundary: int, next_seq: int, archived: int
) -> None:
    # A boundary that is no seq of the session (past its next seq) leaves the watermark (1) where
    # it is; one at the last seq (2**32) hands every row to the archive: neither reaches another
    # session's row ids. In the first case the store's erasure cannot tell its rows from the
    # archive's adopted ones: it deleted rows 1-5 and reported the snapshot with no groups, the
    # archive group 0 only, and groups 1-3 (archived) left no trace in the record.
    path = tmp_path / "agentium.db"
    update = "UPDATE sessions SET boundary = :boundary, next_seq = :next_seq WHERE sid = :sid"
    before, digests = await _damaged(path, update, boundary=boundary, next_seq=next_seq)
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
            assert [g for s in report.sessions for g in s.groups] == digests[archived:]
            taken = await archive.erase(TARGET, OpContext())
            assert [g for s in taken.sessions for g in s.groups] == digests[:archived]
    only_ana_s1_gone(path, before)
