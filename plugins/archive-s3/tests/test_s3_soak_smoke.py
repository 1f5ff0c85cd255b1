"""The fault soak (``soak.py``) in short, and the defect it found.

The smoke run is fixed-seed and must find no violation, having really
injected faults (late writes among them) and erased groups, sessions, a
user and a tenant (so it cannot pass idly). A
second run breaks the archive's read on purpose and must report violations,
so a soak that checks nothing would fail here. The last test pins the
defect the soak found: a snapshot upload corrupted on the way is stored
damaged and acknowledged (no checksum sent, no ETag compared), so the
session no longer loads.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import pytest
from s3_fault_proxy import Fault, FaultProxy
from s3_helpers import make_config
from s3_servers import S3Server
from soak import run_soak

from agentium_archive_s3 import S3Archive, S3SessionStore, S3SessionStoreError
from agentium_harness.plugin_api import MessageGroup, OpContext, SessionKey
from agentium_harness.testing import scoped_snapshot

pytestmark = pytest.mark.anyio


async def test_a_short_soak_under_faults_loses_nothing_acknowledged(tmp_path: Path) -> None:
    stats = await run_soak(8, 20262335, tmp_path, min_steps=30)
    print(stats.summary())
    assert stats.violations == []
    assert sum(stats.injected.values()) >= 5, stats.injected
    assert stats.erasures["session"] >= 1 and stats.erasures["groups"] >= 1, stats.erasures
    assert stats.erasures["user"] >= 1 and stats.erasures["tenant"] >= 1, stats.erasures
    assert stats.late_held >= 1, stats.injected  # a write held past its timeout, landing late
    assert stats.erased_groups >= 1 and stats.checks >= 20 and stats.raw_scans >= 2


def _skip_one_group(archive: S3Archive) -> None:
    """Break the archive: every read of two or more groups leaves out the first (a lost group)."""
    real = archive.read_groups

    async def read_groups(key: SessionKey, start: int, limit: int, ctx: OpContext) -> Sequence[MessageGroup]:
        groups = list(await real(key, start, limit, ctx))
        return groups[1:] if len(groups) >= 2 else groups

    archive.read_groups = read_groups  # type: ignore[method-assign,assignment]


async def test_the_soak_reports_an_archive_that_skips_a_group(tmp_path: Path) -> None:
    stats = await run_soak(6, 4, tmp_path, patch=_skip_one_group, min_steps=20)
    print(stats.summary())
    assert any("with faults off failed" in v or "is lost" in v for v in stats.violations), stats.violations


@pytest.fixture
def proxy(server: S3Server) -> Iterator[FaultProxy]:
    """A fault proxy in front of the shared server."""
    p = FaultProxy(server.port)
    yield p
    p.close()


async def test_a_snapshot_corrupted_on_the_way_is_never_acknowledged_as_saved(
    server: S3Server, proxy: FaultProxy
) -> None:
    # Found by the soak: the store sent no checksum and compared no ETag, so on a server that checks
    # neither (moto) a body damaged on the way was stored and the save acknowledged; every load and
    # save of the session then failed (SnapshotCorruptError). Ceph RGW refused the body already.
    key = SessionKey("acme", "ana", "damaged-save")
    config = attrs.evolve(make_config(server), endpoint_url=proxy.endpoint)
    store = S3SessionStore(config)
    try:
        first = await store.save(key, scoped_snapshot(key, " one"), None, OpContext.with_timeout(30))
        corrupt = proxy.add(Fault("corrupt_request", "PUT", "/sessions/", count=1))
        saved = None
        try:
            saved = await store.save(key, scoped_snapshot(key, " two"), first, OpContext.with_timeout(30))
        except Exception:
            pass  # refusing the damaged save is fine; acknowledging it is not
        assert corrupt.applied == 1
        loaded = await store.load(key, OpContext.with_timeout(30))  # today: SnapshotCorruptError
        assert loaded is not None
        if saved is not None:
            assert loaded.revision == saved and loaded.snapshot == scoped_snapshot(key, " two")
    finally:
        await store.aclose()


async def test_a_snapshot_damaged_on_every_attempt_fails_typed_and_is_never_acknowledged(
    server: S3Server, proxy: FaultProxy
) -> None:
    key = SessionKey("acme", "ana", "damaged-always")
    config = attrs.evolve(make_config(server), endpoint_url=proxy.endpoint)
    store = S3SessionStore(config)
    try:
        first = await store.save(key, scoped_snapshot(key, " one"), None, OpContext.with_timeout(30))
        corrupt = proxy.add(Fault("corrupt_request", "PUT", "/sessions/", count=100))
        with pytest.raises(S3SessionStoreError, match="damaged") as info:
            await store.save(key, scoped_snapshot(key, " two"), first, OpContext.with_timeout(30))
        assert info.value.code == "BadDigest"
        # One first attempt and conflict_retries more, each damaged; none acknowledged.
        assert corrupt.applied == config.conflict_retries + 1
    finally:
        await store.aclose()
