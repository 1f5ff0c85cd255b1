"""Erasure on S3: every version gone, neighbours byte-identical, groups markers, and the write fence.

The contract suites (test_s3_contract.py) check erasure through the port on
both servers, bytes included. Here: a versioned bucket on both servers (every
version and delete marker of the scope removed, every neighbour's version
kept byte for byte), a groups erasure (the later groups still read, an
erased group is never archived again), an append held on the wire past its
caller's deadline (it lands before the erase lists, never after), and what
the report says when versions cannot be removed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import attrs
import pytest
from s3_fault_proxy import Fault, FaultProxy
from s3_faults import InjectedErrors
from s3_helpers import VERSIONED_BUCKET, make_config, raw_client
from s3_servers import S3Server

from agentium_archive_s3 import S3Archive, S3ArchiveError, S3Config, S3SessionStore, S3SessionStoreError
from agentium_archive_s3.erasure import Listed, WriteFence, delete_listed
from agentium_archive_s3.keys import archive_key
from agentium_harness.plugin_api import (
    ArchiveConflictError,
    EraseStatus,
    EraseTarget,
    OpContext,
    OperationCancelledError,
    PhysicalErasure,
    SeqRange,
    SessionKey,
)
from agentium_harness.testing import plain_group, scoped_snapshot
from agentium_harness.testing.erasure_contract import marker

pytestmark = pytest.mark.anyio

GONE = SessionKey("acme", "ana", "gone")
NEIGHBOURS = (
    SessionKey("acme", "ana", "gone2"),
    SessionKey("acme", "ana2", "gone"),
    SessionKey("acme2", "ana", "gone"),
)


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _versions(admin: Any, bucket: str, prefix: str) -> dict[tuple[str, str], bytes]:
    """Every version of every key below ``prefix``: its bytes (delete markers: ``b"<marker>"``)."""
    out: dict[tuple[str, str], bytes] = {}
    for page in admin.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Versions", []):
            body = admin.get_object(Bucket=bucket, Key=item["Key"], VersionId=item["VersionId"])["Body"]
            out[item["Key"], item["VersionId"]] = body.read()
        for item in page.get("DeleteMarkers", []):
            out[item["Key"], item["VersionId"]] = b"<marker>"
    return out


def _below(found: dict[tuple[str, str], bytes], keys: list[str]) -> dict[tuple[str, str], bytes]:
    return {k: v for k, v in found.items() if any(k[0].startswith(f) for f in keys)}


def _folders(config: S3Config, key: SessionKey) -> list[str]:
    tenant, user, session = key.key_segments()
    return [
        f"{config.prefix}/archive/v1/{tenant}/{user}/{session}/",
        f"{config.prefix}/sessions/v1/{tenant}/{user}/{session}.json",
    ]


@pytest.fixture
def versioned(server: S3Server) -> S3Config:
    """A config on the bucket that keeps every version (on both servers)."""
    return make_config(server, bucket=VERSIONED_BUCKET)


async def _seed(archive: S3Archive, store: S3SessionStore, admin: Any, key: SessionKey, text: str) -> None:
    """Three groups, and a snapshot with two earlier versions (written out of band: Ceph RGW does not
    honour conditional writes in a versioned bucket, so the store's own saves cannot replace it there)."""
    await archive.append(key, [plain_group(s, f" {text} {s}") for s in range(3)], _ctx())
    object_key = _folders(store.config, key)[1]
    for n in range(2):
        admin.put_object(Bucket=VERSIONED_BUCKET, Key=object_key, Body=f"earlier {n} {text}".encode())
    admin.delete_object(Bucket=VERSIONED_BUCKET, Key=object_key)
    await store.save(key, scoped_snapshot(key, f"{text} now"), None, _ctx())


async def test_a_versioned_bucket_loses_every_version_of_the_scope_and_keeps_every_neighbour_version(
    versioned: S3Config, admin: Any
) -> None:
    archive, store = S3Archive(versioned), S3SessionStore(versioned)
    gone, kept = marker("gone"), marker("kept")
    try:
        await _seed(archive, store, admin, GONE, gone)
        for key in NEIGHBOURS:
            await _seed(archive, store, admin, key, kept)
        snapshot_key = _folders(versioned, GONE)[1]
        everything = _versions(admin, VERSIONED_BUCKET, versioned.prefix + "/")
        assert sum(1 for (k, _) in everything if k == snapshot_key) == 4
        neighbours = _below(everything, [f for key in NEIGHBOURS for f in _folders(versioned, key)])

        target = EraseTarget.session("acme", "ana", "gone")
        archive_report = await archive.erase(target, _ctx())
        store_report = await store.erase(target, _ctx())

        assert archive_report.count("group") == 3 and archive_report.status is EraseStatus.COMPLETE
        assert archive_report.physical is PhysicalErasure.REMOVED
        assert store_report.count("snapshot") == 1
        assert store_report.count("revision") == 3  # two earlier versions and the delete marker
        assert store_report.physical is PhysicalErasure.REMOVED
        after = _versions(admin, VERSIONED_BUCKET, versioned.prefix + "/")
        assert _below(after, _folders(versioned, GONE)) == {}
        assert _below(after, [f for key in NEIGHBOURS for f in _folders(versioned, key)]) == neighbours
        raw = b"".join(after.values())
        assert gone.encode() not in raw and kept.encode() in raw
        assert await store.load(GONE, _ctx()) is None
        assert list(await archive.read_groups(GONE, 0, 10, _ctx())) == []
    finally:
        await archive.aclose()
        await store.aclose()


async def test_a_tenant_erasure_lists_only_that_tenants_folder(versioned: S3Config, admin: Any) -> None:
    archive = S3Archive(versioned)
    try:
        for key in (GONE, *NEIGHBOURS):
            await archive.append(key, [plain_group(0, " t")], _ctx())
        listed: list[str] = []

        def spy(params: Any, **kwargs: Any) -> None:
            listed.append(str(params.get("Prefix", "")))

        archive.link._get_client().meta.events.register("provide-client-params.s3.ListObjectVersions", spy)
        report = await archive.erase(EraseTarget.tenant("acme"), _ctx())
        assert report.count("group") == 3  # acme/ana/gone, acme/ana/gone2, acme/ana2/gone
        assert listed and all(p == f"{versioned.prefix}/archive/v1/acme/" for p in listed)
        assert len(list(await archive.read_groups(NEIGHBOURS[2], 0, 10, _ctx()))) == 1
    finally:
        await archive.aclose()


async def test_a_groups_erasure_leaves_markers_so_later_groups_read_and_erased_ones_never_return(
    config: S3Config, admin: Any
) -> None:
    """On the test bucket: versioned on moto; on Ceph RGW unversioned (it honours create-only there)."""
    versioned = config
    bucket = config.bucket
    archive = S3Archive(versioned)
    gone = marker("middle")
    groups = [plain_group(s, f" {gone if s in (1, 2) else 'kept'} {s}") for s in range(5)]
    try:
        await archive.append(GONE, groups[:1], _ctx())
        await archive.append(GONE, groups[1:], _ctx())  # linked: group 3 names group 2 archived
        target = EraseTarget.groups_of(GONE, [SeqRange(1, 3)])
        dry = await archive.erase(target, _ctx(), dry_run=True)
        report = await archive.erase(target, _ctx())
        assert dry.sessions == report.sessions
        assert [seq for seq, _ in report.sessions[0].groups] == [1, 2]
        assert [d for _, d in report.sessions[0].groups] == [groups[1].digest, groups[2].digest]
        # A fresh adapter (no memory of earlier links) reads across the erased groups.
        fresh = S3Archive(versioned)
        try:
            read = list(await fresh.read_groups(GONE, 0, 10, _ctx()))
            assert [g.seq for g in read] == [0, 3, 4]
            with pytest.raises(ArchiveConflictError, match="erased"):
                await fresh.append(GONE, [groups[1]], _ctx())
        finally:
            await fresh.aclose()
        again = await archive.erase(target, _ctx())
        assert again.removed == 0 and again.status is EraseStatus.COMPLETE
        raw = b"".join(_versions(admin, bucket, versioned.prefix + "/").values())
        assert gone.encode() not in raw and b"kept" in raw
        # The session's erasure then removes the markers too.
        whole = await archive.erase(EraseTarget.session("acme", "ana", "gone"), _ctx())
        assert (whole.count("group"), whole.count("marker")) == (3, 2)
        assert _versions(admin, bucket, versioned.prefix + "/") == {}
    finally:
        await archive.aclose()


async def test_a_read_checks_each_erased_marker_once_and_no_ordinary_group(
    server: S3Server, config: S3Config
) -> None:
    """Each marker a read meets is HEADed once (it must be exactly an erasure's); groups cost one GET."""
    client = raw_client(server)
    calls: list[tuple[str, str]] = []
    for operation in ("HeadObject", "GetObject"):
        client.meta.events.register(
            f"before-parameter-build.s3.{operation}",
            lambda params, op=operation, **_: calls.append((op, params["Key"])),
        )
    archive = S3Archive(config, client=client)
    groups = [plain_group(s, f" g{s}") for s in range(6)]
    keys = [archive_key(config.prefix, GONE, s) for s in range(6)]
    try:
        await archive.append(GONE, groups[:1], _ctx())
        await archive.append(GONE, groups[1:], _ctx())  # groups 2 to 5 name group 1, the batch's lowest
        calls.clear()
        assert list(await S3Archive(config, client=client).read_groups(GONE, 0, 10, _ctx())) == groups
        assert sorted(calls) == [("GetObject", k) for k in keys]  # no erased group: no HEAD at all
        await archive.erase(EraseTarget.groups_of(GONE, [SeqRange(1, 4)]), _ctx())
        calls.clear()
        fresh = S3Archive(config, client=client)
        assert [g.seq for g in await fresh.read_groups(GONE, 0, 10, _ctx())] == [0, 4, 5]
        # One HEAD per erased group (the linked marker 1 once, though two groups link to it, and
        # the unlinked 2 and 3 too), one GET per group read, nothing more.
        heads = [("HeadObject", keys[s]) for s in (1, 2, 3)]
        assert sorted(calls) == [("GetObject", keys[s]) for s in (0, 4, 5)] + heads
    finally:
        await archive.aclose()
        client.close()


# -- the write fence ------------------------------------------------------------------------------


@pytest.fixture
def proxy(server: S3Server) -> Iterator[FaultProxy]:
    p = FaultProxy(server.port)
    yield p
    p.close()


async def test_an_append_held_on_the_wire_past_its_deadline_lands_before_the_erase_lists_never_after(
    server: S3Server, proxy: FaultProxy, admin: Any
) -> None:
    """The bug the plugin's old ``forget_session`` had: it reported complete, then a held PUT landed."""
    direct = make_config(server)
    config = attrs.evolve(direct, endpoint_url=proxy.endpoint)
    archive = S3Archive(config)
    # Warm up through the proxy, untimed: on a loaded machine the client's first request (its
    # connection and setup) alone outlasted the append's deadline, before the PUT was ever sent.
    assert await archive.read_groups(GONE, 0, 1, _ctx()) == []
    held = proxy.add(Fault("hold", "PUT", "/archive/", seconds=3.5))
    try:
        # 2 s to send the PUT, which is then held 3.5 s: the erase below must wait for it, and the
        # test takes no longer (it waits for the hold either way).
        with pytest.raises(OperationCancelledError):
            await archive.append(GONE, [plain_group(0, " late")], OpContext.with_timeout(2.0))
        assert held.applied == 1
        report = await archive.erase(EraseTarget.session("acme", "ana", "gone"), _ctx())
        ended = time.monotonic()
        assert report.status is EraseStatus.COMPLETE
        await anyio.sleep(3.5)  # past the hold: the PUT has reached the server by now
        listed = admin.list_objects_v2(Bucket=config.bucket, Prefix=f"{config.prefix}/archive/")
        assert listed.get("KeyCount", 0) == 0, "the held append landed after the erase reported complete"
        # The erase waited for the held PUT: it ended after the proxy let it through (by the order of
        # events; its duration depended on how soon after the PUT's deadline a loaded machine ran it).
        assert report.count("group") == 1
        assert held.forwarded_at is not None and ended >= held.forwarded_at, (ended, held.forwarded_at)
    finally:
        await archive.aclose()


async def test_a_write_still_in_flight_at_the_bound_stops_the_erase_before_it_removes_anything(
    server: S3Server, proxy: FaultProxy
) -> None:
    config = attrs.evolve(make_config(server), endpoint_url=proxy.endpoint)
    store = S3SessionStore(config)
    # Generous times: on a loaded two-core machine the save's requests before its PUT may take a while.
    held = proxy.add(Fault("hold", "PUT", "/sessions/", seconds=8.0))
    try:
        with pytest.raises(OperationCancelledError):
            await store.save(GONE, scoped_snapshot(GONE, "late"), None, OpContext.with_timeout(3.0))
        assert held.applied == 1  # the PUT was sent before its deadline, and is held
        with pytest.raises(S3SessionStoreError, match="still in flight") as caught:
            await store.erase(EraseTarget.user("acme", "ana"), OpContext.with_timeout(1.0))
        assert caught.value.code == "WritesInFlight"
        await anyio.sleep(5.5)
        report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert report.count("snapshot") == 1
        assert await store.load(GONE, _ctx()) is None
    finally:
        await store.aclose()


def test_the_fence_refuses_covered_writes_while_an_erase_runs_and_waits_for_those_in_flight() -> None:
    fence = WriteFence()
    other = SessionKey("acme", "bob", "s")

    def refuse(target: EraseTarget) -> Exception:
        return RuntimeError(target.describe())

    target = EraseTarget.user("acme", "ana")
    released = threading.Event()

    def covers(key: SessionKey) -> Callable[[EraseTarget], bool]:
        return lambda erasing: erasing.covers_session(key)

    def writer() -> None:
        with fence.writing(GONE, covers(GONE), refuse):
            released.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    while not fence.busy(GONE):
        time.sleep(0.01)
    with fence.erasing(target) as drain:
        assert drain(0.1) is False  # still in flight
        with pytest.raises(RuntimeError, match="ana"), fence.writing(GONE, covers(GONE), refuse):
            pass
        with fence.writing(other, covers(other), refuse):  # another user: not fenced
            pass
        released.set()
        assert drain(30.0) is True
    thread.join()
    with fence.writing(GONE, covers(GONE), refuse):  # the erase is over
        pass


# -- versions that cannot be removed --------------------------------------------------------------


async def test_without_leave_to_read_versioning_the_report_says_versions_may_be_kept(
    server: S3Server, versioned: S3Config
) -> None:
    client = raw_client(server)
    archive = S3Archive(versioned, client=client)
    try:
        await archive.append(GONE, [plain_group(0, " v")], _ctx())
        denied = [
            InjectedErrors(client, 403, operation=op) for op in ("GetBucketVersioning", "ListObjectVersions")
        ]
        report = await archive.erase(EraseTarget.session("acme", "ana", "gone"), _ctx())
        for hook in denied:
            hook.remove()
        assert report.count("group") == 1
        assert report.physical is PhysicalErasure.VERSIONS_KEPT
        assert "s3:ListBucketVersions" in report.detail
        assert list(await archive.read_groups(GONE, 0, 10, _ctx())) == []
    finally:
        await archive.aclose()
        client.close()


class _RefusesVersions:
    """A client whose DeleteObjects refuses every deletion by version id (no s3:DeleteObjectVersion)."""

    def __init__(self) -> None:
        self.calls: list[list[dict[str, str]]] = []

    def delete_objects(self, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]:
        objects = Delete["Objects"]
        self.calls.append(objects)
        if any("VersionId" in o for o in objects):
            return {"Errors": [{"Key": o["Key"], "Code": "AccessDenied"} for o in objects]}
        return {}


def test_when_versions_may_not_be_deleted_the_keys_are_deleted_and_versions_are_reported_kept() -> None:
    client = _RefusesVersions()
    listed = [Listed("p/a", "v2", 10, ("v1",)), Listed("p/b", None, 0, ("v3",))]
    done = delete_listed(
        client,  # type: ignore[arg-type]
        "bucket",
        listed,
        True,
        "",
        lambda: None,
        lambda code, n: RuntimeError(code),
    )
    assert done.physical is PhysicalErasure.VERSIONS_KEPT
    assert "s3:DeleteObjectVersion" in done.detail
    assert client.calls[-1] == [{"Key": "p/a"}]  # only the key showing an object gets a delete marker


async def test_an_erased_groups_key_is_refused_to_a_racing_append_of_another_adapter(
    config: S3Config,
) -> None:
    """A marker holds the key: a create-only PUT of the erased group from anywhere gets 412."""
    versioned = config
    first, second = S3Archive(versioned), S3Archive(versioned)
    try:
        await first.append(GONE, [plain_group(s) for s in range(3)], _ctx())
        await first.erase(EraseTarget.groups_of(GONE, [SeqRange(0, 2)]), _ctx())
        with pytest.raises(ArchiveConflictError):
            await second.append(GONE, [plain_group(0)], _ctx())
        assert [g.seq for g in await second.read_groups(GONE, 0, 10, _ctx())] == [2]
        assert archive_key(versioned.prefix, GONE, 0)
    finally:
        await first.aclose()
        await second.aclose()


async def test_appends_refused_during_an_erase_say_so(versioned: S3Config) -> None:
    archive = S3Archive(versioned)
    try:
        with archive._fence.erasing(EraseTarget.session("acme", "ana", "gone")):
            with pytest.raises(S3ArchiveError, match="erasure") as caught:
                await archive.append(GONE, [plain_group(0)], _ctx())
            assert caught.value.code == "Erasing"
            await archive.append(NEIGHBOURS[0], [plain_group(0)], _ctx())
    finally:
        await archive.aclose()
