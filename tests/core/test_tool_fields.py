"""A Tool's fields are checked when it is built, so a revision's effect refusal cannot be sidestepped.

``Tool(..., effect="write")`` (a plain string) used to be accepted as is, and
the turn compared ``tool.effect is EffectLevel.WRITE``: the handler of such a
tool ran during a verification revision with ``allow_revision_effects`` off
(R31). A typo (``"wirte"``) was accepted too. Now a valid string becomes its
EffectLevel and anything else is refused with ``InvalidArgumentError``, like a
handler that cannot be called, a description that is not text, or a registry
given something other than tools.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from agentium_harness import (
    EffectLevel,
    InvalidArgumentError,
    Tool,
    ToolRegistry,
    ToolStatus,
    VerifiedIdentity,
    create_harness_runtime,
    verified_completion_policy,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    CompletionCandidate,
    CompletionVerifier,
    EvidenceEntry,
    Verdict,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
)

ANA = VerifiedIdentity("acme", "ana", "test-auth")


async def _handler(arguments: Any) -> str:
    return "ok"


@pytest.mark.parametrize("given", ["none", "read", "write", *EffectLevel])
def test_an_effect_given_by_its_value_becomes_the_effect_level(given: Any) -> None:
    tool = Tool("t", _handler, given)
    assert type(tool.effect) is EffectLevel and tool.effect == EffectLevel(given)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"effect": "wirte"},
        {"effect": "WRITE"},
        {"effect": 1},
        {"effect": None},
        {"handler": None},
        {"handler": "write"},
        {"description": None},
        {"description": "bad \ud800"},
    ],
    ids=[
        "typo",
        "wrong-case",
        "int",
        "none",
        "no-handler",
        "string-handler",
        "none-description",
        "surrogate",
    ],
)
def test_bad_tool_fields_are_refused_with_a_typed_error(kwargs: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"name": "t", "handler": _handler, **kwargs}
    with pytest.raises(InvalidArgumentError):
        Tool(**fields)


@pytest.mark.parametrize("tools", [None, "abc", Tool("t", _handler), [Tool("t", _handler), "u"]])
def test_a_registry_of_anything_but_tools_is_refused(tools: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        ToolRegistry(tools)


def test_a_second_tool_of_the_same_name_is_refused_and_the_first_kept() -> None:
    first = Tool("t", _handler)
    registry = ToolRegistry([first])
    with pytest.raises(InvalidArgumentError, match="already registered"):
        registry.register(Tool("t", _handler, "write"))
    assert registry.resolve("t", frozenset({"t"})) is first


class FailsOnce(CompletionVerifier):
    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities(artifact_digests=True)

    def __init__(self) -> None:
        self.calls = 0

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        self.calls += 1
        verdict = Verdict.FAIL if self.calls == 1 else Verdict.PASS
        return VerificationResult(verdict, (EvidenceEntry("artifact", "x", "d"),), "r")


def _as_string(tool: Tool) -> Tool:
    object.__setattr__(tool, "effect", "write")  # an object built around the converter
    return tool


@pytest.mark.anyio
@pytest.mark.parametrize(
    "make",
    [
        lambda h: Tool("write", h, EffectLevel.WRITE),
        lambda h: Tool("write", h, "write"),
        lambda h: _as_string(Tool("write", h, "write")),
    ],
    ids=["enum", "string", "string-set-past-the-converter"],
)
async def test_a_write_tool_given_any_way_is_refused_during_a_revision(make: Any) -> None:
    writes: list[Any] = []

    async def write(arguments: Any) -> str:
        writes.append(arguments)
        return "written"

    provider = ScriptedProvider(
        replies=[
            "Done.",
            {"content": "", "tool_calls": [{"id": "w1", "name": "write", "arguments": {"t": 1}}]},
            "Fixed.",
        ]
    )
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=FailsOnce(),
        tools=ToolRegistry([make(write)]),
        completion_policy=verified_completion_policy(on_fail="revise", max_revisions=1),
    )
    result = await runtime.run(ANA, "s1", "go", grants=["write"], completion=True)
    assert writes == []
    assert [o.status for o in result.tool_outcomes] == [ToolStatus.REFUSED_EFFECT]
    await runtime.aclose()
