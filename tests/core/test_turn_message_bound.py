"""A run's group is held to ``append``'s bound of messages (``MAX_APPEND_MESSAGES``).

A tool loop adds a reply and a result per tool call each round: with enough
rounds it could commit a group larger than ``append`` would ever accept, which
readers and integrations written for ``append``'s groups may refuse. The turn
now stops, before the model call whose reply could take it over the bound, as
at the step limit: what ran is committed (diagnostic ``message_limit``), and
no model call or tool runs past it.
"""

from __future__ import annotations

from typing import Any

import pytest
from _effects_support import AlwaysFails

from agentium_harness import (
    MAX_APPEND_MESSAGES,
    CommitState,
    EffectLevel,
    RunStatus,
    RuntimeLimits,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
    verified_completion_policy,
)
from agentium_harness._engine import turn_budget
from agentium_harness._engine.turn import MAX_TOOL_CALLS
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")


def _round(n: int, calls: int) -> dict[str, Any]:
    """A scripted reply calling the cheap ``ping`` tool ``calls`` times (ids unique in the turn)."""
    return {"content": "", "tool_calls": [{"id": f"r{n}-c{i}", "name": "ping"} for i in range(calls)]}


def _runtime(provider: ScriptedProvider, ran: list[int], **kw: Any) -> Any:
    async def ping(args: Any) -> str:
        ran.append(1)
        return "pong"

    return create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("ping", ping, EffectLevel.READ)]),
        **kw,
    )


async def test_the_turn_bound_is_appends_bound() -> None:
    assert turn_budget.MAX_TURN_MESSAGES == MAX_APPEND_MESSAGES == 10_000


# 10,000 messages through a real tool loop: the bound is counted the same way on either loop, and
# trio's run of it took twice asyncio's (35 s on a loaded CI machine).
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_tool_loop_stops_before_its_group_could_pass_appends_bound() -> None:
    # 100 rounds of 128 calls would be 12,901 messages; the turn stops at the last round that fits.
    provider = ScriptedProvider(replies=[_round(n, MAX_TOOL_CALLS) for n in range(100)])
    ran: list[int] = []
    runtime = _runtime(provider, ran, limits=RuntimeLimits(max_steps=100))
    result = await runtime.run(ANA, "s1", "ping a lot", grants=["ping"])
    per_round = 1 + MAX_TOOL_CALLS
    rounds = (MAX_APPEND_MESSAGES - 1) // per_round  # every round's reply fitted with all its results
    held = 1 + rounds * per_round
    assert held <= MAX_APPEND_MESSAGES < held + per_round
    assert result.status is RunStatus.STEP_LIMIT and result.commit_state is CommitState.COMMITTED
    assert len(provider.calls) == rounds and len(ran) == rounds * MAX_TOOL_CALLS  # none past the bound
    [note] = [d for d in result.diagnostics if d.code == "message_limit"]
    assert note.severity.value == "warning" and str(held) in note.message
    assert not any(d.code == "step_limit" for d in result.diagnostics)
    # Read back: the committed group holds what ran, and append would take it as it is.
    page = await runtime.read_history(ANA, "s1", max_groups=1)
    [group] = page.groups
    assert len(group.messages) == held
    copied = await runtime.append(ANA, "copy", list(group.messages))
    assert copied.commit_state is CommitState.COMMITTED


async def test_a_revision_with_no_room_left_is_not_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    # A small bound for a cheap test: the turn (the input, a reply with 3 calls, their results, an
    # answer) holds 6 messages; a revision's request and a reply with its calls answered would
    # need 1 + 1 + MAX_TOOL_CALLS more, one past the bound (the reply alone would still fit).
    monkeypatch.setattr(turn_budget, "MAX_TURN_MESSAGES", 6 + 1 + MAX_TOOL_CALLS)
    provider = ScriptedProvider(replies=[_round(0, 3), "Done.", "Revised."])
    ran: list[int] = []
    runtime = _runtime(provider, ran, verifier=AlwaysFails())
    policy = verified_completion_policy(on_fail="revise", max_revisions=2)
    result = await runtime.run(ANA, "s1", "ping", grants=["ping"], completion=policy)
    assert len(provider.calls) == 2 and len(ran) == 3  # no revision call was made
    assert result.status is RunStatus.NOT_ACCEPTED and result.commit_state is CommitState.COMMITTED
    codes = [d.code for d in result.diagnostics]
    assert "message_limit" in codes and "revision_incomplete" in codes
    page = await runtime.read_history(ANA, "s1", max_groups=1)
    # The revision's request is not kept either: the group is the turn as it stood.
    assert [m.content for m in page.groups[0].messages][-1] == "Done."
    assert len(page.groups[0].messages) == 6
