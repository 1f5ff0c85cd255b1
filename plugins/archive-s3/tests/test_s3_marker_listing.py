"""A read across erased groups lists their markers in growing pages, not one listing request each.

Markers are not counted against ``max_groups``, so a listing page sized by
the groups still wanted alone shrinks to one key when markers fill the
range: a read of one group behind 200 erased ones sent 201 listing requests.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentium_archive_s3 import S3Archive, S3Config
from agentium_harness.plugin_api import EraseTarget, OpContext, SeqRange, SessionKey
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "erased-range")


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def test_a_small_read_behind_many_markers_lists_them_in_few_requests(
    config: S3Config, admin: Any
) -> None:
    archive = S3Archive(config, client=admin)
    calls: list[str] = []

    def count(model: Any, **_: Any) -> None:
        calls.append(str(model.name))

    try:
        await archive.append(KEY, [plain_group(s) for s in range(201)], _ctx())
        await archive.erase(EraseTarget.groups_of(KEY, (SeqRange(0, 200),)), _ctx())
        admin.meta.events.register("before-call.s3", count)
        read = await archive.read_groups(KEY, 0, 1, _ctx())
        assert [g.seq for g in read] == [200]  # the markers pass, the group after them reads
        # 200 markers: pages of 1, 2, 4 ... keys, not 200 pages of one key.
        assert calls.count("ListObjectsV2") <= 10, calls.count("ListObjectsV2")
        # Each empty object is still checked to be exactly a marker (one HEAD each).
        assert calls.count("HeadObject") == 200
        calls.clear()
        # With no marker in the way a read's page stays sized by the groups it wants.
        assert [g.seq for g in await archive.read_groups(KEY, 200, 1, _ctx())] == [200]
        assert calls.count("ListObjectsV2") == 1
    finally:
        admin.meta.events.unregister("before-call.s3", count)
        await archive.aclose()
