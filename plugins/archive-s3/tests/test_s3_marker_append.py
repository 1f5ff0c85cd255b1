"""An append tells an erased group's marker from a group truncated to nothing.

Only an exact marker (empty, ``agentium-erased: 1``, no group digest) is an
erased group: an append whose key holds one is refused as erased
(``ArchiveConflictError``). An append whose key holds any other empty
object reports damage (``ArchiveCorruptError``) instead. Either way nothing
is written: every version in the session's folder stays byte for byte,
metadata included.
"""

from __future__ import annotations

from typing import Any

import pytest
from s3_marker_damage import DAMAGE, KEY, folder_state, truncate

from agentium_archive_s3 import S3Archive, S3Config
from agentium_harness.plugin_api import (
    ArchiveConflictError,
    ArchiveCorruptError,
    EraseTarget,
    OpContext,
    SeqRange,
)
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


# -- append -------------------------------------------------------------------------------------


@DAMAGE
@pytest.mark.parametrize("batch", [False, True], ids=["alone", "in-a-batch"])
async def test_an_append_meeting_an_empty_object_that_is_not_a_marker_reports_damage_and_writes_nothing(
    config: S3Config, admin: Any, metadata: dict[str, str] | None, batch: bool
) -> None:
    # Any empty object at the key was reported "was erased" (ArchiveConflictError), so a group
    # truncated out of band passed for an erasure's work.
    archive = S3Archive(config)
    try:
        await archive.append(KEY, [plain_group(0)], _ctx())
        await archive.append(KEY, [plain_group(1)], _ctx())
        truncate(admin, config, 1, metadata, alone=False)
        before = folder_state(admin, config)
        # In a batch, group 0 is stored already: every stored group is compared before any is created.
        groups = [plain_group(0), plain_group(1), plain_group(2)] if batch else [plain_group(1)]
        with pytest.raises(ArchiveCorruptError, match=r"group 1 .*not an erased group's marker") as caught:
            await S3Archive(config).append(KEY, groups, _ctx())
        assert "was erased" not in str(caught.value)
        assert folder_state(admin, config) == before  # nothing written, the damage left as it is
    finally:
        await archive.aclose()


@pytest.mark.parametrize("batch", [False, True], ids=["alone", "in-a-batch"])
async def test_an_append_meeting_an_exact_marker_is_still_refused_as_erased(
    config: S3Config, admin: Any, batch: bool
) -> None:
    archive = S3Archive(config)
    try:
        await archive.append(KEY, [plain_group(s) for s in range(3)], _ctx())
        await archive.erase(EraseTarget.groups_of(KEY, [SeqRange(1, 2)]), _ctx())
        before = folder_state(admin, config)
        groups = [plain_group(0), plain_group(1), plain_group(3)] if batch else [plain_group(1)]
        with pytest.raises(ArchiveConflictError, match=r"group 1 .*was erased"):
            await S3Archive(config).append(KEY, groups, _ctx())
        assert folder_state(admin, config) == before
    finally:
        await archive.aclose()
