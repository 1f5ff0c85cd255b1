"""``get_messages`` under other writers: a load whose pages keep being split by a change goes on.

A load of several pages checks that each page joins the one before; a
retraction (or a reset, or an erasure) landing between two pages makes it
start again. It gave up after 3 attempts with no pause between them,
however young the call: every such change is another writer committing,
so the session is live, not stuck. It now reads again, with jittered
back-off, for at least 3 attempts and until ``busy_timeout_s`` is spent,
as its saves do when busy; with ``busy_timeout_s=0`` it still gives up
after 3 attempts with ``SessionConflictError``, nothing changed.

The change is made from inside the runtime's ``read_history``, right after
a load's first page, where a concurrent writer lands.
"""

from __future__ import annotations

from typing import Any

import pytest
from agent_framework import Message as AFMessage

from agentium_agent_framework import AgentiumHistoryProvider, _provider
from agentium_harness import (
    CommitState,
    HarnessRuntime,
    SessionConflictError,
    VerifiedIdentity,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
#: Loads whose pages a change splits: more than the 3 attempts a load used to make.
LOST_RACES = 4
GROUPS = 10


async def filled(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch, **kwargs: Any
) -> AgentiumHistoryProvider:
    """A provider over a session of ``GROUPS`` one-message groups, loaded in pages of 2 groups."""
    monkeypatch.setattr(_provider, "MAX_PAGE_GROUPS", 2)
    provider = AgentiumHistoryProvider(runtime, ANA, **kwargs)
    for n in range(GROUPS):
        await provider.save_messages("chat-1", [AFMessage("user", [f"m{n}"])])
    return provider


def retract_after_first_pages(runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Another writer retracts the view's last message after each of the first ``LOST_RACES`` first pages."""
    read = runtime.read_history
    done: list[int] = []

    async def read_then_retract(*args: Any, **kwargs: Any) -> Any:
        page = await read(*args, **kwargs)
        if kwargs.get("before_seq") is None and len(done) < LOST_RACES:
            done.append(len(done))
            # The view changes: the load's next page no longer joins this one.
            await runtime.retract(ANA, "chat-1", count=1, reason="another writer")
        return page

    monkeypatch.setattr(runtime, "read_history", read_then_retract)
    return done


async def test_a_load_reads_again_past_three_views_changed_between_its_pages(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = await filled(runtime, monkeypatch)
    done = retract_after_first_pages(runtime, monkeypatch)
    loaded = await provider.get_messages("chat-1")
    assert len(done) == LOST_RACES
    # One consistent view: the one after the last retraction, whole.
    assert [m.text for m in loaded] == [f"m{n}" for n in range(GROUPS - LOST_RACES)]
    monkeypatch.undo()
    # The load counts as the save's load: a save after it commits.
    await provider.save_messages("chat-1", [AFMessage("user", ["next"])])
    assert [m.text for m in await provider.get_messages("chat-1")][-1] == "next"


async def test_a_zero_busy_timeout_still_gives_up_after_three_attempts_with_nothing_changed(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = await filled(runtime, monkeypatch, busy_timeout_s=0)
    done = retract_after_first_pages(runtime, monkeypatch)
    with pytest.raises(SessionConflictError, match=r"every read \(3 attempts\)") as refused:
        await provider.get_messages("chat-1")
    assert refused.value.commit_state is CommitState.NOT_COMMITTED
    assert len(done) == 3
    monkeypatch.undo()
    audit = await runtime.read_history(ANA, "chat-1", max_groups=50, view=False)
    # Only the other writer's three retractions: the failed load wrote nothing.
    assert [g.control.kind.value for g in audit.groups if g.control] == ["retract"] * 3
    assert [m.text for m in await provider.get_messages("chat-1")] == [f"m{n}" for n in range(GROUPS - 3)]
