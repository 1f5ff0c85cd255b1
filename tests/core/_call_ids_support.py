"""What the tool-call id tests share: a tool exchange, the ids a request sends, and a runtime with a tool."""

from __future__ import annotations

from typing import Any

from agentium_harness import (
    EffectLevel,
    Message,
    MessageGroup,
    ResidentLimits,
    Role,
    RuntimeLimits,
    Tool,
    ToolCall,
    ToolRegistry,
    create_harness_runtime,
)
from agentium_harness._engine.call_ids import request_history
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider


def exchange(call_id: str, tag: str) -> list[Message]:
    """One whole tool exchange under ``call_id``: the ask, the call, its result, the answer."""
    return [
        Message(Role.USER, f"ask {tag}"),
        Message(Role.ASSISTANT, "", tool_calls=(ToolCall(call_id, "fetch", {"q": tag}),)),
        Message(Role.TOOL, f"result {tag}", tool_call_id=call_id),
        Message(Role.ASSISTANT, f"answer {tag}"),
    ]


def sent_ids(messages: list[Message]) -> tuple[list[str], list[str]]:
    """The call ids of ``messages`` and the ids their results answer, in order."""
    calls = [c.id for m in messages for c in m.tool_calls]
    results = [m.tool_call_id or "" for m in messages if m.role is Role.TOOL]
    return calls, results


def answers_its_own_call(messages: list[Message]) -> bool:
    """Whether every result is sent under its own call's name (its text names that call's query)."""
    asked = {c.id: c.arguments["q"] for m in messages for c in m.tool_calls}
    return all(m.content == f"result {asked[m.tool_call_id or '']}" for m in messages if m.role is Role.TOOL)


def history_groups(spec: list[list[str]]) -> list[MessageGroup]:
    """One group per item of ``spec`` (seq 0 on), each a tool exchange per call id it lists."""
    return [
        MessageGroup(seq, tuple(m for i, call_id in enumerate(ids) for m in exchange(call_id, f"{seq}.{i}")))
        for seq, ids in enumerate(spec)
    ]


def sent_in_step(spec: list[list[str]], cut: int) -> list[str]:
    """The names ``spec``'s history sends its calls under, checked to hold together.

    Each call is sent once under its name, each result after its call and
    under its own call's name; the first ``cut`` groups, sent alone, are sent
    exactly as they are with the later groups after them; and a second look
    sends the same.
    """
    groups = history_groups(spec)
    sent = list(request_history(groups, None, []))
    calls, results = sent_ids(sent)
    assert len(set(calls)) == len(calls) and results == calls  # once each, each result after its call
    assert answers_its_own_call(sent)
    head = list(request_history(groups[:cut], None, []))
    assert sent[: len(head)] == head
    assert list(request_history(groups, None, [])) == sent  # and the same on every run
    return calls


def fetch_runtime(provider: ScriptedProvider, max_groups: int | None = None) -> Any:
    """An in-memory runtime with one read tool, ``fetch``, answering ``result <q>``."""

    async def fetch(arguments: dict[str, Any]) -> str:
        return f"result {arguments['q']}"

    limits = None if max_groups is None else RuntimeLimits(resident=ResidentLimits(max_groups=max_groups))
    return create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("fetch", fetch, EffectLevel.READ)]),
        limits=limits,
    )
