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
    only_ana_s1_gone,
)

from agentium_harness import EraseTarget, ErasureState, OpContext
from agentium_harness.plugin_api import count_items

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


#: Groups 1-3 (archived by adoption, below the boundary 4) get archive rows of their own: the
#: store's rows of them are stale copies.
ARCHIVE_COPIES_OF_1_TO_3 = (
    "INSERT INTO groups (id, digest, data) SELECT id + 1, digest, data FROM groups "
    "WHERE id >= (:sid << 33) + 2 AND id <= (:sid << 33) + 6 AND (id & 1) = 0"
)
#: 1,100 store rows of ana/s1 at seqs 10, 12, ... 2,208: outside its snapshot (4-5), one run each.
SCATTERED = (
    "INSERT INTO groups (id, digest, data) WITH RECURSIVE n(k) AS (SELECT 0 UNION ALL "
    "SELECT k + 1 FROM n WHERE k < 1099) SELECT :g4 + 4 * k + 12, digest, data FROM groups, n WHERE id = :g4"
)


@pytest.mark.parametrize("bound", [1, 2, 3])
@pytest.mark.parametrize("dry_run", [True, False])
async def test_stale_copies_the_archive_deletes_stay_within_the_call_bound(
    tmp_path: Path, bound: int, dry_run: bool
) -> None:
    # Each stale copy deleted is counted damaged besides its group: a call bounded to 2 items
    # reported 3 (group 2, damaged 1), which the engine refuses (ContractViolationError) after the
    # call committed its deletions.
    path = tmp_path / "agentium.db"
    before, digests = await _damaged(path, ARCHIVE_COPIES_OF_1_TO_3)
    after_setup = _by_session(path)
    runtime, archive, store = _runtime(path, max_groups=2)
    async with runtime:
        if dry_run:
            report = await archive.erase(TARGET, OpContext(), dry_run=True, max_items=bound)
            assert 1 <= report.removed <= bound and report.status.value == "partial"
            assert _by_session(path) == after_setup  # nothing deleted, the copies neither
            return
        totals: dict[str, int] = {}
        groups: list[tuple[int, str]] = []
        for _ in range(20):
            report = await archive.erase(TARGET, OpContext(), max_items=bound)
            assert 1 <= report.removed <= bound or report.status.value == "complete"
            for count in report.counts:
                totals[count.kind] = totals.get(count.kind, 0) + count.count
            groups += [g for s in report.sessions for g in s.groups]
            if report.status.value == "complete":
                break
        # Groups 0-3 (1-3 by the archive's own rows, of the same digests), each copy once.
        assert totals == {"group": 4, "damaged": 3} and sorted(groups) == digests[:4]
        assert (await store.erase(TARGET, OpContext())).count("snapshot") == 1
    only_ana_s1_gone(path, before)


async def test_scattered_store_rows_are_erased_within_the_call_bound(tmp_path: Path) -> None:
    # Too scattered to list, the rows were counted damaged all in one call: 1,101 items for a
    # call bounded to 1,000; the engine refused the report after the call had deleted them, and
    # the erasure stopped (ErasureIncompleteError) with nothing of them in its record.
    path = tmp_path / "agentium.db"
    before, _ = await _damaged(path, SCATTERED)
    runtime, _, store = _runtime(path, max_groups=2)
    async with runtime:
        after_setup = _by_session(path)
        dry = await store.erase(TARGET, OpContext(), dry_run=True, max_items=400)
        assert dry.counts == count_items(damaged=400) and _by_session(path) == after_setup
        result = await runtime.erase(TARGET, reason="dsr", attestation=OPERATOR)
        assert result.record.state is ErasureState.COMPLETE
        counts = {s.role: {c.kind: c.count for c in s.counts} for s in result.record.stores}
        # 1,000 rows counted in the first call; the 100 left listed with the snapshot's 4 and 5.
        assert counts["session_store"] == {"damaged": 1000, "snapshot": 1}
        (erased,) = result.record.sessions
        # Every group named: the plan (a dry run bounded to 100,000 items) listed each row.
        assert erased.count == 6 + 1100 and erased.snapshot
    only_ana_s1_gone(path, before)
