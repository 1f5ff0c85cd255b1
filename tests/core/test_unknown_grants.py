"""A grant that names no registered tool is refused before the run: no model call, nothing written.

``run(grants=["lokup"])`` ran the turn with the tool the host meant to grant not offered to the
model, and said nothing: the model answered without it (or asked for it and was refused).
The registry is known when the run starts, so the typo is the host's argument error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agentium_harness import CommitState, SessionKey, VerifiedIdentity
from agentium_harness._engine.build import create_harness_runtime
from agentium_harness._engine.tools import Tool, ToolRegistry, ToolStatus
from agentium_harness._errors import InvalidArgumentError
from agentium_harness._ports import OpContext
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("t", "ana", "test-auth")
KEY = SessionKey("t", "ana", "s1")


async def _lookup(args: Mapping[str, Any]) -> str:
    return "found"


def _runtime(tools: ToolRegistry, replies: list[object]) -> tuple[Any, ScriptedProvider]:
    provider = ScriptedProvider(replies=replies)
    runtime = create_harness_runtime(
        provider=provider, archive=InMemoryArchive(), session_store=InMemorySessionStore(), tools=tools
    )
    return runtime, provider


@pytest.mark.parametrize(
    ("tools", "grants", "named"),
    [
        ([Tool("lookup", _lookup)], ["lookup", "lokup"], r"'lokup' \(registered: 'lookup'\)"),
        ([], ["lookup"], r"'lookup' \(registered: none\)"),
        ([Tool("lookup", _lookup)], {"a\x00"}, r"'a\\x00'"),
    ],
)
async def test_a_grant_naming_no_tool_is_refused_before_the_model_is_called(
    tools: list[Tool], grants: Any, named: str
) -> None:
    runtime, provider = _runtime(ToolRegistry(tools), ["done"])
    with pytest.raises(InvalidArgumentError, match=named) as caught:
        await runtime.run(ANA, "s1", "find it", grants=grants)
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    assert provider.calls == []
    assert await runtime.session_store.load(KEY, OpContext()) is None
    await runtime.aclose()


async def test_a_tool_registered_after_the_runtime_was_built_can_be_granted() -> None:
    # The registry may grow between runs: a grant is checked against it as the run starts.
    tools = ToolRegistry()
    script: list[object] = [{"content": "", "tool_calls": [{"id": "c1", "name": "late"}]}, "done"]
    runtime, _ = _runtime(tools, script)
    tools.register(Tool("late", _lookup))
    result = await runtime.run(ANA, "s1", "find it", grants=["late"])
    assert [(o.name, o.status) for o in result.tool_outcomes] == [("late", ToolStatus.OK)]
    await runtime.aclose()
