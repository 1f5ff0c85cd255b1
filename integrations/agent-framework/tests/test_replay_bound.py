"""``save_messages``' replay check reads the view's tail only until it decides, and within a byte bound.

A save compares the messages it is given with the view's last messages so a
replayed transcript is not stored twice. That read took the view's last
``len(messages)`` groups whatever their size: up to 10,000 groups of up to
32 MiB each. Now the tail is read newest first and only until it decides,
within ``max(max_bytes, MAX_APPEND_BYTES)`` bytes; a replay that needs more
is refused with nothing written. The check must stay exact: no message
stored twice, none dropped as a "replay" when it is new (the framework's
own rule over all of history is the reference).
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Content
from agent_framework import Message as AFMessage
from agent_framework._sessions import filter_new_messages

from agentium_agent_framework import AgentiumHistoryProvider, ReplayCheckLimitError
from agentium_agent_framework._provider import to_agentium
from agentium_agent_framework._replay import decided, message_identity, new_messages
from agentium_harness import (
    MAX_APPEND_BYTES,
    CommitState,
    HarnessRuntime,
    InvalidArgumentError,
    ResidentLimits,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import OpContext, SessionKey

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
MIB = 1024 * 1024


class CountingArchive(SQLiteArchive):
    """The SQLite archive, counting the groups its reads return."""

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.groups_read = 0

    async def read_groups(self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        groups = await super().read_groups(key, start_seq, max_groups, ctx)
        self.groups_read += len(groups)
        return groups


class CountingReads:
    """The runtime, counting the groups (and their bytes) its ``read_history`` hands back."""

    def __init__(self, runtime: HarnessRuntime) -> None:
        self.runtime, self.groups, self.bytes = runtime, 0, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runtime, name)

    async def read_history(self, *args: Any, **kwargs: Any) -> Any:
        page = await self.runtime.read_history(*args, **kwargs)
        self.groups += len(page.groups)
        self.bytes += sum(g.size_bytes for g in page.groups)
        return page


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[tuple[HarnessRuntime, CountingArchive]]:
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    archive, store = CountingArchive(config), SQLiteSessionStore(config)
    built = create_harness_runtime(
        provider=ScriptedProvider(replies=["(not called)"]),
        archive=archive,
        session_store=store,
        owned=(archive, store),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    try:
        yield built, archive
    finally:
        await built.aclose()


async def view_texts(runtime: HarnessRuntime, sid: str) -> list[str]:
    page = await runtime.read_history(ANA, sid, max_groups=1_000)
    return [m.content for m in page.messages]


async def test_a_save_reads_only_the_groups_that_decide_its_replay_check(
    sqlite: tuple[HarnessRuntime, CountingArchive],
) -> None:
    runtime, archive = sqlite
    provider = AgentiumHistoryProvider(runtime, ANA)
    for n in range(50):
        await provider.save_messages(
            "chat-1", [AFMessage("user", [f"q{n}"]), AFMessage("assistant", [f"a{n}"])]
        )
    before = await view_texts(runtime, "chat-1")
    spy = CountingReads(runtime)
    provider.runtime = spy  # type: ignore[assignment]
    archive.groups_read = 0
    # 40 new messages: the newest group ("a49") is found nowhere in them past their first, so it
    # decides alone. The save read the view's last 40 groups (38 of them from the archive).
    new = [AFMessage("user", [f"n{i}"]) for i in range(40)]
    await provider.save_messages("chat-1", new)
    assert spy.groups == 1
    assert archive.groups_read == 0  # the newest group is resident
    assert await view_texts(runtime, "chat-1") == [*before, *(f"n{i}" for i in range(40))]

    # A replay of the last 3 messages and 2 new ones: the 3 are not stored again, the 2 are.
    spy.groups = 0
    tail = [AFMessage("user", ["n37"]), AFMessage("user", ["n38"]), AFMessage("user", ["n39"])]
    await provider.save_messages("chat-1", [*tail, AFMessage("user", ["x"]), AFMessage("assistant", ["y"])])
    assert await view_texts(runtime, "chat-1") == [*before, *(f"n{i}" for i in range(40)), "x", "y"]
    # The newest group ("n0".."n39") decides: its last 3 messages repeat the given messages' first 3.
    assert spy.groups == 1

    # A whole transcript replayed with one new message: read back as far as it repeats, stored once.
    transcript = await provider.get_messages("chat-1")
    spy.groups = 0
    await provider.save_messages("chat-1", [*transcript, AFMessage("user", ["last"])])
    assert await view_texts(runtime, "chat-1") == [*before, *(f"n{i}" for i in range(40)), "x", "y", "last"]
    # 53 groups hold the transcript; pages of 1, 2, 4 ... groups read each seam again (at most 7).
    assert spy.groups <= 53 + 7


async def test_a_replay_past_the_read_bound_is_refused_and_writes_nothing(
    sqlite: tuple[HarnessRuntime, CountingArchive], caplog: pytest.LogCaptureFixture
) -> None:
    runtime, archive = sqlite
    provider = AgentiumHistoryProvider(runtime, ANA, max_bytes=1)  # a small max_bytes bounds loads only
    # Five one-message groups of about 7 MiB: 35 MiB, over the 32 MiB the replay check reads.
    big = [AFMessage("user", [f"{n}" + "x" * (7 * MIB)]) for n in range(5)]
    for message in big:
        await provider.save_messages("chat-1", [message])
    before = await runtime.read_history(ANA, "chat-1", max_groups=10)
    spy = CountingReads(runtime)
    provider.runtime = spy  # type: ignore[assignment]
    archive.groups_read = 0
    caplog.set_level(logging.WARNING, logger="agentium.agent_framework")
    # The whole transcript again and one new message: deciding needs all 35 MiB. Storing could
    # store a message twice, dropping could lose the new one: refused, nothing written.
    with pytest.raises(ReplayCheckLimitError, match="nothing was written") as refused:
        await provider.save_messages("chat-1", [*big, AFMessage("user", ["new"])])
    assert isinstance(refused.value, InvalidArgumentError)
    assert refused.value.commit_state is CommitState.NOT_COMMITTED
    # Pages of 1, 2 and 3 groups, each later one with its seam again, the last cut at the bound:
    # 6 groups handed back; 5 read from the archive (the newest is resident; one more was cut).
    assert (spy.groups, archive.groups_read) == (6, 5)
    after = await runtime.read_history(ANA, "chat-1", max_groups=10)
    assert (after.next_seq, after.snapshot_revision) == (before.next_seq, before.snapshot_revision)
    # Read: within the bound and one group more, each later page's seam again (7 MiB each).
    assert spy.bytes <= MAX_APPEND_BYTES + 2 * 7 * MIB + MIB
    warned = [r for r in caplog.records if r.name == "agentium.agent_framework"]
    assert warned and all("xxxx" not in r.getMessage() for r in warned)
    # New messages need only the newest group, however large the tail: a save of them goes through.
    spy.groups = 0
    await provider.save_messages("chat-1", [AFMessage("user", ["more"])])
    assert spy.groups == 1
    # A larger max_bytes reads far enough: only the new message is stored.
    wider = AgentiumHistoryProvider(runtime, ANA, max_bytes=64 * MIB)
    await wider.save_messages("chat-1", [*big, AFMessage("user", ["more"]), AFMessage("user", ["new"])])
    page = await runtime.read_history(ANA, "chat-1", max_groups=10)
    assert [m.content[:4] for m in page.messages] == ["0xxx", "1xxx", "2xxx", "3xxx", "4xxx", "more", "new"]


def test_decided_stops_where_all_of_history_would_decide_the_same() -> None:
    # Read newest first in groups and stopped where decided() says: the framework's own rule over
    # the whole history gives the same count, so nothing is stored twice and nothing new dropped.
    rng = random.Random(11)
    pool = [AFMessage(role, [text]) for role in ("user", "assistant") for text in ("a", "b")]
    pool += [AFMessage("user", ["a"], message_id="m1"), AFMessage("assistant", ["b"], message_id="m2")]
    stopped_early = 0
    for _ in range(4000):
        history = [rng.choice(pool) for _ in range(rng.randint(0, 8))]
        incoming = [rng.choice(pool) for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.5:
            incoming = history[rng.randint(0, len(history)) :] + incoming
        got = [message_identity(m) for m in incoming]
        read = 0
        while True:
            read = min(len(history), read + rng.randint(1, 3))  # one more group of 1 to 3 messages
            tail = history[len(history) - read :]
            ids = [message_identity(m) for m in tail]
            if read == len(history) or read >= len(incoming) or decided(ids, got):
                break
        stopped_early += read < min(len(history), len(incoming))
        ours = new_messages(ids[-len(incoming) :], [str(m.role) for m in tail][-len(incoming) :], got)
        theirs = len(incoming) - len(filter_new_messages(history, incoming))
        assert ours == theirs, ([m.text for m in history], [m.text for m in incoming], read)
    assert stopped_early > 500  # the early stop is exercised, not only the full reads


async def test_saves_over_grouped_history_store_exactly_what_the_framework_would() -> None:
    # The provider end to end (pages of 1, 2, 4 ... groups, early stops) against the framework's rule.
    rng = random.Random(5)
    pool = [AFMessage(role, [text]) for role in ("user", "assistant") for text in ("a", "b")]
    pool += [AFMessage("user", ["a"], message_id="m1"), AFMessage("assistant", ["b"], message_id="m2")]
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["(not called)"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )
    async with runtime:
        provider = AgentiumHistoryProvider(runtime, ANA)
        for case in range(300):
            sid = f"case-{case}"
            history = [rng.choice(pool) for _ in range(rng.randint(0, 12))]
            at = 0
            while at < len(history):  # stored as groups of 1 to 3 messages, unfiltered
                size = rng.randint(1, 3)
                await runtime.append(ANA, sid, [to_agentium(m) for m in history[at : at + size]])
                at += size
            incoming = [rng.choice(pool) for _ in range(rng.randint(1, 6))]
            if rng.random() < 0.5:
                incoming = history[rng.randint(0, len(history)) :] + incoming
            await provider.save_messages(sid, incoming)
            stored = await provider.get_messages(sid)
            expected = history + incoming[len(incoming) - len(filter_new_messages(history, incoming)) :]
            assert [message_identity(m) for m in stored] == [message_identity(m) for m in expected]


async def test_a_replay_of_any_bounded_load_of_tool_history_stores_only_its_new_message() -> None:
    # Calls and results in separate messages and groups, call ids used again: a load bounded to
    # its newest groups leaves out the results whose call it cut off (and the calls no result
    # answers). Replayed with a new message, none of what it loaded is stored again.
    rng = random.Random(7)

    def call(call_id: str) -> Content:
        return Content.from_function_call(call_id=call_id, name="f", arguments={})

    def result(call_id: str) -> Content:
        return Content.from_function_result(call_id=call_id, result="r")

    pool = [
        lambda: AFMessage("user", [rng.choice("ab")]),
        lambda: AFMessage("assistant", [rng.choice("ab")]),
        lambda: AFMessage("assistant", [rng.choice(["", "x"]) or call("w1"), call(rng.choice(["w1", "w2"]))]),
        lambda: AFMessage("tool", [result(rng.choice(["w1", "w2"]))]),
        lambda: AFMessage("tool", [result("w1"), result("w2")]),
    ]
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["(not called)"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )
    checked = 0
    async with runtime:
        provider = AgentiumHistoryProvider(runtime, ANA)
        for case in range(300):
            sid = f"case-{case}"
            history = [rng.choice(pool)() for _ in range(rng.randint(1, 10))]
            at = 0
            while at < len(history):  # stored as groups of 1 to 3 messages, unfiltered
                size = rng.randint(1, 3)
                await runtime.append(ANA, sid, [to_agentium(m) for m in history[at : at + size]])
                at += size
            bound = rng.randint(1, len(history))
            loaded = await AgentiumHistoryProvider(runtime, ANA, max_messages=bound).get_messages(sid)
            if len(loaded) == 1 and loaded[0].role == "user":
                continue  # a lone user message is stored again, by the framework's rule
            before = await view_texts(runtime, sid)
            await provider.save_messages(sid, [*loaded, AFMessage("user", [f"new {case}"])])
            assert await view_texts(runtime, sid) == [*before, f"new {case}"], case
            checked += 1
    assert checked > 200
