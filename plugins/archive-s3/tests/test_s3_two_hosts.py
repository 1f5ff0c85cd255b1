"""Two hosts on one session, over the same bucket: a failed batch never deletes what the other committed.

Host A's eviction uploads its batch one group at a time (``max_concurrency=1``).
Just before A's upload of group 1 leaves, host B runs a whole turn on the
same session: B archives groups 0-2 (group 0 answers 412, equal bytes: a
receipt) and commits a boundary past them. A's upload of group 1 then fails
(an injected 503). Whatever A does about its failed batch, every group below
B's committed boundary must still be in the archive, and a read of the
archive never skips a group it knows was archived.
"""

from __future__ import annotations

from typing import Any

import anyio.from_thread
import pytest
from s3_faults import InjectedErrors
from s3_helpers import BUCKET, live_keys, make_config, raw_client
from s3_servers import S3Server

from agentium_archive_s3 import S3Archive, S3Config, S3SessionStore
from agentium_archive_s3.keys import archive_key
from agentium_harness import (
    ResidentLimits,
    RuntimeLimits,
    SessionConflictError,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import ArchiveConflictError, ArchiveCorruptError, OpContext
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "shared")


def _runtime(archive: S3Archive, store: S3SessionStore, max_groups: int) -> Any:
    return create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=max_groups), op_timeout_s=60.0),
    )


async def _read_all(config: S3Config) -> list[Any]:
    archive = S3Archive(config)
    try:
        return list(await archive.read_groups(KEY, 0, 1000, OpContext.with_timeout(30)))
    finally:
        await archive.aclose()


async def test_a_failed_batch_on_one_host_never_deletes_a_group_the_other_host_committed(
    server: S3Server, admin: Any
) -> None:
    config = make_config(server, max_attempts=1, max_concurrency=1)

    # Three turns, nothing archived yet (a generous resident bound).
    setup = _runtime(S3Archive(config), S3SessionStore(config), max_groups=100)
    try:
        for i in range(3):
            await setup.run(ANA, "shared", f"Setup turn {i}.")
    finally:
        await setup.aclose()

    host_b = _runtime(S3Archive(config), S3SessionStore(config), max_groups=1)
    client_a = raw_client(server, retries={"total_max_attempts": 1, "mode": "standard"})
    archive_a = S3Archive(config, client=client_a)
    host_a = _runtime(archive_a, S3SessionStore(config), max_groups=1)
    group_1 = archive_key(config.prefix, KEY, 1)
    b_results: list[Any] = []

    def before_a_sends(request: Any, **kwargs: Any) -> None:
        if request.url.endswith(group_1) and not b_results:
            # A's worker thread waits while host B runs a whole turn on the event loop.
            b_results.append(anyio.from_thread.run(host_b.run, ANA, "shared", "Host B's turn."))
            fail_next.count = 1

    # Registered first, so it runs before the injector (armed by it) answers A's upload of group 1.
    client_a.meta.events.register_first("before-send.s3.PutObject", before_a_sends, unique_id="host-b")
    fail_next = InjectedErrors(client_a, 503, count=0)
    try:
        with pytest.raises(SessionConflictError):  # B committed first; A's save must lose
            await host_a.run(ANA, "shared", "Host A's turn.")
        assert fail_next.answered == 1, "A's upload of group 1 was failed once B had committed"
        (b,) = b_results
        assert b.committed and b.boundary == 3, b
        assert [r.seq for r in b.archived] == [0, 1, 2]

        # Every group below B's committed boundary is archived, with B's receipts' digests.
        archived = await _read_all(config)
        assert [g.seq for g in archived] == [0, 1, 2]
        assert [g.digest for g in archived] == [r.digest for r in b.archived]
        # A read from 0 returns group 0, never silently the next one.
        reader = S3Archive(config)
        try:
            (first,) = await reader.read_groups(KEY, 0, 1, OpContext.with_timeout(30))
            assert first.seq == 0
        finally:
            await reader.aclose()
        # The session goes on from B's commit: A's next run sees B's boundary.
        after = await host_a.run(ANA, "shared", "Host A again.")
        assert after.committed and after.boundary >= 3
    finally:
        await host_a.aclose()
        await host_b.aclose()
        client_a.close()


async def test_a_read_fails_closed_when_an_archived_group_is_missing(
    server: S3Server, config: S3Config, admin: Any
) -> None:
    """Group 0 deleted out of band after group 1 was archived after it: reads from 0 fail closed."""
    runtime = _runtime(S3Archive(config), S3SessionStore(config), max_groups=1)
    try:
        for i in range(4):
            await runtime.run(ANA, "shared", f"Turn {i}.")
    finally:
        await runtime.aclose()
    reader = S3Archive(config)
    try:
        groups = list(await reader.read_groups(KEY, 0, 100, OpContext.with_timeout(30)))
        assert [g.seq for g in groups] == [0, 1, 2]
        admin.delete_object(Bucket=BUCKET, Key=archive_key(config.prefix, KEY, 0))
        with pytest.raises(ArchiveCorruptError, match="group 0"):
            await reader.read_groups(KEY, 0, 1, OpContext.with_timeout(30))
        with pytest.raises(ArchiveCorruptError, match="group 0"):
            await reader.read_groups(KEY, 0, 100, OpContext.with_timeout(30))
        # Reads that start after the gap still work.
        assert [g.seq for g in await reader.read_groups(KEY, 1, 100, OpContext.with_timeout(30))] == [1, 2]
        # So does a fresh adapter (another process): the link is stored with the group.
        fresh = S3Archive(config)
        try:
            with pytest.raises(ArchiveCorruptError, match="group 0"):
                await fresh.read_groups(KEY, 0, 1, OpContext.with_timeout(30))
        finally:
            await fresh.aclose()
    finally:
        await reader.aclose()


async def test_a_batch_meeting_stored_groups_compares_them_all_before_creating_any(
    server: S3Server, config: S3Config, admin: Any
) -> None:
    """Group 0 equal, group 1 different (another writer's), group 2 new: a conflict, and 2 is not created."""
    archive = S3Archive(config)
    try:
        await archive.append(
            KEY, [plain_group(0, " shared"), plain_group(1, " theirs")], OpContext.with_timeout(30)
        )
        with pytest.raises(ArchiveConflictError):
            await archive.append(
                KEY,
                [plain_group(0, " shared"), plain_group(1, " ours"), plain_group(2, " ours")],
                OpContext.with_timeout(30),
            )
        assert len(live_keys(admin, f"{config.prefix}/archive/")) == 2
        assert await archive.read_groups(KEY, 0, 10, OpContext.with_timeout(30)) == [
            plain_group(0, " shared"),
            plain_group(1, " theirs"),
        ]
    finally:
        await archive.aclose()
