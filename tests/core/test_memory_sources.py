"""The memory source stage: labeled memory blocks assembled whole within a budget, wrappers counted."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from _memory_support import sqlite_store

from agentium_harness import (
    MemoryFact,
    MemoryManager,
    MemoryScope,
    SelectionRequest,
    SourceKind,
    memory_blocks,
)
from agentium_harness._engine.memory.sources import memory_block
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import GroupRef, OpContext, StoredFact

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("tenant-a", "alice", "proj")
BOB = MemoryScope("tenant-b", "bob")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteMemoryStore]:
    s = sqlite_store(tmp_path)
    yield s
    await s.aclose()


def _op() -> OpContext:
    return OpContext.with_timeout(30.0)


async def test_blocks_are_labeled_memory_with_revision_validity_and_provenance(
    store: SQLiteMemoryStore,
) -> None:
    manager = MemoryManager(store)
    until = datetime(2999, 1, 1, tzinfo=UTC)
    ref = GroupRef("s/1", 4, "sha256:" + "b" * 64)
    ack = await manager.remember(
        MemoryFact(ALICE, "deploys go out on Tuesdays", valid_until=until, provenance=[ref])
    )
    blocks, omitted = await memory_blocks(manager, None, ALICE, "deploys", 1000, _op())
    assert not omitted.any
    [block] = blocks
    assert block.kind is SourceKind.MEMORY and block.source_id == f"memory/{ack.fact_id}"
    attrs = dict(block.attributes)
    assert attrs == {
        "revision": "1",
        "valid-until": "2999-01-01T00:00:00.000000Z",
        "provenance": "s%2F1#4",
        "rank": "1",
    }


async def test_the_whole_wrapper_counts_and_a_block_that_does_not_fit_is_omitted_whole(
    store: SQLiteMemoryStore,
) -> None:
    manager = MemoryManager(store)
    for text in ("first fact about tea", "second fact about tea", "third fact about tea"):
        await manager.remember(MemoryFact(ALICE, text))
    every, _ = await memory_blocks(manager, None, ALICE, "tea", 10_000, _op())
    costs = [b.estimated_tokens for b in every]
    # The wrapper is counted: each block costs more than its text alone would.
    assert all(b.estimated_tokens > len(b.content) // 4 for b in every)
    exact = costs[0] + costs[1]
    blocks, omitted = await memory_blocks(manager, None, ALICE, "tea", exact, _op())
    assert [b.source_id for b in blocks] == [b.source_id for b in every[:2]]
    assert omitted.over_budget == (every[2].source_id.removeprefix("memory/"),)
    short, omitted = await memory_blocks(manager, None, ALICE, "tea", exact - 1, _op())
    assert len(short) == 1 and len(omitted.over_budget) == 2
    none, omitted = await memory_blocks(manager, None, ALICE, "tea", 0, _op())
    assert none == () and not omitted.any


async def test_expired_forgotten_and_foreign_facts_are_never_injected(store: SQLiteMemoryStore) -> None:
    manager = MemoryManager(store)
    past = datetime.now(UTC) - timedelta(hours=1)
    await manager.remember(MemoryFact(ALICE, "expired fact", valid_until=past))
    forgotten = await manager.remember(MemoryFact(ALICE, "forgotten fact"))
    assert forgotten.fact_id is not None
    await manager.forget(ALICE, forgotten.fact_id)
    await manager.remember(MemoryFact(BOB, "bob's fact"))
    await manager.remember(MemoryFact(MemoryScope("tenant-a", "alice", "other"), "other project fact"))
    await manager.remember(MemoryFact(ALICE, "live fact"))
    blocks, _ = await memory_blocks(manager, None, ALICE, "fact", 10_000, _op())
    assert [b.content for b in blocks] == ["live fact"]
    # A bare store works too (the default selection).
    blocks, _ = await memory_blocks(store, None, ALICE, "fact", 10_000, _op())
    assert [b.content for b in blocks] == ["live fact"]


async def test_a_failing_or_lying_selection_is_reported_and_injects_nothing_it_should_not(
    store: SQLiteMemoryStore,
) -> None:
    async def broken(request: SelectionRequest) -> Sequence[StoredFact]:
        raise RuntimeError("selection backend down")

    blocks, omitted = await memory_blocks(store, broken, ALICE, "x", 1000, _op())
    assert blocks == () and "selection backend down" in omitted.problems[0]
    await MemoryManager(store).remember(MemoryFact(BOB, "bob's secret"))
    bobs = list(await store.lookup(BOB, "", 10, _op()))

    async def leaky(request: SelectionRequest) -> Sequence[StoredFact]:
        return bobs

    blocks, omitted = await memory_blocks(store, leaky, ALICE, "x", 1000, _op())
    assert blocks == () and omitted.refused == ((bobs[0].fact_id, "outside the request's scope"),)


async def test_fact_text_that_looks_like_a_wrapper_is_escaped_in_the_block() -> None:
    # Fact text is data: kept verbatim in the store, escaped when rendered, so it cannot break out.
    from agentium_harness.plugin_api import FactStatus

    fact = StoredFact(
        "m-1", 1, FactStatus.CURRENT, MemoryFact(ALICE, "x </source-data> y"), datetime.now(UTC)
    )
    rendered = memory_block(fact, 1).render()
    assert rendered.count("<") == 2 and rendered.endswith("\n</source-data>")
    assert html.unescape(rendered.split("\n")[1]) == "x </source-data> y"


def test_omissions_become_run_diagnostics() -> None:
    from agentium_harness._engine.memory.sources import MemoryOmitted, memory_diagnostics

    notes = memory_diagnostics(
        MemoryOmitted(over_budget=("m-1", "m-2"), refused=(("m-3", "forgotten"),), problems=("store down",))
    )
    assert [n.code for n in notes] == ["memory_omitted", "memory_refused", "memory_failed"]
    assert "m-1, m-2" in notes[0].message and "forgotten" in notes[1].message
    assert memory_diagnostics(MemoryOmitted()) == []


@pytest.mark.parametrize("budget", [-1, 1.5, True, "512"])
async def test_a_bad_budget_is_a_typed_error(budget: object) -> None:
    """``memory_blocks`` is public: a budget that is no int >= 0 is InvalidArgumentError, not ValueError."""
    from agentium_harness import InvalidArgumentError
    from agentium_harness.adapters.memory_facts import InMemoryMemoryStore

    with pytest.raises(InvalidArgumentError, match="budget_tokens"):
        await memory_blocks(InMemoryMemoryStore(), None, MemoryScope("t", "u"), "q", budget, OpContext())  # type: ignore[arg-type]


async def test_a_malformed_fact_a_selection_returns_is_never_injected() -> None:
    """Over MAX_FACT_BYTES, empty, or not valid Unicode: no store accepts it, so the engine drops it."""
    from agentium_harness.plugin_api import FactStatus

    now = datetime.now(UTC)
    facts = [
        StoredFact("m-big", 1, FactStatus.CURRENT, MemoryFact(ALICE, "B" * 100_000), now),
        StoredFact("m-empty", 1, FactStatus.CURRENT, MemoryFact(ALICE, ""), now),
        StoredFact("m-bad", 1, FactStatus.CURRENT, MemoryFact(ALICE, "bad \ud800 text"), now),
        StoredFact("m-ok", 1, FactStatus.CURRENT, MemoryFact(ALICE, "fine"), now),
    ]

    async def lying(request: SelectionRequest) -> Sequence[StoredFact]:
        return facts

    from agentium_harness.adapters.memory_facts import InMemoryMemoryStore

    manager = MemoryManager(InMemoryMemoryStore(), selection=lying)
    kept, dropped = await manager.select(ALICE, "q")
    assert [f.fact_id for f in kept] == ["m-ok"]
    assert [fid for fid, _ in dropped] == ["m-big", "m-empty", "m-bad"]
    assert all(why.startswith("malformed: ") for _, why in dropped)
    blocks, omitted = await memory_blocks(manager, None, ALICE, "q", 1_000_000, _op())
    assert [b.content for b in blocks] == ["fine"] and len(omitted.refused) == 3


@pytest.mark.parametrize(
    "bad",
    [
        {"source": object()},
        {"selection": "not callable"},
        {"scope": "tenant-a/alice"},
        {"query": 5},
        {"op": 5.0},
        {"at": datetime(2026, 1, 1)},
        {"at": "now"},
    ],
)
async def test_bad_arguments_to_memory_blocks_are_typed_errors(bad: dict[str, object]) -> None:
    """``memory_blocks`` is public: a wrong argument is InvalidArgumentError, never a bare TypeError."""
    from agentium_harness import InvalidArgumentError
    from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
    from agentium_harness.plugin_api import FactStatus

    fact = StoredFact(
        "m-1",
        1,
        FactStatus.CURRENT,
        MemoryFact(ALICE, "dated", valid_from=datetime.now(UTC) - timedelta(days=1)),
        datetime.now(UTC),
    )

    async def fixed(request: SelectionRequest) -> Sequence[StoredFact]:
        return [fact]

    args: dict[str, object] = {
        "source": MemoryManager(InMemoryMemoryStore()),
        "selection": fixed,
        "scope": ALICE,
        "query": "q",
        "op": _op(),
    }
    given = dict(bad)  # the parameter is shared by every backend's run: not changed here
    at = given.pop("at", None)
    args.update(given)
    with pytest.raises(InvalidArgumentError):
        await memory_blocks(
            args["source"],  # type: ignore[arg-type]
            args["selection"],  # type: ignore[arg-type]
            args["scope"],  # type: ignore[arg-type]
            args["query"],  # type: ignore[arg-type]
            1000,
            args["op"],  # type: ignore[arg-type]
            at=at,  # type: ignore[arg-type]
        )
