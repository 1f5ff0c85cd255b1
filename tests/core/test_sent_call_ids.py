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

import anyio
import pytest
from _call_ids_support import answers_its_own_call, exchange, fetch_runtime, sent_ids, sent_in_step
from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import (
    Message,
    VerifiedIdentity,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import own_id_form

ANA = VerifiedIdentity("acme", "ana", "test-auth")
STRICT = re.compile(r"[A-Za-z0-9_-]{1,64}")


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
    runtime = fetch_runtime(provider)
    async with runtime:
        with anyio.fail_after(30):
            for stored, _name in LEGACY:
                await runtime.append(ANA, "s1", exchange(stored, stored))
            await runtime.run(ANA, "s1", "go on")
            await runtime.run(ANA, "s1", "and again")
            history = list((await runtime.read_history(ANA, "s1", max_groups=20)).messages)
    for request in provider.calls:
        messages = [*request.history]
        calls, results = sent_ids(messages)
        assert calls == results == [name for _stored, name in LEGACY]
        assert answers_its_own_call(messages)
        assert all(STRICT.fullmatch(c) for c in calls if "." not in c)
    # Canonical history is as appended: the stored bytes are never rewritten.
    assert sent_ids(history)[0] == [stored for stored, _name in LEGACY]


@pytest.mark.anyio
async def test_a_duplicates_sent_id_stays_the_same_when_later_groups_take_names() -> None:
    # Sent as c1_1 on one run, group B's call was sent as c1_2 on the next once a later group
    # held c1_1 (the name went to the first n no call of the whole request held).
    provider = ScriptedProvider(replies=["one", "two", "three"])
    runtime = fetch_runtime(provider)
    async with runtime:
        with anyio.fail_after(30):
            await runtime.append(ANA, "s1", exchange("c1", "A"))
            await runtime.append(ANA, "s1", exchange("c1", "B"))
            await runtime.run(ANA, "s1", "first")
            sent = [c for m in provider.calls[0].history for c in m.tool_calls]
            (b_sent,) = [c.id for c in sent if c.arguments["q"] == "B"]
            assert b_sent != "c1"
            await runtime.append(ANA, "s1", exchange(b_sent, "C"))  # a later group holds B's name
            await runtime.append(ANA, "s1", exchange("c1", "D"))
            await runtime.run(ANA, "s1", "second")
            await runtime.append(ANA, "s1", exchange(own_id_form("c1", 1), "E"))
            await runtime.run(ANA, "s1", "third")
    before: list[Message] = []
    for request in provider.calls:
        messages = [*request.history]
        calls, results = sent_ids(messages)
        assert len(set(calls)) == len(calls) and results == calls
        assert answers_its_own_call(messages)
        # Each run sends what the one before sent as it sent it: the history only grew after it.
        assert len(messages) > len(before) and messages[: len(before)] == before
        before = messages
    assert len(provider.calls) == 3


IDS = st.sampled_from(
    ["c1", "c1_1", "c1_2", "c1#1", "c1_1#1", "c1#2", "c1#1#1", "aB3dE5gH7", "aB3dE5gH1", "aB3dE5gH7#1"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(IDS, min_size=1, max_size=4), min_size=1, max_size=8), st.integers(0, 8))
def test_each_call_is_sent_under_one_valid_name_that_no_later_group_changes(
    spec: list[list[str]], cut: int
) -> None:
    calls = sent_in_step(spec, cut)  # once each, each result after its call, earlier groups unchanged
    assert all(STRICT.fullmatch(c) for c in calls)  # no '#' reaches a provider
    assert all(
        len(c) == 9
        for c, given_id in zip(calls, (i for ids in spec for i in ids), strict=True)
        if given_id.startswith("aB3")
    )  # Mistral's form kept


@pytest.mark.xfail(
    strict=True,
    reason=(
        "known gap: a repeated id's name is decided against the groups sent with it; once the earlier "
        "holder leaves the resident window the repeat is sent under its plain id. Sound fixes need the "
        "decision stored (a storage format change) or renaming ids a model gave (which Kimi and Mistral "
        "refuse); the flip only happens in a request whose earlier messages changed anyway"
    ),
)
@pytest.mark.anyio
async def test_a_repeats_name_stays_once_the_earlier_holder_leaves_the_window() -> None:
    provider = ScriptedProvider(replies=["one", "two", "three", "four"])
    runtime = fetch_runtime(provider, max_groups=3)
    async with runtime:
        with anyio.fail_after(30):
            await runtime.append(ANA, "s1", exchange("c1", "A"))
            await runtime.append(ANA, "s1", exchange("c1", "B"))
            for text in ("first", "second", "third", "fourth"):
                await runtime.run(ANA, "s1", text)
    seen = []  # (whether A was sent too, B's name) of each request that sent B
    for request in provider.calls:
        sent = {c.arguments["q"]: c.id for m in request.history for c in m.tool_calls}
        if "B" in sent:
            seen.append(("A" in sent, sent["B"]))
    assert (True, own_id_form("c1", 1)) in seen and any(not with_a for with_a, _ in seen), seen
    # Observed: [(True, 'c1_1'), (True, 'c1_1'), (False, 'c1')]: B renamed while A was sent, not after.
    assert len({name for _, name in seen}) == 1, seen
