"""The sizes a commit measured of its resident groups are carried to the next commit's plan (issue 22).

Planning an eviction measures each resident group (estimated tokens, bytes).
The commit that seals a snapshot keeps those sizes with it, and the next
commit on that very snapshot object reuses them for the groups it still
holds, measuring only the new one. Reused sizes must always equal what a
fresh measurement gives, and must never be used for other group objects.
(Private imports: the plan and the carried sizes have no public API.)
"""

from __future__ import annotations

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import (
    Message,
    MessageGroup,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SessionKey,
    ToolCall,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.resident import plan_eviction
from agentium_harness._history import tokens_and_size
from agentium_harness._ports import OpContext
from agentium_harness._ports.snapshot import resident_sizes
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore

ALICE = VerifiedIdentity("t", "u", "alice")


def _group(seq: int, words: int, complete: bool = True) -> MessageGroup:
    text = "word " * words
    if complete:
        return MessageGroup(seq, (Message(Role.USER, text), Message(Role.ASSISTANT, text)))
    # A call without its result: an incomplete group, which blocks eviction.
    call = Message(Role.ASSISTANT, text, tool_calls=(ToolCall("c1", "tool", {}),))
    return MessageGroup(seq, (Message(Role.USER, text), call))


LIMITS = st.builds(
    ResidentLimits,
    max_groups=st.integers(1, 6),
    max_tokens=st.integers(1, 400),
    max_bytes=st.integers(1, 4000),
)


@settings(max_examples=200, deadline=None)
@given(LIMITS, st.lists(st.tuples(st.integers(0, 120), st.booleans()), min_size=1, max_size=25))
def test_a_plan_with_carried_sizes_equals_the_plan_that_measures_everything(
    limits: ResidentLimits, turns: list[tuple[int, bool]]
) -> None:
    kept: tuple[MessageGroup, ...] = ()
    sizes: tuple[tuple[int, int], ...] = ()
    for seq, (words, complete) in enumerate(turns):
        resident = (*kept, _group(seq, words, complete))
        carried = plan_eviction(resident, limits, (kept, sizes))
        assert carried == plan_eviction(resident, limits)
        assert carried.sizes == tuple(map(tokens_and_size, resident))
        kept, sizes = carried.keep, carried.sizes[len(carried.evict) :]


def test_sizes_are_used_only_for_the_very_group_objects_they_were_measured_on() -> None:
    limits = ResidentLimits(max_groups=8, max_tokens=10_000, max_bytes=1_000)
    groups = tuple(_group(seq, 40) for seq in range(3))
    wrong = ((0, 0),) * len(groups)  # sizes that would keep everything resident
    fresh = plan_eviction(groups, limits)
    assert fresh.evict  # over max_bytes: measured, the oldest groups go
    # Equal groups that are other objects: the wrong sizes are not theirs and are not used.
    copies = tuple(attrs.evolve(g) for g in groups)
    assert copies == groups and plan_eviction(groups, limits, (copies, wrong)) == fresh
    # Sizes that do not match the groups one for one are not used either.
    assert plan_eviction(groups, limits, (groups, wrong[:2])) == fresh
    # A carried prefix longer than the groups planned for is not theirs.
    assert plan_eviction(groups[:2], limits, (groups, wrong)) == plan_eviction(groups[:2], limits)


@settings(max_examples=16, deadline=None)
@given(
    st.lists(st.integers(0, 300), min_size=2, max_size=12),
    st.integers(1, 4),
    st.integers(300, 5000),
    st.sampled_from(["asyncio", "trio"]),
    st.booleans(),
)
def test_every_committed_snapshot_carries_the_sizes_of_exactly_its_groups(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    max_groups: int,
    max_bytes: int,
    backend: str,
    joint: bool,
) -> None:
    # One file: the joint archive-and-save commit; two files: the archive's append, then the save.
    folder = tmp_path_factory.mktemp("sizes")
    path, archive_path = folder / "s.db", folder / ("s.db" if joint else "a.db")
    key = SessionKey("t", "u", "s")

    async def scenario() -> None:
        archive = SQLiteArchive(SQLiteConfig(path=str(archive_path)))
        store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
        rt = create_harness_runtime(
            provider=ScriptedProvider(replies=["ok " * 50, "fine"], cycle=True),
            archive=archive,
            session_store=store,
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=max_groups, max_bytes=max_bytes)),
            owned=[archive, store],
        )
        carried = 0
        async with rt:
            for n in lengths:
                result = await rt.run(ALICE, "s", "q" * n)
                stored = await store.load(key, OpContext())
                assert stored is not None and result.boundary == stored.snapshot.boundary
                sizes = resident_sizes(stored.snapshot)
                if sizes is not None:
                    carried += 1
                    # What the next plan will use instead of measuring: exactly a fresh measurement.
                    assert sizes == tuple(map(tokens_and_size, stored.snapshot.resident))
        assert carried == len(lengths)  # the store handed back the sealed snapshot every time

    anyio.run(scenario, backend=backend)
