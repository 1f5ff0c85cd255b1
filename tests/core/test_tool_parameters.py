"""Tools may carry a JSON Schema of their arguments; it reaches the model request as given."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentium_harness import (
    EffectLevel,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._errors import InvalidArgumentError
from agentium_harness._ports.provider import (
    ToolSpec,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.testing import record_requests

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


async def _handler(arguments: Any) -> str:
    return "ok"


def test_a_tool_keeps_a_private_copy_of_its_schema() -> None:
    given = {"type": "object", "properties": {"city": {"type": "string"}}}
    tool = Tool("weather", _handler, EffectLevel.READ, "weather", given)
    given["properties"]["city"]["type"] = "integer"
    assert tool.parameters == {"type": "object", "properties": {"city": {"type": "string"}}}
    [spec] = ToolRegistry([tool]).specs(frozenset({"weather"}))
    assert spec.parameters == tool.parameters
    assert ToolRegistry([Tool("plain", _handler)]).specs(frozenset({"plain"}))[0].parameters is None


@pytest.mark.parametrize(
    "bad, why",
    [
        ("{}", "JSON Schema object"),
        ({"type": "array"}, '"type": "object"'),
        ({"properties": {}}, '"type": "object"'),
        ({"type": "object", "default": math.nan}, "plain JSON"),
        ({"type": "object", "enum": {1, 2}}, "plain JSON"),
    ],
    ids=["a-string", "not-an-object", "no-type", "nan", "a-set"],
)
def test_a_schema_that_is_not_a_plain_json_object_schema_is_refused(bad: object, why: str) -> None:
    with pytest.raises(InvalidArgumentError, match=why):
        Tool("weather", _handler, parameters=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=why):
        ToolSpec("weather", "", bad)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_the_schema_reaches_the_request_of_a_granted_tool() -> None:
    provider = ScriptedProvider(replies=["done"])
    requests = record_requests(provider)
    tools = ToolRegistry(
        [Tool("weather", _handler, EffectLevel.READ, "weather", SCHEMA), Tool("other", _handler)]
    )
    async with create_harness_runtime(
        provider=provider, archive=InMemoryArchive(), session_store=InMemorySessionStore(), tools=tools
    ) as rt:
        await rt.run(VerifiedIdentity("acme", "ana", verified_by="t"), "s1", "hi", grants=["weather"])
    [spec] = requests[0].tools
    assert spec.name == "weather" and spec.parameters == SCHEMA
