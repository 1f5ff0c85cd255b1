"""Faults between the archive and a real server: a TCP fault proxy, and injected 503, 409 and throttling.

Each test checks what matters for R3: an append either returns receipts for
groups that are durably stored with the right bytes, or raises and leaves at
most exact copies of groups it was sent (never deleted: another writer may
hold a receipt for them), which the next append finds equal; no object is
ever overwritten (on moto's versioned bucket every key keeps exactly one
version) and nothing acknowledged is lost.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from s3_fault_proxy import Fault, FaultProxy
from s3_faults import InjectedErrors
from s3_helpers import live_keys, make_config, raw_client, versions
from s3_servers import S3Server

from agentium_archive_s3 import (
    S3Archive,
    S3Config,
    S3ConflictRetriesExhaustedError,
    S3SessionStore,
    S3UnavailableError,
)
from agentium_archive_s3.keys import archive_prefix
from agentium_harness.plugin_api import (
    ArchiveCorruptError,
    OpContext,
    OperationCancelledError,
    SessionKey,
)
from agentium_harness.testing import plain_group, scoped_snapshot

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "faults")


@pytest.fixture
def proxy(server: S3Server) -> Iterator[FaultProxy]:
    """A fault proxy in front of the shared server."""
    p = FaultProxy(server.port)
    yield p
    p.close()


def _through(proxy: FaultProxy, server: S3Server, **options: Any) -> tuple[S3Config, S3Config]:
    """A config on the server itself and the same one through the proxy."""
    config = make_config(server, **options)
    return config, attrs.evolve(config, endpoint_url=proxy.endpoint)


def _assert_one_version_each(server: S3Server, admin: Any, prefix: str, expected: int) -> None:
    """Exactly ``expected`` live archive objects; on a versioned bucket, one version each (no overwrite)."""
    assert len(live_keys(admin, prefix)) == expected
    if server.flavour == "moto":
        counts = versions(admin, prefix)
        assert counts and set(counts.values()) == {1}, counts
        assert len(counts) == expected


async def _read(archive: S3Archive) -> list[Any]:
    return list(await archive.read_groups(KEY, 0, 100, OpContext.with_timeout(20)))


# -- the TCP fault proxy ---------------------------------------------------------------------------


async def test_a_dropped_acknowledgment_resolves_through_the_sdk_retry(
    server: S3Server, proxy: FaultProxy, admin: Any
) -> None:
    _, config = _through(proxy, server, max_attempts=3)
    groups = [plain_group(s, f" dropped-ack {s}") for s in range(3)]
    drop = proxy.add(Fault("drop", "PUT", "/archive/", count=1))
    archive = S3Archive(config)
    try:
        receipts = await archive.append(KEY, groups, OpContext.with_timeout(30))
        assert [r.digest for r in receipts] == [g.digest for g in groups]
        assert drop.applied == 1
        assert await _read(archive) == groups
    finally:
        await archive.aclose()
    _assert_one_version_each(server, admin, config.prefix, 3)


async def test_a_dropped_acknowledgment_without_retries_fails_then_reappending_succeeds_once(
    server: S3Server, proxy: FaultProxy, admin: Any
) -> None:
    _, config = _through(proxy, server, max_attempts=1)
    groups = [plain_group(0, " lost"), plain_group(1, " kept")]
    proxy.add(Fault("drop", "PUT", "/archive/", count=1))
    archive = S3Archive(config)
    try:
        with pytest.raises(S3UnavailableError):
            await archive.append(KEY, groups, OpContext.with_timeout(30))
        # The group whose acknowledgment was lost may be stored (same bytes): appending again
        # finds it equal and stores nothing twice.
        receipts = await archive.append(KEY, groups, OpContext.with_timeout(30))
        assert [r.seq for r in receipts] == [0, 1]
        assert await _read(archive) == groups
    finally:
        await archive.aclose()
    _assert_one_version_each(server, admin, config.prefix, 2)


async def test_a_response_delayed_past_the_deadline_cancels_and_a_later_append_is_idempotent(
    server: S3Server, proxy: FaultProxy, admin: Any
) -> None:
    _, config = _through(proxy, server)
    groups = [plain_group(0, " slow")]
    proxy.add(Fault("delay", "PUT", "/archive/", seconds=1.5))
    archive = S3Archive(config)
    try:
        with pytest.raises(OperationCancelledError):
            await archive.append(KEY, groups, OpContext.with_timeout(0.5))
        receipts = await archive.append(KEY, groups, OpContext.with_timeout(30))
        assert receipts[0].digest == groups[0].digest
        assert await _read(archive) == groups
    finally:
        await archive.aclose()
    _assert_one_version_each(server, admin, config.prefix, 1)


async def test_an_upload_corrupted_on_the_way_is_never_acknowledged_as_stored(
    server: S3Server, proxy: FaultProxy, admin: Any
) -> None:
    # moto stores the damaged bytes (it checks no checksum): the ETag check catches it and the
    # damaged object is removed and uploaded again. RGW refuses it with BadDigest: uploaded again.
    _, config = _through(proxy, server)
    groups = [plain_group(0, " corrupted in flight"), plain_group(1, " clean")]
    corrupt = proxy.add(Fault("corrupt_request", "PUT", "/archive/", count=1))
    archive = S3Archive(config)
    try:
        await archive.append(KEY, groups, OpContext.with_timeout(30))
        assert corrupt.applied == 1
        assert await _read(archive) == groups
    finally:
        await archive.aclose()
    _assert_one_version_each(server, admin, config.prefix, 2)


async def test_uploads_corrupted_every_time_fail_and_leave_nothing(
    server: S3Server, proxy: FaultProxy, admin: Any
) -> None:
    _, config = _through(proxy, server, conflict_retries=2)
    proxy.add(Fault("corrupt_request", "PUT", "/archive/", count=100))
    archive = S3Archive(config)
    try:
        with pytest.raises(Exception) as caught:
            await archive.append(KEY, [plain_group(0, " always damaged")], OpContext.with_timeout(30))
        assert getattr(caught.value, "code", "") == "BadDigest"
    finally:
        await archive.aclose()
    assert live_keys(admin, config.prefix) == []


async def test_a_read_corrupted_on_the_way_fails_closed_and_the_next_read_is_whole(
    server: S3Server, proxy: FaultProxy
) -> None:
    _, config = _through(proxy, server)
    groups = [plain_group(s, f" read {s}") for s in range(2)]
    archive = S3Archive(config)
    try:
        await archive.append(KEY, groups, OpContext.with_timeout(30))
        proxy.add(Fault("corrupt_response", "GET", "/archive/", count=1))
        with pytest.raises(ArchiveCorruptError):
            await _read(archive)
        assert await _read(archive) == groups
    finally:
        await archive.aclose()


# -- botocore-injected errors -----------------------------------------------------------------------


async def test_a_503_storm_beyond_the_retry_bound_fails_typed_and_stores_nothing(
    server: S3Server, admin: Any
) -> None:
    config = make_config(server, max_attempts=3)
    client = raw_client(server, retries={"total_max_attempts": 3, "mode": "standard"})
    storm = InjectedErrors(client, 503)
    archive = S3Archive(config, client=client)
    try:
        with pytest.raises(S3UnavailableError) as caught:
            await archive.append(KEY, [plain_group(0), plain_group(1)], OpContext.with_timeout(60))
        assert caught.value.code == "SlowDown"
        # The lowest group goes first, alone: its failure stops the batch before group 1 is sent.
        assert storm.answered == 3
        storm.remove()
        await archive.append(KEY, [plain_group(0), plain_group(1)], OpContext.with_timeout(30))
    finally:
        await archive.aclose()
    _assert_one_version_each(server, admin, config.prefix, 2)
    client.close()


async def test_throttling_within_the_retry_bound_is_absorbed(server: S3Server, admin: Any) -> None:
    config = make_config(server)
    client = raw_client(server, retries={"total_max_attempts": 4, "mode": "standard"})
    throttle = InjectedErrors(client, 400, count=2)  # ThrottlingException, then through
    archive = S3Archive(config, client=client)
    try:
        await archive.append(KEY, [plain_group(0, " throttled")], OpContext.with_timeout(60))
        assert throttle.answered == 2 and throttle.passed == 1
    finally:
        await archive.aclose()
    _assert_one_version_each(server, admin, config.prefix, 1)
    client.close()


async def test_409_is_retried_within_its_bound(server: S3Server, admin: Any) -> None:
    config = make_config(server, conflict_retries=3)
    client = raw_client(server)
    conflict = InjectedErrors(client, 409, count=2)
    archive = S3Archive(config, client=client)
    try:
        await archive.append(KEY, [plain_group(0, " contended")], OpContext.with_timeout(30))
        assert conflict.answered == 2 and conflict.passed == 1
        assert await _read(archive) == [plain_group(0, " contended")]
    finally:
        await archive.aclose()
    _assert_one_version_each(server, admin, config.prefix, 1)
    client.close()


async def test_a_409_storm_fails_typed_leaves_only_exact_copies_and_a_retry_completes_the_batch(
    server: S3Server, admin: Any
) -> None:
    config = make_config(server, conflict_retries=2)
    client = raw_client(server)
    archive = S3Archive(config, client=client)
    victim = archive_prefix(config.prefix, KEY) + f"{1:020d}.json"

    class OnlyOneKey(InjectedErrors):
        def _handler(self, request: Any, **kwargs: Any) -> Any:
            return super()._handler(request, **kwargs) if request.url.endswith(victim) else None

    storm = OnlyOneKey(client, 409)
    groups = [plain_group(s, f" storm {s}") for s in range(3)]
    try:
        with pytest.raises(S3ConflictRetriesExhaustedError):
            await archive.append(KEY, groups, OpContext.with_timeout(30))
        # Groups 0 and 2 were stored and are left: nothing stored is ever deleted, because
        # another writer may already hold a receipt for the same bytes. They are exactly
        # the groups sent; no receipt named them, and appending them again is a no-op.
        assert sorted(live_keys(admin, config.prefix)) == [
            archive_prefix(config.prefix, KEY) + f"{s:020d}.json" for s in (0, 2)
        ]
        assert await _read(archive) == [groups[0], groups[2]]
        storm.remove()
        receipts = await archive.append(KEY, groups, OpContext.with_timeout(30))
        assert [r.digest for r in receipts] == [g.digest for g in groups]
        assert await _read(archive) == groups
    finally:
        await archive.aclose()
    _assert_one_version_each(server, admin, config.prefix, 3)
    client.close()


async def test_session_saves_ride_out_a_409_and_a_dropped_acknowledgment(
    server: S3Server, proxy: FaultProxy
) -> None:
    _, config = _through(proxy, server, max_attempts=3)
    store = S3SessionStore(config)
    try:
        first = await store.save(KEY, scoped_snapshot(KEY, " one"), None, OpContext.with_timeout(30))
        proxy.add(Fault("drop", "PUT", "/sessions/", count=1))
        # The update lands, its reply is lost, botocore retries, the server says 412:
        # the store reads the object back, finds its own bytes, and reports success.
        second = await store.save(KEY, scoped_snapshot(KEY, " two"), first, OpContext.with_timeout(30))
        assert second == first + 1
        assert proxy.continues >= 2  # snapshot uploads ask for 100-continue; the proxy answers it
        loaded = await store.load(KEY, OpContext.with_timeout(30))
        assert loaded is not None and loaded.revision == second
        assert loaded.snapshot == scoped_snapshot(KEY, " two")
    finally:
        await store.aclose()
