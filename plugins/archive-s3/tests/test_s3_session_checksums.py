"""The session store's other writes, a tombstone and the revision floor, are never kept damaged.

Like a snapshot save (test_s3_soak_smoke.py), each sends ``Content-MD5`` and
``x-amz-checksum-sha256`` and compares the returned ETag with the MD5 of the
bytes sent: Ceph RGW refuses a body damaged on the way, moto checks nothing
and stores it. A damaged floor would fail every later create closed
(``S3RevisionFloorCorruptError``), store-wide, so one stored damaged is
written over; a tombstone refused damaged is sent again, and one stored
damaged is removed by the erase's delete that follows it.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import pytest
from s3_fault_proxy import Fault, FaultProxy
from s3_helpers import make_config
from s3_servers import S3Server

from agentium_archive_s3 import S3SessionStore
from agentium_harness.plugin_api import EraseTarget, OpContext, SessionKey
from agentium_harness.testing import scoped_snapshot

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def proxy(server: S3Server) -> Iterator[FaultProxy]:
    """A fault proxy in front of the shared server."""
    p = FaultProxy(server.port)
    yield p
    p.close()


def _ctx() -> OpContext:
    return OpContext.with_timeout(30.0)


async def test_a_revision_floor_damaged_on_the_way_is_written_again(
    server: S3Server, proxy: FaultProxy
) -> None:
    config = attrs.evolve(make_config(server), endpoint_url=proxy.endpoint, prefix="floor-damage")
    store = S3SessionStore(config)
    gone, again = SessionKey("acme", "ana", "floor-gone"), SessionKey("acme", "ana", "floor-new")
    try:
        first = await store.save(gone, scoped_snapshot(gone, " one"), None, _ctx())
        revision = await store.save(gone, scoped_snapshot(gone, " two"), first, _ctx())
        fault = proxy.add(Fault("corrupt_request", "PUT", "revision-floor", count=1))
        await store.erase(EraseTarget.session("acme", "ana", "floor-gone"), _ctx())
        assert fault.applied == 1
        # The floor reads back whole: a session created afterwards starts above the erased revision.
        created = await store.save(again, scoped_snapshot(again, " three"), None, _ctx())
        assert created > revision
    finally:
        await store.aclose()


async def test_a_tombstone_damaged_on_the_way_never_stays(server: S3Server, proxy: FaultProxy) -> None:
    config = attrs.evolve(make_config(server), endpoint_url=proxy.endpoint, prefix="tombstone-damage")
    store = S3SessionStore(config)
    sent: dict[str, int] = {}
    try:
        for session, damaged in (("tomb-plain", False), ("tomb-damaged", True)):
            key = SessionKey("acme", "ana", session)
            await store.save(key, scoped_snapshot(key, " one"), None, _ctx())
            fault = proxy.add(Fault("corrupt_request", "PUT", session, count=1 if damaged else 0))
            proxy.requests.clear()
            report = await store.erase(EraseTarget.session("acme", "ana", session), _ctx())
            assert fault.applied == (1 if damaged else 0)
            assert report.count("snapshot") == 1
            sent[session] = sum(1 for method, path in proxy.requests if method == "PUT" and session in path)
            assert await store.load(key, _ctx()) is None
        # RGW refused the damaged tombstone (its checksum) and it was sent again; moto stored it, and
        # the erase's delete removed it all the same: either way the session reads as gone.
        assert sent["tomb-damaged"] == sent["tomb-plain"] + (1 if server.flavour == "rgw" else 0), sent
    finally:
        await store.aclose()
