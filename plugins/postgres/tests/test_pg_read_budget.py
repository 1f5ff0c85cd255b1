"""One Postgres archive read returns at most ``max_row_bytes`` of group bytes; paging on returns all.

Each row was bounded by ``max_row_bytes`` (16 MiB by default), but a read of N
rows was not: PostgreSQL compresses a large value (TOAST), so a table of N tiny
stored rows, each a highly compressible group of up to ``max_row_bytes``, made one
``read_groups(..., max_groups=N)`` transfer and decode N times the bound. Now a
page stops before the group that would take its bytes past ``max_row_bytes`` (the
first group always comes back) and is shorter than asked, as the port allows;
callers read on from the last seq + 1 until an empty page.
"""

from __future__ import annotations

import attrs
import pytest

from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_harness.testing import plain_group
from agentium_harness.testing.erasure_contract import read_every_group
from agentium_postgres import PostgresArchive, PostgresConfig

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
CAP = 4096


async def test_a_read_returns_at_most_max_row_bytes_and_paging_on_returns_every_group(
    app_config: PostgresConfig,
) -> None:
    archive = PostgresArchive(attrs.evolve(app_config, max_row_bytes=CAP))
    try:
        groups = [plain_group(seq, f"{seq} " + "x" * 800) for seq in range(7)]
        assert all(CAP // 3 < g.size_bytes < CAP // 2 for g in groups)  # two fit a page
        await archive.append(KEY, groups, OpContext.with_timeout(30))
        page = list(await archive.read_groups(KEY, 0, 100, OpContext.with_timeout(30)))
        # Before: all 7 groups, over 10 KB, in one read bounded to 4 KB a row.
        assert sum(g.size_bytes for g in page) <= CAP and page == groups[:2]
        assert await read_every_group(archive, KEY) == groups
        # The first group of a page comes back whatever the budget left: never an empty page.
        assert list(await archive.read_groups(KEY, 6, 100, OpContext.with_timeout(30))) == groups[6:]
    finally:
        await archive.aclose()
