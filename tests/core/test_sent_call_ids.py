"""The ids the history ``run()`` sends gives its tool calls: valid, each once, and the same every run.

Two rules of the request, canonical history never rewritten:

- An id an earlier release committed as ``"<id>#<n>"`` (``run()`` renamed
  reused ids so for a while) is sent as this release names it,
  ``own_id_form(<id>, n)`` (``"<id>_<n>"``, or Mistral's nine letters and
  digits): ``#`` is outside the alphabet Anthropic, Bedrock and Mistral hold
  ids to, and each refused every request of such a session.
- A call naming an id an earlier call of the request is sent under is sent
  under an id of its own named by its group's ``seq``: a call's name depends
  on the calls before it and its own group only, so it is the same on every
  run whatever groups come after it (a provider's prompt cache and the model
  see one history, not one renamed anew each turn).
"""

from __future__ import annotations

import re
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import (
    EffectLevel,
    Message,
    MessageGroup,
    Role,
    Tool,
    ToolCall,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.call_ids import request_history
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import own_id_form

ANA = VerifiedIdentity("acme", "ana", "test-auth")
STRICT = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _exchange(call_id: str, tag: str) -> list[Message]:
    return [
        Message(Role.USER, f"ask {tag}"),
        Message(Role.ASSISTANT, "", tool_calls=(ToolCall(call_id, "fetch", {"q": tag}),)),
        Message(Role.TOOL, f"result {tag}", tool_call_id=call_id),
        Message(Role.ASSISTANT, f"answer {tag}"),
    ]


def _sent(messages: list[Message]) -> tuple[list[str], list[str]]:
    calls = [c.id for m in messages for c in m.tool_calls]
    results = [m.tool_call_id or "" for m in messages if m.role is Role.TOOL]
    return calls, results


def _answers_its_own_call(messages: list[Message]) -> bool:
    asked = {c.id: c.arguments["q"] for m in messages for c in m.tool_calls}
    return all(m.content == f"result {asked[m.tool_call_id or '']}" for m in messages if m.role is Role.TOOL)


def _runtime(provider: ScriptedProvider) -> Any:
    async def fetch(arguments: dict[str, Any]) -> str:
        return f"result {arguments['q']}"

    return create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("fetch", fetch, EffectLevel.READ)]),
    )


LEGACY = [
    ("call_0#1", "call_0_1"),
    ("toolu_01A09q90qw90lq917835lq9#2", "toolu_01A09q90qw90lq917835lq9_2"),
    ("aB3dE5gH7#1", "aB3dE5gH1"),  # Mistral's nine letters and digits, as this release names it
    ("x" * 254 + "#1", "x" * 62 + "_1"),  # the old form kept 256 characters; this one 64
    ("c1#1", "c1_1"),
    ("c1_1", "c1_1_5"),  # a later group's own c1_1: the earlier took the name, so it gets its own
    ("functions.edit:0#1", "functions.edit:0_1"),  # Kimi's own alphabet is the model's: kept
]


@pytest.mark.anyio
async def test_ids_committed_in_the_old_hash_form_are_sent_in_this_releases_form() -> None:
    provider = ScriptedProvider(replies=["done", "again"])
    runtime = _runtime(provider)
    async with runtime:
        with anyio.fail_after(30):
            for stored, _name in LEGACY:
                await runtime.append(ANA, "s1", _exchange(stored, stored))
            await runtime.run(ANA, "s1", "go on")
            await runtime.run(ANA, "s1", "and again")
            history = list((await runtime.read_history(ANA, "s1", max_groups=20)).messages)
    for request in provider.calls:
        messages = [*request.history]
        calls, results = _sent(messages)
        assert calls == results == [name for _stored, name in LEGACY]
        assert _answers_its_own_call(messages)
        assert all(STRICT.fullmatch(c) for c in calls if "." not in c)
    # Canonical history is as appended: the stored bytes are never rewritten.
    assert _sent(history)[0] == [stored for stored, _name in LEGACY]


@pytest.mark.anyio
async def test_a_duplicates_sent_id_stays_the_same_when_later_groups_take_names() -> None:
    # Sent as c1_1 on one run, group B's call was sent as c1_2 on the next once a later group
    # held c1_1 (the name went to the first n no call of the whole request held).
    provider = ScriptedProvider(replies=["one", "two", "three"])
    runtime = _runtime(provider)
    async with runtime:
        with anyio.fail_after(30):
            await runtime.append(ANA, "s1", _exchange("c1", "A"))
            await runtime.append(ANA, "s1", _exchange("c1", "B"))
            await runtime.run(ANA, "s1", "first")
            sent = [c for m in provider.calls[0].history for c in m.tool_calls]
            (b_sent,) = [c.id for c in sent if c.arguments["q"] == "B"]
            assert b_sent != "c1"
            await runtime.append(ANA, "s1", _exchange(b_sent, "C"))  # a later group holds B's name
            await runtime.append(ANA, "s1", _exchange("c1", "D"))
            await runtime.run(ANA, "s1", "second")
            await runtime.append(ANA, "s1", _exchange(own_id_form("c1", 1), "E"))
            await runtime.run(ANA, "s1", "third")
    before: list[Message] = []
    for request in provider.calls:
        messages = [*request.history]
        calls, results = _sent(messages)
        assert len(set(calls)) == len(calls) and results == calls
        assert _answers_its_own_call(messages)
        # Each run sends what the one before sent as it sent it: the history only grew after it.
        assert len(messages) > len(before) and messages[: len(before)] == before
        before = messages
    assert len(provider.calls) == 3


def _groups(spec: list[list[str]]) -> list[MessageGroup]:
    return [
        MessageGroup(seq, tuple(m for i, call_id in enumerate(ids) for m in _exchange(call_id, f"{seq}.{i}")))
        for seq, ids in enumerate(spec)
    ]


IDS = st.sampled_from(
    ["c1", "c1_1", "c1_2", "c1#1", "c1_1#1", "c1#2", "c1#1#1", "aB3dE5gH7", "aB3dE5gH1", "aB3dE5gH7#1"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(IDS, min_size=1, max_size=4), min_size=1, max_size=8), st.integers(0, 8))
def test_each_call_is_sent_under_one_valid_name_that_no_later_group_changes(
    spec: list[list[str]], cut: int
) -> None:
    groups = _groups(spec)
    sent = list(request_history(groups, None, []))
    calls, results = _sent(sent)
    assert len(set(calls)) == len(calls) and results == calls  # once each, each result after its call
    assert _answers_its_own_call(sent)
    assert all(STRICT.fullmatch(c) for c in calls)  # no '#' reaches a provider
    assert all(
        len(c) == 9
        for c, given_id in zip(calls, (i for ids in spec for i in ids), strict=True)
        if given_id.startswith("aB3")
    )  # Mistral's form kept
    # Sent with fewer groups after them, the earlier groups are sent exactly so.
    head = list(request_history(groups[:cut], None, []))
    assert sent[: len(head)] == head
    assert list(request_history(groups, None, [])) == sent  # and the same on every run
