"""A runtime erasure removes a SQLite session whose stored group digest is damaged, and completes.

The SQLite stores erase a group whose digest is over its read bound unread
and report it with digest ``""`` (no digest they can vouch for). The engine's
report check (``erasure_reports.check_report``) must take that as what it is:
it first refused every digest not of the ``sha256:`` form, ``""`` included,
which left such an erasure pending on the very damage the operator asked to
remove, on every retry.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _oversize_support import HUGE, erased_digests, five_turns, group_ids
from _oversize_support import raw_sql as _sql

from agentium_harness import EraseTarget

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("target", ["session", "user"])
async def test_a_runtime_erasure_completes_over_a_group_whose_digest_is_damaged(
    tmp_path: Path, target: str
) -> None:
    path = tmp_path / "a.db"
    await five_turns(path)
    _sql(
        path,
        "UPDATE groups SET digest = printf('%.*c', ?, 'x') WHERE id IN (?, ?)",
        (HUGE, *group_ids(path, 1)),
    )
    erase = EraseTarget.user("acme", "ana")
    if target == "session":
        erase = EraseTarget.session("acme", "ana", "s1")
    recorded = await erased_digests(path, erase)
    # The damaged group is recorded with no digest; its neighbours with theirs.
    assert recorded[1] == "" and recorded[0].startswith("sha256:") and recorded[2].startswith("sha256:")
    assert _sql(path, "SELECT count(*) FROM groups") == [(0,)]
