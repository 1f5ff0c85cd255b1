"""The SQLite archive and recall store report a short malformed stored digest as ``""`` and erase its row.

A group's digest column edited behind the stores' back to a value within
the digest's size bound but not of its form (``garbage``, upper-case hex, a
BLOB or an integer, a NUL inside) was read and reported by ``erase`` as
stored. The engine refuses a report digest that is neither ``""`` nor
``sha256:`` and 64 lowercase hex digits (``ContractViolationError``: the
digest goes into the tombstone), so the erasure of that session could never
complete. Now the form is checked in the statement, as the size bound was,
and such a group is reported with digest ``""`` and erased all the same (as
the PostgreSQL plugin does).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _oversize_support import ctx as _ctx
from _oversize_support import erased_digests, five_turns, group_ids
from _oversize_support import raw_sql as _sql

from agentium_harness import EraseTarget
from agentium_harness._ports.archive import ArchiveReceipt
from agentium_harness._ports.erasure import EraseReport
from agentium_harness._scope import SessionKey
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
DIGEST_FORM = re.compile(r"sha256:[0-9a-f]{64}")
GROUPS = [plain_group(seq, " about the kettle") for seq in range(3)]

#: Stored digests within the digest's size bound (at most 71 characters) but not of its form, as
#: SQL over the column's own value (``{col}``), which is a valid digest before.
MALFORMED = {
    "garbage": "'garbage'",
    "upper-case hex": "upper({col})",
    "a BLOB of a valid digest": "CAST({col} AS BLOB)",
    "an integer": "5",
    "a NUL inside": "substr({col}, 1, 70) || char(0)",
    "one hex digit short": "substr({col}, 1, 70)",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _digests(report: EraseReport) -> dict[int, str]:
    return {seq: digest for entry in report.sessions for seq, digest in entry.groups}


async def test_a_runtime_erasure_completes_over_a_group_whose_digest_was_edited_to_garbage(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.db"
    await five_turns(path)
    assert _sql(
        path, "UPDATE groups SET digest = 'garbage' WHERE id IN (?, ?) RETURNING id", group_ids(path, 1)
    )
    recorded = await erased_digests(path, EraseTarget.session("acme", "ana", "s1"))
    assert recorded[1] == ""
    assert DIGEST_FORM.fullmatch(recorded[0]) and DIGEST_FORM.fullmatch(recorded[2])
    assert _sql(path, "SELECT count(*) FROM groups") == [(0,)]


@pytest.mark.parametrize("damage", list(MALFORMED))
async def test_the_archive_reports_a_malformed_stored_digest_as_unvouched_and_erases_the_group(
    tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "a.db"
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    try:
        receipts = await archive.append(KEY, GROUPS, _ctx())
        value = MALFORMED[damage].format(col="digest")
        archived = group_ids(path, 1)[1]
        changed = _sql(path, f"UPDATE groups SET digest = {value} WHERE id = ? RETURNING id", (archived,))
        assert changed, "no archived row was damaged"
        expected = {0: receipts[0].digest, 1: "", 2: receipts[2].digest}
        target = EraseTarget.session("acme", "ana", "s1")
        dry = await archive.erase(target, _ctx(), dry_run=True)
        assert _digests(dry) == expected
        assert _sql(path, "SELECT count(*) FROM groups") == [(3,)]
        report = await archive.erase(target, _ctx())
        assert _digests(report) == expected
        assert report.count("group") == 3
        assert _sql(path, "SELECT count(*) FROM groups") == [(0,)]
    finally:
        await archive.aclose()


@pytest.mark.parametrize("damage", list(MALFORMED))
async def test_the_recall_store_reports_a_malformed_group_revision_as_unvouched_and_erases_it(
    tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "recall.db"
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(path)))
    try:
        receipts = [ArchiveReceipt(g.seq, g.digest, f"test/{g.seq}") for g in GROUPS]
        await store.index_groups(KEY, GROUPS, receipts, _ctx())
        value = MALFORMED[damage].format(col="revision")
        changed = _sql(path, f"UPDATE recall_sources SET revision = {value} WHERE seq = 1 RETURNING id")
        assert changed, "no group entry was damaged"
        expected = {0: GROUPS[0].digest, 1: "", 2: GROUPS[2].digest}
        target = EraseTarget.user("acme", "ana")
        assert _digests(await store.erase(target, _ctx(), dry_run=True)) == expected
        assert _sql(path, "SELECT count(*) FROM recall_sources") == [(3,)]
        report = await store.erase(target, _ctx())
        assert _digests(report) == expected
        assert report.count("group") == 3
        assert _sql(path, "SELECT count(*) FROM recall_sources") == [(0,)]
    finally:
        await store.aclose()
