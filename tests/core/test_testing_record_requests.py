"""``agentium_harness.testing.record_requests``: what a test sees of the requests a turn sent."""

from __future__ import annotations

from typing import Any

import pytest

from agentium_harness import InvalidArgumentError, ProviderError, VerifiedIdentity, create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider, ExtractiveProviderConfig, ScriptedProvider
from agentium_harness.plugin_api import ModelProvider, ModelRequest, ModelResponse, OpContext
from agentium_harness.testing import record_requests

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")


def _runtime(provider: ModelProvider) -> Any:
    return create_harness_runtime(
        provider=provider, archive=InMemoryArchive(), session_store=InMemorySessionStore()
    )


async def test_each_request_is_kept_in_order_and_answered_as_before() -> None:
    provider = ScriptedProvider(replies=["first answer", "second answer"])
    requests = record_requests(provider)
    async with _runtime(provider) as runtime:
        one = await runtime.run(ANA, "s1", "the blue door")
        two = await runtime.run(ANA, "s1", "the red gate")
    assert (one.output, two.output) == ("first answer", "second answer")
    assert [r.turn[-1].content for r in requests] == ["the blue door", "the red gate"]
    # The second request carries the first turn as history: what the turn really sent.
    assert "first answer" in [m.content for m in requests[1].history]


async def test_only_the_recorded_instance_records_and_its_class_is_unchanged() -> None:
    recorded, other = ExtractiveProvider(), ExtractiveProvider()
    requests = record_requests(recorded)
    assert type(recorded) is ExtractiveProvider
    async with _runtime(other) as runtime:
        await runtime.run(ANA, "s1", "not recorded")
    async with _runtime(recorded) as runtime:
        await runtime.run(ANA, "s2", "recorded")
    assert [r.turn[-1].content for r in requests] == ["recorded"]


async def test_recording_twice_fills_both_lists() -> None:
    provider = ScriptedProvider(replies=["ok"], cycle=True)
    first, second = record_requests(provider), record_requests(provider)
    async with _runtime(provider) as runtime:
        await runtime.run(ANA, "s1", "hello")
    assert len(first) == len(second) == 1
    assert first[0] is second[0]


class _Failing(ScriptedProvider):
    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        raise ConnectionError("model unreachable")


async def test_a_request_that_fails_is_kept() -> None:
    provider = _Failing(replies=["never"])
    requests = record_requests(provider)
    async with _runtime(provider) as runtime:
        with pytest.raises(ProviderError):
            await runtime.run(ANA, "s1", "are you there")
    assert [r.turn[-1].content for r in requests] == ["are you there"]


@pytest.mark.parametrize("bad", [None, "provider", ScriptedProvider, ExtractiveProviderConfig()])
def test_anything_but_a_provider_instance_is_refused(bad: Any) -> None:
    before = dict(vars(ScriptedProvider))
    with pytest.raises(InvalidArgumentError, match="record_requests"):
        record_requests(bad)
    assert dict(vars(ScriptedProvider)) == before  # nothing set on the class
