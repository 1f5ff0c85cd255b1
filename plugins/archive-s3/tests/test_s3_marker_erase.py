"""A groups erasure tells an erased group's marker from a group truncated to nothing.

Only an exact marker (empty, ``agentium-erased: 1``, no group digest) is a
group erased already. A groups erasure (dry run too) whose range holds any
other empty object fails closed with ``ArchiveCorruptError`` naming the
seq, before it changes anything: every version in the session's folder
stays byte for byte, metadata included. Each empty object in range costs
one ``HEAD``; a group costs none beyond the one for the report's digest.
A session erasure removes every empty object, but counts only exact
markers as ``marker`` and any other as ``damaged``.
"""

from __future__ import annotations

from typing import Any

import pytest
from s3_helpers import raw_client
from s3_marker_damage import DAMAGE, KEY, folder_state, truncate
from s3_servers import S3Server

from agentium_archive_s3 import S3Archive, S3Config
from agentium_archive_s3.keys import archive_key
from agentium_harness.plugin_api import (
    ArchiveCorruptError,
    EraseStatus,
    EraseTarget,
    OpContext,
    SeqRange,
)
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


# -- groups erasure -----------------------------------------------------------------------------


@DAMAGE
@pytest.mark.parametrize("alone", [False, True], ids=["earlier-version-kept", "no-earlier-version"])
async def test_a_groups_erasure_meeting_an_empty_object_that_is_not_a_marker_fails_closed(
    config: S3Config, admin: Any, metadata: dict[str, str] | None, alone: bool
) -> None:
    # Any empty object in range was taken for an erased group: with no earlier version it was
    # passed over, else its earlier versions were deleted and the damage kept as current; either
    # way the erasure reported the range erased, COMPLETE, without having written a marker.
    archive = S3Archive(config)
    try:
        await archive.append(KEY, [plain_group(0)], _ctx())
        await archive.append(KEY, [plain_group(s) for s in range(1, 6)], _ctx())
        await archive.erase(EraseTarget.groups_of(KEY, [SeqRange(1, 2)]), _ctx())  # an exact marker at 1
        truncate(admin, config, 3, metadata, alone=alone)
        before = folder_state(admin, config)
        target = EraseTarget.groups_of(KEY, [SeqRange(1, 5)])
        for dry_run in (True, False):
            with pytest.raises(ArchiveCorruptError, match=r"group 3 .*not an erased group's marker"):
                await S3Archive(config).erase(target, _ctx(), dry_run=dry_run)
            assert folder_state(admin, config) == before  # nothing deleted, no marker written
        # The groups past the damage and the ranges short of it still erase.
        report = await archive.erase(EraseTarget.groups_of(KEY, [SeqRange(1, 3), SeqRange(4, 6)]), _ctx())
        assert report.status is EraseStatus.COMPLETE
        assert [seq for seq, _ in report.sessions[0].groups] == [2, 4, 5]
        # A session erasure removes every object of the folder, the damaged one too.
        whole = await archive.erase(EraseTarget.session("acme", "ana", "damage"), _ctx())
        assert whole.status is EraseStatus.COMPLETE
        assert folder_state(admin, config) == {}
    finally:
        await archive.aclose()


async def test_a_groups_erasure_heads_each_empty_object_once_and_no_group_more(
    server: S3Server, config: S3Config
) -> None:
    """An exact marker in range costs one HEAD; a group its one HEAD for the report's digest."""
    client = raw_client(server)
    heads: list[str] = []
    client.meta.events.register(
        "before-parameter-build.s3.HeadObject", lambda params, **_: heads.append(params["Key"])
    )
    archive = S3Archive(config, client=client)
    keys = [archive_key(config.prefix, KEY, s) for s in range(5)]
    try:
        await archive.append(KEY, [plain_group(s) for s in range(5)], _ctx())
        await archive.erase(EraseTarget.groups_of(KEY, [SeqRange(1, 3)]), _ctx())
        heads.clear()
        report = await archive.erase(EraseTarget.groups_of(KEY, [SeqRange(0, 5)]), _ctx())
        assert [seq for seq, _ in report.sessions[0].groups] == [0, 3, 4]
        assert sorted(heads) == sorted(keys)  # markers 1 and 2 checked, groups 0, 3, 4 for digests
    finally:
        await archive.aclose()
        client.close()


# -- whole-session erasure ----------------------------------------------------------------------


@DAMAGE
async def test_a_session_erasure_counts_only_exact_markers_as_markers_and_damage_as_damaged(
    config: S3Config, admin: Any, metadata: dict[str, str] | None
) -> None:
    # Every empty object at a group's key was counted as an erased group's marker, so the report
    # (and the tombstone) said a truncated group had been erased by retention: damage hidden.
    archive = S3Archive(config)
    try:
        await archive.append(KEY, [plain_group(0)], _ctx())
        await archive.append(KEY, [plain_group(s) for s in range(1, 6)], _ctx())
        await archive.erase(EraseTarget.groups_of(KEY, [SeqRange(1, 2)]), _ctx())  # an exact marker at 1
        truncate(admin, config, 3, metadata, alone=True)
        whole = EraseTarget.session("acme", "ana", "damage")
        for dry_run in (True, False):
            report = await S3Archive(config).erase(whole, _ctx(), dry_run=dry_run)
            assert report.status is EraseStatus.COMPLETE
            counts = {kind: report.count(kind) for kind in ("group", "marker", "damaged", "object")}
            assert counts == {"group": 4, "marker": 1, "damaged": 1, "object": 0}, (dry_run, counts)
            # The damaged key holds no group to name: only the stored groups are listed by seq.
            assert [seq for seq, _ in report.sessions[0].groups] == [0, 2, 4, 5]
        assert folder_state(admin, config) == {}  # removed all the same, the damage too
    finally:
        await archive.aclose()
