"""The peer benchmark's seed check reads the archive's end to an empty page, not to a short one.

``read_groups`` may answer with fewer groups than asked (the SQLite archive
stops a page at its byte budget): only an empty answer means nothing more is
stored. The Agentium worker checked that its seeded archive ends at
``boundary - 1`` with one ``read_groups(boundary - 1, 2)``: on a short page
of one group, a group stored past the boundary went unseen and the benchmark
timed a session that was not the one it said it seeded.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from agentium_harness._ports import OpContext
from agentium_harness._scope import SessionKey
from agentium_harness.adapters import _sqlite_archive
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig
from agentium_harness.testing import plain_group

WORKERS = Path(__file__).resolve().parents[2] / "benchmarks" / "_peer_workers"
KEY = SessionKey("bench-tenant", "bench-user", "bench-session")

pytestmark = pytest.mark.anyio


@pytest.fixture
def agentium_worker(monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.syspath_prepend(str(WORKERS))  # the workers import their ``common`` as a top module
    import agentium_worker

    return agentium_worker


@pytest.mark.parametrize("budget", [None, 1], ids=["whole-pages", "a-group-a-page"])
async def test_the_seed_check_sees_a_group_stored_past_the_boundary(
    tmp_path: Path, agentium_worker: object, monkeypatch: pytest.MonkeyPatch, budget: int | None
) -> None:
    if budget is not None:  # the archive's own byte bound: each page stops after its first group
        monkeypatch.setattr(_sqlite_archive, "READ_BUDGET", budget, raising=False)
    archive = SQLiteArchive(SQLiteConfig(path=str(tmp_path / "bench.db")))
    ctx = OpContext.unbounded()
    ends = agentium_worker.archive_ends  # type: ignore[attr-defined]
    try:
        with anyio.fail_after(30):
            await archive.append(KEY, [plain_group(s) for s in range(5)], ctx)
            assert len(await archive.read_groups(KEY, 3, 2, ctx)) == (1 if budget else 2)
            assert await ends(archive, KEY, 5, ctx) == ([0], [4])  # seeded as said: the check passes
            await archive.append(KEY, [plain_group(5), plain_group(6)], ctx)  # stored past the boundary
            assert await ends(archive, KEY, 5, ctx) == ([0], [4, 5, 6])  # seen, on short pages too
            assert await ends(archive, KEY, 0, ctx) == ([0], [0, 1, 2, 3, 4, 5, 6])
    finally:
        await archive.aclose()
