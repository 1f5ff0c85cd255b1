"""Every group the engine commits carries its own ``write_id``, so equal writes are told apart.

Two hosts appending the same words, or popping the same last message, write
groups that would otherwise be byte-for-byte equal; a save refused by
compare-and-set is read back to learn whether it landed, and must not take
the other writer's equal group for its own (test_history_api.py races them).
"""

from __future__ import annotations

import re

import pytest
from test_history_api import ANA, pair, runtime

from agentium_harness import (
    InvalidArgumentError,
    Message,
    RetainedRecord,
    Role,
    Scope,
    SessionKey,
)
from agentium_harness._codec import digest_bytes
from agentium_harness.plugin_api import ArchiveCorruptError, MessageGroup, decode_archived_group

pytestmark = pytest.mark.anyio

HEX32 = re.compile(r"[0-9a-f]{32}")
KEY = SessionKey("acme", "ana", "s1")


async def test_every_group_the_engine_commits_carries_its_own_write_id() -> None:
    rt, _, _, _ = runtime(max_groups=2)  # small: some groups are archived and read back from there
    async with rt:
        first = await rt.append(ANA, "s1", pair(0))
        second = await rt.append(ANA, "s1", pair(0))  # the very same messages
        await rt.run(ANA, "s1", "hello")
        await rt.retract(ANA, "s1", count=1, reason="pop_item")
        await rt.reset_view(ANA, "s1", reason="clear_session")
        await rt.append(ANA, "s1", [Message(Role.USER, "after")])
        page = await rt.read_history(ANA, "s1", max_groups=20, view=False)
    groups = page.groups
    assert [g.seq for g in groups] == list(range(6))
    ids = [g.group.retained.write_id for g in groups if g.group.retained is not None]
    assert len(ids) == 6 and all(HEX32.fullmatch(i or "") for i in ids)
    assert len(set(ids)) == 6
    # The two appends of equal messages are different groups to a digest.
    assert groups[0].messages == groups[1].messages
    assert groups[0].digest != groups[1].digest
    assert (first.seq, second.seq) == (0, 1)


@pytest.mark.parametrize("bad", ["A" * 32, "0" * 31, "0" * 33, "g" * 32, "", 5, b"0" * 32])
def test_a_write_id_not_32_lowercase_hex_digits_is_refused(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="write_id"):
        RetainedRecord(Scope("acme", "ana", "s1"), write_id=bad)  # type: ignore[arg-type]


def test_a_group_without_a_write_id_keeps_its_bytes() -> None:
    """Groups committed before ``write_id`` existed encode exactly as they did (no key at all)."""
    group = MessageGroup(seq=3, messages=tuple(pair(3)), retained=RetainedRecord(Scope("acme", "ana", "s1")))
    assert b"write_id" not in group.canonical_bytes()
    with_id = MessageGroup(
        seq=3, messages=tuple(pair(3)), retained=RetainedRecord(Scope("acme", "ana", "s1"), write_id="a" * 32)
    )
    assert with_id.canonical_bytes().endswith(b',"write_id":"' + b"a" * 32 + b'"},"seq":3}')


def test_a_stored_group_with_a_damaged_write_id_is_refused_as_damage() -> None:
    """A write id edited in storage (its digest recomputed to match) fails the strict decode."""
    group = MessageGroup(
        seq=0, messages=tuple(pair(0)), retained=RetainedRecord(Scope("acme", "ana", "s1"), write_id="a" * 32)
    )
    data = group.canonical_bytes()
    assert decode_archived_group(KEY, 0, group.digest, data, "group 0").retained == group.retained
    for damaged in (data.replace(b"a" * 32, b"A" * 32), data.replace(b'"' + b"a" * 32, b'"' + b"a" * 31)):
        with pytest.raises(ArchiveCorruptError):
            decode_archived_group(KEY, 0, digest_bytes(damaged), damaged, "group 0")
