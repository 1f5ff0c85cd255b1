"""An archive whose pages are shorter than asked keeps the port, and the archive suite says so.

``read_groups`` may return fewer groups than ``max_groups`` (an archive bounding
the bytes of one call, as the SQLite archive does), never none while a group at
or past ``start_seq`` is stored; callers read on from the last ``seq + 1``. The
suite's own reads must do the same: one that took a single call's answer for the
whole history failed such an archive (a conforming one) on every test that read
more than one group back, erasure tests included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pytest

from agentium_harness.adapters.memory import InMemoryArchive
from agentium_harness.plugin_api import ArchiveCapabilities, MessageGroup, OpContext, SessionKey
from agentium_harness.testing import ArchiveContract, CorruptStored, RawStorage


class OneGroupAPageArchive(InMemoryArchive):
    """The in-memory archive answering at most one group a call: the shortest page the port allows."""

    capabilities: ClassVar[ArchiveCapabilities] = InMemoryArchive.capabilities

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        return await super().read_groups(key, start_seq, min(max_groups, 1), ctx)


class TestOneGroupAPageArchive(ArchiveContract):
    @pytest.fixture
    def archive(self) -> OneGroupAPageArchive:
        return OneGroupAPageArchive()

    @pytest.fixture
    def corrupt_archived_group(self, archive: OneGroupAPageArchive) -> CorruptStored:
        def corrupt(key: SessionKey, seq: int, transform: object) -> None:
            stored = archive.raw(key, seq)
            if stored is None:
                raise LookupError(f"group {seq} is not stored under {key!r}")
            assert callable(transform)
            archive.put_raw(key, seq, transform(stored[0]), stored[1])

        return corrupt

    @pytest.fixture
    def raw_storage(self, archive: OneGroupAPageArchive) -> RawStorage:
        return lambda: b"".join(data for groups in archive._groups.values() for data, _ in groups.values())
