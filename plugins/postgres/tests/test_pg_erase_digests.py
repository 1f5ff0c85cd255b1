"""Archived groups whose stored digest was damaged: reads refuse it unread, erasure reports it as "".

The application role may INSERT into ``archive_groups`` and UPDATE
``recall_sources`` within its tenant. A group row stored with a digest that
is not ``sha256:`` and 64 lowercase hex digits (or one of 8 MiB) was:

- transferred whole by ``read_groups`` before its check refused it;
- transferred whole by the archive's and the recall store's ``erase`` and put
  into the report as it was, which the engine refuses
  (``ContractViolationError``: the digest goes into the tombstone), so the
  erasure of that session could never complete.

Now a read refuses an oversized digest unread (``PostgresRowTooLargeError``)
and an erase reports every digest it cannot vouch for as ``""`` (the port's
form for it, as the SQLite and S3 archives do), checked on the server, and
erases the row all the same.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from agentium_harness.plugin_api import ArchiveReceipt, EraseReport, EraseTarget, OpContext, SessionKey
from agentium_harness.testing import plain_group
from agentium_postgres import PostgresArchive, PostgresConfig, PostgresRecallStore, PostgresRowTooLargeError

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
DIGEST_FORM = re.compile(r"sha256:[0-9a-f]{64}")
HUGE = 8 * 1024 * 1024


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _digests(report: EraseReport) -> dict[int, str]:
    return {seq: digest for entry in report.sessions for seq, digest in entry.groups}


async def _insert_group(conn: psycopg.AsyncConnection[Any], schema: str, seq: int, digest_sql: str) -> None:
    async with conn.transaction():
        await conn.execute("SELECT set_config('agentium.tenant', 'acme', true)")
        await conn.execute(
            f'INSERT INTO "{schema}".archive_groups (tenant_key, user_key, session_key, seq, digest, data) '
            f"VALUES ('acme', 'ana', 's1', %s, {digest_sql}, %s)",
            (seq, plain_group(seq).canonical_bytes()),
        )


async def test_an_archived_group_with_a_damaged_digest_is_refused_unread_and_erased_as_unvouched(
    app_config: PostgresConfig,
    app_conn: psycopg.AsyncConnection[Any],
    admin: psycopg.Connection[Any],
    schema: str,
) -> None:
    archive = PostgresArchive(app_config)
    try:
        (receipt,) = await archive.append(KEY, [plain_group(0)], _ctx())
        await _insert_group(app_conn, schema, 1, "'garbage'")
        await _insert_group(app_conn, schema, 2, f"repeat('a', {HUGE})")
        with pytest.raises(PostgresRowTooLargeError, match="not read"):
            await archive.read_groups(KEY, 2, 1, _ctx())
        for dry_run in (True, False):
            report = await archive.erase(EraseTarget.session("acme", "ana", "s1"), _ctx(), dry_run=dry_run)
            assert _digests(report) == {0: receipt.digest, 1: "", 2: ""}
            assert all(d == "" or DIGEST_FORM.fullmatch(d) for d in _digests(report).values())
        count = admin.execute(f'SELECT count(*) FROM "{schema}".archive_groups').fetchone()
        assert count == (0,)
    finally:
        await archive.aclose()


async def test_a_recall_group_entry_with_a_damaged_revision_is_erased_as_unvouched(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    store = PostgresRecallStore(app_config)
    try:
        groups = [plain_group(seq) for seq in range(3)]
        receipts = [ArchiveReceipt(g.seq, g.digest, f"test/{g.seq}") for g in groups]
        await store.index_groups(KEY, groups, receipts, _ctx())
        admin.execute(f"UPDATE \"{schema}\".recall_sources SET revision = 'garbage' WHERE seq = 1")
        admin.execute(f"UPDATE \"{schema}\".recall_sources SET revision = repeat('b', {HUGE}) WHERE seq = 2")
        report = await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert _digests(report) == {0: groups[0].digest, 1: "", 2: ""}
        count = admin.execute(f'SELECT count(*) FROM "{schema}".recall_sources').fetchone()
        assert count == (0,)
    finally:
        await store.aclose()
