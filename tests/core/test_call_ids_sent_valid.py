"""Every tool call id a request carries is valid, the same on every request, and a model's valid id as given.

Three ways an id reached a provider invalid, or changed between requests:

- a model's own id ending in ``#<digits>`` (``call_7#2``) was committed as
  given and sent so on the next step of its turn, then read as an earlier
  release's ``"<id>#<n>"`` and sent as ``call_7_2`` from the next run on;
- a model's id with ``#`` inside that clashed within its turn was committed
  as ``"fn#a_1"``, and sent so, ``#`` and all, on every request;
- an id of over 64 characters (Bedrock's documented cap, which Anthropic's
  and OpenAI's ids keep within) was sent as given, however long.

Now a call of a reply whose id is not valid (1 to 64 characters of
``[A-Za-z0-9_-]``, plus ``.`` and ``:`` of Kimi's ``functions.edit:0``) runs
and is committed under an id of its own, as a duplicate is; an id a host
appended is sent in a valid form, named so on every run, never two calls
under one name; and a valid id is sent as it is.
"""

from __future__ import annotations

import re
from typing import Any

import anyio
import pytest
from _call_ids_support import (
    answers_its_own_call,
    exchange,
    fetch_runtime,
    history_groups,
    sent_ids,
    sent_in_step,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import (
    Message,
    Role,
    ToolCall,
    VerifiedIdentity,
)
from agentium_harness._engine.call_ids import distinct_ids, request_history
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import ModelRequest, sent_id_form

ANA = VerifiedIdentity("acme", "ana", "test-auth")
VALID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
LONG = "call_" + "a" * 75  # 80 characters of the strict alphabet


def _calls(*ids: str) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"id": i, "name": "fetch", "arguments": {"q": i}} for i in ids]}


def _whole(request: ModelRequest) -> list[Message]:
    return [*request.history, *request.turn]


async def _two_runs(*ids: str) -> tuple[ScriptedProvider, list[Message]]:
    """A run whose model calls ``ids`` in one reply, then a second run: the provider and the history."""
    provider = ScriptedProvider(replies=[_calls(*ids), "done", "next"])
    # Nothing evicted: each run sends every group (a call's name depends on the calls before it).
    async with fetch_runtime(provider, max_groups=20) as runtime:
        with anyio.fail_after(30):
            await runtime.run(ANA, "s1", "go", grants=["fetch"])
            await runtime.run(ANA, "s1", "again", grants=["fetch"])
            history = list((await runtime.read_history(ANA, "s1", max_groups=10)).messages)
    return provider, history


@pytest.mark.anyio
@pytest.mark.parametrize(
    "ids",
    [
        pytest.param(("call_7#2",), id="model-id-ending-hash-digits"),
        pytest.param(("fn#a", "fn#a"), id="hash-inside-clashing-in-its-turn"),
        pytest.param((LONG,), id="over-64-characters"),
        pytest.param((LONG, LONG + "b"), id="two-long-ids-alike-for-64-characters"),
    ],
)
async def test_a_reply_naming_an_invalid_id_runs_under_a_valid_one_sent_alike_on_every_request(
    ids: tuple[str, ...],
) -> None:
    provider, history = await _two_runs(*ids)
    step_two, next_run = provider.calls[1], provider.calls[2]
    committed = sent_ids(history)[0][: len(ids)]
    for request in (step_two, next_run):
        messages = _whole(request)
        calls, results = sent_ids(messages)
        assert calls == results == committed  # the same names on the turn's next step and the next run
        assert answers_its_own_call(messages)
    assert all(VALID.fullmatch(c) for c in committed), committed
    assert len(set(committed)) == len(ids)


@pytest.mark.anyio
async def test_a_models_valid_ids_are_run_kept_and_sent_as_given() -> None:
    ids = ("functions.edit:0", "aB3dE5gH7", "toolu_01A09q90qw90lq917835lq9", "call-1", "x" * 64)
    provider, history = await _two_runs(*ids)
    assert sent_ids(history)[0][: len(ids)] == list(ids)
    assert sent_ids(_whole(provider.calls[2]))[0] == list(ids)


@pytest.mark.anyio
async def test_ids_a_host_appended_are_sent_valid_distinct_and_alike_on_every_run() -> None:
    appended = [LONG, LONG + "b", "fn#a", "fn_a", "c 1", "c1#1", "c1_1", "fn#a_1"]
    provider = ScriptedProvider(replies=["one", "two"])
    async with fetch_runtime(provider, max_groups=20) as runtime:
        with anyio.fail_after(30):
            for n, call_id in enumerate(appended):
                await runtime.append(ANA, "s1", exchange(call_id, str(n)))
            await runtime.run(ANA, "s1", "first")
            await runtime.run(ANA, "s1", "second")
            stored = sent_ids(list((await runtime.read_history(ANA, "s1", max_groups=20)).messages))[0]
    first, second = (list(request.history) for request in provider.calls)
    for messages in (first, second):
        calls, results = sent_ids(messages)
        assert results == calls and len(set(calls)) == len(calls)
        assert all(VALID.fullmatch(c) for c in calls), calls
        assert answers_its_own_call(messages)
    assert second[: len(first)] == first  # the second run sends the first run's history as it did
    assert sent_ids(first)[0][3] == "fn_a"  # a valid id no earlier call is sent under: as given
    assert stored[: len(appended)] == appended  # canonical history as appended


def test_a_history_of_valid_ids_is_sent_as_the_very_messages_it_holds() -> None:
    groups = history_groups([["c1", "functions.edit:0"], ["aB3dE5gH7", "x" * 64]])
    sent = request_history(groups, None, [])
    held = [m for g in groups for m in g.messages]
    assert len(sent) == 16 and all(a is b for a, b in zip(sent, held, strict=True))


def _names(spec: list[list[str]]) -> dict[str, str]:
    """What each call of ``spec``'s history is sent as, by the id it was stored under."""
    calls = [c for m in request_history(history_groups(spec), None, []) for c in m.tool_calls]
    stored = [i for ids in spec for i in ids]
    return dict(zip(stored, (c.id for c in calls), strict=True))


def test_an_invalid_ids_name_depends_on_no_other_call() -> None:
    # Cut to 64 or with each other character as "_", "fn#a" and "fn a" (or two ids alike for 64
    # characters) had one form: the later one's name then moved whenever the earlier one left the
    # history sent (an eviction), and took a later valid "fn_a"'s. The digest keeps them apart.
    full = _names([["fn#a"], ["fn a"], [LONG], [LONG + "b"], ["fn_a"]])
    assert _names([["fn a"], [LONG + "b"]]) == {k: full[k] for k in ("fn a", LONG + "b")}
    assert full["fn_a"] == "fn_a" and len(set(full.values())) == 5


def test_sent_id_form_is_valid_for_any_stored_id() -> None:
    for stored in ("fn#a_1", "a#b#1", LONG, LONG + "#3", "c 1", "é#2", "call_7#2"):
        assert VALID.fullmatch(sent_id_form(stored)), stored
    for valid in ("c1", "functions.edit:0", "x" * 64):
        assert sent_id_form(valid) == valid


STORED = ("c1", "c1_1", "c1#1", "c1#a", "c1#a_1", "c 1", "c_1", "aB3dE5gH7", "aB3dE5gH7#1", "é#2")
IDS = st.sampled_from([*STORED, LONG, LONG + "b", LONG + "#1"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(IDS, min_size=1, max_size=4), min_size=1, max_size=8), st.integers(0, 8))
def test_each_call_of_any_history_is_sent_under_one_valid_name_no_later_group_changes(
    spec: list[list[str]], cut: int
) -> None:
    calls = sent_in_step(spec, cut)
    assert all(VALID.fullmatch(c) for c in calls)


@settings(max_examples=300, deadline=None)
@given(st.lists(IDS, min_size=1, max_size=6), st.sets(IDS, max_size=4))
def test_each_call_of_any_reply_runs_under_a_valid_id_of_its_own(ids: list[str], used: set[str]) -> None:
    reply = Message(Role.ASSISTANT, "", tool_calls=tuple(ToolCall(i, "fetch", {}) for i in ids))
    taken = {i for i in used if VALID.fullmatch(i)}  # what a request sends is valid
    out, renamed = distinct_ids(reply, taken)
    named = [c.id for c in out.tool_calls]
    assert all(VALID.fullmatch(c) for c in named)
    assert len(set(named)) == len(named) and not set(named) & taken
    kept = [a == b for a, b in zip(ids, named, strict=True)]
    assert renamed == kept.count(False)
    # A valid id no earlier call of the request or the reply names is kept as given.
    for n, given_id in enumerate(ids):
        if VALID.fullmatch(given_id) and given_id not in taken and given_id not in ids[:n]:
            assert kept[n]
