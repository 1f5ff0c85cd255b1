"""A write attempt the SDK gave up on, held on the network and landing after an erase, never brings
erased data back.

Found by the fault soak (``soak.py``, late-write fault, seed 1): a turn's
eviction appended a group; the proxy held the PUT's first attempt past the
SDK's read timeout, botocore's retry stored the group and the turn was
acknowledged. The worker thread had returned, so the write fence saw nothing
in flight; a tenant erasure then removed the session and completed, and the
held attempt (create-only, its key free again) landed after it: the erased
group was stored again, the next session under that id met it at its seq and
read it back as its own. A session save's held create did the same to a
snapshot. Now an attempt that got no answer (a read timeout, a dropped
connection) keeps its session counted in flight for as long as one request
may take, so the erase waits for it to land first and removes it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import attrs
import pytest
from s3_fault_proxy import Fault, FaultProxy
from s3_helpers import live_keys, make_config
from s3_servers import S3Server

from agentium_archive_s3 import S3Archive, S3Config, S3SessionStore
from agentium_harness.plugin_api import EraseStatus, EraseTarget, OpContext, SessionKey
from agentium_harness.testing import plain_group, scoped_snapshot

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "landing")
#: Held past the 2 s read timeout of the first attempt; botocore's second attempt goes through.
HOLD_S = 4.0


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


@pytest.fixture
def proxy(server: S3Server) -> Iterator[FaultProxy]:
    """A fault proxy in front of the shared server."""
    p = FaultProxy(server.port)
    yield p
    p.close()


@pytest.fixture
def via_proxy(server: S3Server, proxy: FaultProxy) -> S3Config:
    """A short read timeout (so a held attempt is given up on) and two attempts, through the proxy."""
    config = make_config(server, connect_timeout_s=1.0, read_timeout_s=2.0, max_attempts=2)
    return attrs.evolve(config, endpoint_url=proxy.endpoint)


async def _landed(held: Fault) -> None:
    """Wait until the held attempt has reached the server and been answered there."""
    with anyio.fail_after(30):
        # Polled: the held request is in a proxy thread, with no event loop to signal.
        while held.forwarded_at is None or held.in_hold:  # noqa: ASYNC110
            await anyio.sleep(0.05)


def _stored(admin: Any, config: S3Config) -> list[str]:
    return live_keys(admin, f"{config.prefix}/")


async def test_an_append_attempt_held_past_its_timeout_lands_before_the_erase_not_after(
    via_proxy: S3Config, proxy: FaultProxy, admin: Any
) -> None:
    archive = S3Archive(via_proxy)
    try:
        assert await archive.read_groups(KEY, 0, 1, _ctx()) == []  # the client and its connection
        held = proxy.add(Fault("hold", "PUT", "/archive/", count=1, seconds=HOLD_S))
        assert await archive.append(KEY, [plain_group(0, " landing")], _ctx()) is not None
        assert held.applied == 1  # the first attempt is held; the retry stored the group
        report = await archive.erase(EraseTarget.session("acme", "ana", "landing"), _ctx())
        erased_at = time.monotonic()
        assert report.status is EraseStatus.COMPLETE and report.count("group") == 1
        await _landed(held)
        assert _stored(admin, via_proxy) == [], "the held append landed after the erase: erased data is back"
        # The erase waited for the held attempt (by the order of events, not by its duration).
        assert held.forwarded_at is not None and held.forwarded_at <= erased_at
        assert await archive.read_groups(KEY, 0, 10, _ctx()) == []
    finally:
        await archive.aclose()


async def test_a_save_attempt_held_past_its_timeout_lands_before_the_erase_not_after(
    via_proxy: S3Config, proxy: FaultProxy, admin: Any
) -> None:
    store = S3SessionStore(via_proxy)
    try:
        assert await store.load(KEY, _ctx()) is None
        held = proxy.add(Fault("hold", "PUT", "/sessions/v1/", count=1, seconds=HOLD_S))
        assert await store.save(KEY, scoped_snapshot(KEY, "landing"), None, _ctx()) is not None
        assert held.applied == 1
        report = await store.erase(EraseTarget.session("acme", "ana", "landing"), _ctx())
        erased_at = time.monotonic()
        assert report.status is EraseStatus.COMPLETE and report.count("snapshot") == 1
        await _landed(held)
        snapshots = [k for k in _stored(admin, via_proxy) if "/sessions/v1/" in k]
        assert snapshots == [], "the held save landed after the erase: the erased session is back"
        assert held.forwarded_at is not None and held.forwarded_at <= erased_at
        assert await store.load(KEY, _ctx()) is None
    finally:
        await store.aclose()
