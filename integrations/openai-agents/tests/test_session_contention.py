"""AgentiumSession under other writers: a call that keeps losing races goes on within ``busy_timeout_s``.

``pop_item`` and ``clear_session`` read the view, then write at the revision
read; ``get_items`` reading several pages checks that each page joins the one
before. Another writer landing in between makes them read again. They gave
up after 3 attempts, however young the call: two threads popping one session
(the SDK's concurrent-access pattern, each thread with its own event loop)
made one of them raise ``HistoryChangedError`` most runs, although the other
thread's pops were succeeding all along. Every lost race means another writer
committed, so the call now reads again (with jittered back-off) for at least
3 attempts and until ``busy_timeout_s`` is spent, as its writes do when busy.

The interference is run from inside the runtime's ``read_history``, right
after the call's read, where a concurrent writer lands.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sdk_sessions import ANA, build_runtime

from agentium_harness import HarnessRuntime, Message, Role
from agentium_openai_agents import AgentiumSession, HistoryChangedError
from agentium_openai_agents import _session as session_module

#: More lost races than the 3 attempts a call used to make.
LOST_RACES = 5


def item(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def interfere_after_reads(
    runtime: HarnessRuntime,
    monkeypatch: pytest.MonkeyPatch,
    interfere: Callable[[int], Awaitable[None]],
    *,
    first_pages_only: bool = False,
) -> list[int]:
    """Make the first ``LOST_RACES`` reads of the runtime each followed by ``interfere(n)``; the count."""
    read = runtime.read_history
    done: list[int] = []

    async def read_then_interfere(*args: Any, **kwargs: Any) -> Any:
        page = await read(*args, **kwargs)
        first_page = kwargs.get("before_seq") is None
        if len(done) < LOST_RACES and (first_page or not first_pages_only):
            done.append(len(done))
            await interfere(len(done) - 1)
        return page

    monkeypatch.setattr(runtime, "read_history", read_then_interfere)
    return done


@pytest.mark.anyio
async def test_pop_item_reads_again_past_three_lost_races_and_returns_the_item_it_retracted(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items([item("first"), item("second")])

    async def other_writer(n: int) -> None:
        await runtime.append(ANA, "chat-1", [Message(Role.USER, f"other {n}")])

    done = interfere_after_reads(runtime, monkeypatch, other_writer)
    assert await session.pop_item() == item(f"other {LOST_RACES - 1}")
    assert len(done) == LOST_RACES
    monkeypatch.undo()
    assert [i["content"] for i in await session.get_items()] == [
        "first",
        "second",
        *(f"other {n}" for n in range(LOST_RACES - 1)),
    ]
    audit = await runtime.read_history(ANA, "chat-1", max_groups=20, view=False)
    assert [g.control.kind.value for g in audit.groups if g.control] == ["retract"]


@pytest.mark.anyio
async def test_clear_session_reads_again_past_three_lost_races_and_clears_the_view(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items([item("first")])

    async def other_writer(n: int) -> None:
        await runtime.append(ANA, "chat-1", [Message(Role.USER, f"other {n}")])

    interfere_after_reads(runtime, monkeypatch, other_writer)
    await session.clear_session()
    monkeypatch.undo()
    assert await session.get_items() == []
    audit = await runtime.read_history(ANA, "chat-1", max_groups=20, view=False)
    assert [g.control.kind.value for g in audit.groups if g.control] == ["reset_view"]


@pytest.mark.anyio
async def test_get_items_reads_again_past_three_views_changed_between_its_pages(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of 2 groups: a whole-view read of 10 one-item groups reads 5+ pages, and a
    # retraction after each of its first pages makes the next page not join it.
    monkeypatch.setattr(session_module, "MAX_PAGE_GROUPS", 2)
    session = AgentiumSession(runtime, ANA, "chat-1")
    for n in range(10):
        await session.add_items([item(f"item {n}")])

    async def other_pop(n: int) -> None:
        await runtime.retract(ANA, "chat-1", count=1, reason="other writer")

    interfere_after_reads(runtime, monkeypatch, other_pop, first_pages_only=True)
    assert [i["content"] for i in await session.get_items()] == [f"item {n}" for n in range(10 - LOST_RACES)]


@pytest.mark.anyio
async def test_a_zero_busy_timeout_still_gives_up_after_three_attempts_with_nothing_changed(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1", busy_timeout_s=0)
    await session.add_items([item("first")])

    async def other_writer(n: int) -> None:
        await runtime.append(ANA, "chat-1", [Message(Role.USER, f"other {n}")])

    done = interfere_after_reads(runtime, monkeypatch, other_writer)
    with pytest.raises(HistoryChangedError, match="3 attempts"):
        await session.pop_item()
    assert len(done) == 3
    monkeypatch.undo()
    audit = await runtime.read_history(ANA, "chat-1", max_groups=20, view=False)
    assert not [g for g in audit.groups if g.control]
    assert len(await session.get_items()) == 4


def test_two_threads_popping_one_session_each_take_distinct_items_and_none_fails(tmp_path: Path) -> None:
    """Each thread runs its own event loop on one session object, as the SDK's concurrency tests do."""
    runtime = build_runtime(tmp_path / "agentium.db")
    session = AgentiumSession(runtime, ANA, "chat-1")
    count = 40

    async def fill() -> None:
        for n in range(count):
            await session.add_items([item(f"item {n}")])

    asyncio.run(fill())
    popped: list[list[str]] = [[], []]
    failures: list[BaseException] = []

    def popper(mine: list[str]) -> None:
        async def pop_all() -> None:
            while (taken := await session.pop_item()) is not None:
                mine.append(taken["content"])

        try:
            asyncio.run(pop_all())
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=popper, args=(mine,)) for mine in popped]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert failures == []
        taken = Counter(popped[0] + popped[1])
        assert taken == Counter(f"item {n}" for n in range(count))  # each once, none lost
        assert asyncio.run(session.get_items()) == []
    finally:
        asyncio.run(runtime.aclose())
