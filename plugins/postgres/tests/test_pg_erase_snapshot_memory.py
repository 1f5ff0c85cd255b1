"""The session store's erase holds one snapshot at a time, not ``max_items`` of them (real PostgreSQL).

An erase reads each snapshot it removes, for its resident groups' seqs and
digests. It fetched every matched snapshot (up to ``max_items`` + 1, each up
to ``max_row_bytes``) in one result set, so an erasure of a user with many
large sessions held all of them in memory at once: 1000 snapshots of 16 MiB
is 16 GB. It now reads the keys and sizes first, then the snapshots in
batches of at most ``SNAPSHOT_BATCH_BYTES`` (or one snapshot), each decoded
before the next is fetched; the server enforces the batch's budget as well,
so a snapshot grown since its size was read is fetched by a later statement.
tracemalloc's peak over the erase tells how many snapshots were held.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
from psycopg import sql

import agentium_postgres.erase as erase_module
from agentium_harness.plugin_api import (
    EraseReport,
    EraseStatus,
    EraseTarget,
    OpContext,
    SessionKey,
    snapshot_bytes,
    snapshot_erasure,
)
from agentium_harness.testing import scoped_snapshot
from agentium_postgres import PostgresConfig, PostgresSessionStore

pytestmark = pytest.mark.anyio

SESSIONS = 8
#: Each snapshot's marker: a snapshot is about twice this (a rich group repeats it), over the budget.
MARKER_CHARS = 1024 * 1024


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _count(admin: psycopg.Connection[Any], schema: str) -> int:
    row = admin.execute(
        sql.SQL("SELECT count(*) FROM {}.session_snapshots").format(sql.Identifier(schema))
    ).fetchone()
    return -1 if row is None else int(row[0])


async def _seed(
    store: PostgresSessionStore, keys: Sequence[SessionKey]
) -> tuple[dict[SessionKey, list[tuple[int, str]]], int]:
    """A large snapshot saved for each of ``keys``: their (seq, digest) pairs, and the largest's size."""
    expected, largest = {}, 0
    for n, key in enumerate(keys):
        snapshot = scoped_snapshot(key, " " + chr(ord("a") + n) * MARKER_CHARS, groups=1)
        size = len(snapshot_bytes(snapshot))
        assert size > erase_module.SNAPSHOT_BATCH_BYTES  # so each is a batch of its own
        await store.save(key, snapshot, None, _ctx())
        expected[key] = [(g.seq, g.digest) for g in snapshot.resident]
        largest = max(largest, size)
    return expected, largest


def _decoding_peak(key: SessionKey, size: int) -> int:
    """tracemalloc's peak while one snapshot of about ``size`` bytes is decoded for an erasure report."""
    data = snapshot_bytes(scoped_snapshot(key, " " + "z" * MARKER_CHARS, groups=1))
    assert len(data) == size
    tracemalloc.start()
    try:
        snapshot_erasure(key, data)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def _traced_erase(
    store: PostgresSessionStore, target: EraseTarget, dry_run: bool
) -> tuple[EraseReport, int]:
    tracemalloc.start()
    try:
        report = await store.erase(target, _ctx(), dry_run=dry_run)
        return report, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("server_budget_only", [False, True])
async def test_erasing_many_large_snapshots_holds_about_one_at_a_time(
    app_config: PostgresConfig,
    admin: psycopg.Connection[Any],
    schema: str,
    monkeypatch: pytest.MonkeyPatch,
    server_budget_only: bool,
) -> None:
    if server_budget_only:
        # Every snapshot in one statement's list, as if each had grown since its size was read:
        # the server's running sum must still hand back one snapshot a statement, the rest later.
        monkeypatch.setattr(erase_module, "_first_batch", lambda rows, budget: list(rows))
    store = PostgresSessionStore(app_config)
    keys = [SessionKey("acme", "ana", f"s{n}") for n in range(SESSIONS)]
    try:
        expected, size = await _seed(store, keys)
        decoding = _decoding_peak(keys[0], size)
        target = EraseTarget.user("acme", "ana")
        for dry_run in (True, False):
            report, peak = await _traced_erase(store, target, dry_run)
            assert {s.session: list(s.groups) for s in report.sessions} == expected
            assert report.count("snapshot") == SESSIONS
            # One snapshot's bytes, its decoded form and the report: far below the 8 snapshots (16+
            # MiB) one result set held.
            # Decoding one snapshot (strictly, every digest checked) takes several times its size;
            # past that, one snapshot's bytes (and slack: 2 more). One result set of every snapshot
            # held all 8 at once, 5 snapshots more than this allows (old peak: 45 MB, now 23 MB).
            assert peak < decoding + 3 * size, f"{peak} bytes traced; decoding one takes {decoding}"
            assert _count(admin, schema) == (SESSIONS if dry_run else 0)
    finally:
        await store.aclose()


async def test_small_snapshots_are_read_in_batches_and_each_reported(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A budget of about two small snapshots: batches of two, then a remainder; a max_items cut too.
    store = PostgresSessionStore(app_config)
    keys = [SessionKey("acme", "ana", f"s{n}") for n in range(5)]
    try:
        expected = {}
        for key in keys:
            snapshot = scoped_snapshot(key, " small")
            await store.save(key, snapshot, None, _ctx())
            expected[key] = [(g.seq, g.digest) for g in snapshot.resident]
        one = len(snapshot_bytes(scoped_snapshot(keys[0], " small")))
        monkeypatch.setattr(erase_module, "SNAPSHOT_BATCH_BYTES", 2 * one + one // 2)
        first = await store.erase(EraseTarget.user("acme", "ana"), _ctx(), max_items=3)
        assert {s.session: list(s.groups) for s in first.sessions} == {k: expected[k] for k in keys[:3]}
        assert first.status is EraseStatus.PARTIAL
        rest = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert {s.session: list(s.groups) for s in rest.sessions} == {k: expected[k] for k in keys[3:]}
        assert _count(admin, schema) == 0
    finally:
        await store.aclose()
