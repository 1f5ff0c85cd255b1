"""AgentiumHistoryProvider against the HistoryProvider contract as Agent Framework's source defines it.

The package ships no tests; its ``HistoryProvider`` docstrings define the
contract: ``get_messages(session_id)`` returns the session's stored
messages, ``save_messages(session_id, messages)`` persists them; the default
``before_run`` loads history into the run's context (skipped when
``load_messages`` is false) and ``after_run`` stores the run's input and
response messages per ``store_inputs`` and ``store_outputs``. Agents run
here with a chat client of the test's own (``BaseChatClient`` subclass, no
network) that records what it was sent. Storage is Agentium's real SQLite
archive and session store in a file per test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from af_runtimes import build_runtime
from agent_framework import Agent, BaseChatClient, ChatResponse, Content
from agent_framework import Message as AFMessage

from agentium_agent_framework import (
    MESSAGE_FORMAT,
    AgentiumHistoryProvider,
    ForeignMessageError,
    MissingSessionIdError,
)
from agentium_harness import (
    MAX_PAGE_BYTES,
    ArchiveCorruptError,
    CommitState,
    HarnessRuntime,
    IdentityError,
    InvalidArgumentError,
    Message,
    ResidentLimits,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
)
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig
from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_harness.testing.sqlite_rows import group_row, set_group_row

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
BOB = VerifiedIdentity("acme", "bob", "sso")


class ScriptedChatClient(BaseChatClient):  # type: ignore[type-arg]
    """Answers with queued texts and records the messages of every request."""

    def __init__(self, *replies: str) -> None:
        super().__init__()
        self.replies = list(replies)
        self.requests: list[list[AFMessage]] = []

    async def _inner_get_response(  # type: ignore[override]
        self, *, messages: Sequence[AFMessage], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> ChatResponse:
        self.requests.append(list(messages))
        return ChatResponse(messages=[AFMessage("assistant", [self.replies.pop(0)])], response_id="r")


class CountingArchive(SQLiteArchive):
    """The SQLite archive, counting the groups its reads return."""

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.groups_read = 0

    async def read_groups(self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        groups = await super().read_groups(key, start_seq, max_groups, ctx)
        self.groups_read += len(groups)
        return groups


def build(path: Path, archive: SQLiteArchive | None = None, resident: int = 8) -> HarnessRuntime:
    """The shared runtime, holding at most ``resident`` groups of a session in memory."""
    return build_runtime(
        path, archive=archive, limits=RuntimeLimits(resident=ResidentLimits(max_groups=resident))
    )


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[HarnessRuntime]:
    built = build(tmp_path / "agentium.db")
    try:
        yield built
    finally:
        await built.aclose()


def texts(messages: Sequence[AFMessage]) -> list[tuple[str, str]]:
    return [(str(m.role), m.text) for m in messages]


async def test_saved_messages_come_back_exactly_in_order(runtime: HarnessRuntime) -> None:
    provider = AgentiumHistoryProvider(runtime, ANA)
    call = AFMessage(
        "assistant", [Content.from_function_call(call_id="c1", name="weather", arguments={"city": "Paris"})]
    )
    result = AFMessage("tool", [Content.from_function_result(call_id="c1", result="sunny")])
    saved = [AFMessage("user", ["Weather in Paris?"]), call, result, AFMessage("assistant", ["Sunny."])]
    await provider.save_messages("chat-1", saved)
    loaded = await provider.get_messages("chat-1")
    assert [m.to_dict() for m in loaded] == [m.to_dict() for m in saved]
    (group,) = (await runtime.read_history(ANA, "chat-1", max_groups=10)).groups  # one save, one group
    assert {m.payload_format for m in group.messages} == {MESSAGE_FORMAT}
    # A tool's result is a ``tool`` message (its call id kept), never the user's: it was ``user``
    # until run() was found sending a fetched page as the user's words (test_provider_tool_output.py).
    assert [(m.role, m.content, m.tool_call_id) for m in group.messages] == [
        (Role.USER, "Weather in Paris?", None),
        (Role.ASSISTANT, "[function_call weather] {'city': 'Paris'}", None),
        (Role.TOOL, "[function_result c1] sunny", "c1"),
        (Role.ASSISTANT, "Sunny.", None),
    ]


async def test_an_agent_loads_history_before_a_run_and_stores_input_and_response_after(
    runtime: HarnessRuntime,
) -> None:
    client = ScriptedChatClient("Paris.", "You asked about France.")
    agent = Agent(client, "Be brief.", context_providers=[AgentiumHistoryProvider(runtime, ANA)])
    session = agent.create_session()
    await agent.run("What is the capital of France?", session=session)
    await agent.run("What did I ask?", session=session)
    sent = [(r, t) for r, t in texts(client.requests[-1]) if r != "system"]
    assert sent == [
        ("user", "What is the capital of France?"),
        ("assistant", "Paris."),
        ("user", "What did I ask?"),
    ]
    page = await runtime.read_history(ANA, session.session_id, max_groups=10)
    assert [[m.content for m in g.messages] for g in page.groups] == [
        ["What is the capital of France?", "Paris."],
        ["What did I ask?", "You asked about France."],
    ]


@pytest.mark.parametrize(
    ("flags", "stored"),
    [
        ({"store_inputs": False}, ["Paris."]),
        ({"store_outputs": False}, ["Capital of France?"]),
    ],
)
async def test_store_flags_choose_what_after_run_stores(
    runtime: HarnessRuntime, flags: dict[str, bool], stored: list[str]
) -> None:
    agent = Agent(
        ScriptedChatClient("Paris."), context_providers=[AgentiumHistoryProvider(runtime, ANA, **flags)]
    )
    session = agent.create_session()
    await agent.run("Capital of France?", session=session)
    page = await runtime.read_history(ANA, session.session_id, max_groups=10)
    assert [m.content for m in page.messages] == stored


async def test_load_messages_false_skips_loading_and_still_stores(runtime: HarnessRuntime) -> None:
    loads: list[str | None] = []

    class Recording(AgentiumHistoryProvider):
        async def get_messages(self, session_id: str | None, **kwargs: Any) -> list[AFMessage]:
            loads.append(session_id)
            return await super().get_messages(session_id, **kwargs)

    client = ScriptedChatClient("one", "two")
    agent = Agent(client, context_providers=[Recording(runtime, ANA, load_messages=False)])
    session = agent.create_session()
    await agent.run("first", session=session)
    await agent.run("second", session=session)
    assert loads == []  # the agent never asked this provider for history
    page = await runtime.read_history(ANA, session.session_id, max_groups=10)
    assert [m.content for m in page.messages] == ["first", "one", "second", "two"]


async def test_get_messages_returns_at_most_max_messages_in_whole_groups_and_reads_no_more(
    tmp_path: Path,
) -> None:
    archive = CountingArchive(SQLiteConfig(path=str(tmp_path / "agentium.db")))
    async with build(tmp_path / "agentium.db", archive, resident=2) as runtime:
        provider = AgentiumHistoryProvider(runtime, ANA, max_messages=5)
        for n in range(30):
            await provider.save_messages(
                "chat-1", [AFMessage("user", [f"q{n}"]), AFMessage("assistant", [f"a{n}"])]
            )
        archive.groups_read = 0
        loaded = await provider.get_messages("chat-1")
        # Whole groups only: 2 groups (4 messages) fit under 5; a third would not.
        assert [m.text for m in loaded] == ["q28", "a28", "q29", "a29"]
        assert archive.groups_read <= 3  # at most max_messages groups, 2 of them resident
        big = [AFMessage("user", [f"part {i}"]) for i in range(8)]
        await provider.save_messages("chat-1", big)
        assert [m.text for m in await provider.get_messages("chat-1")] == [f"part {i}" for i in range(3, 8)]
    with pytest.raises(ValueError, match="max_messages"):
        AgentiumHistoryProvider(runtime, ANA, max_messages=0)


async def test_get_messages_returns_at_most_max_bytes_newest_first_and_reads_no_more(tmp_path: Path) -> None:
    # get_messages bounded the count only: max_messages messages of up to 8 MiB each were returned.
    mib = 1024 * 1024
    archive = CountingArchive(SQLiteConfig(path=str(tmp_path / "agentium.db")))
    async with build(tmp_path / "agentium.db", archive, resident=2) as runtime:
        provider = AgentiumHistoryProvider(runtime, ANA, max_bytes=4 * mib)
        for n in range(24):
            await provider.save_messages("chat-1", [AFMessage("user", [f"{n:02d}" + "x" * mib])])
        archive.groups_read = 0
        loaded = await provider.get_messages("chat-1")
        # Each group is a little over 1 MiB: the newest three fit in 4 MiB, whole and in order.
        assert [m.text[:2] for m in loaded] == ["21", "22", "23"]
        # Groups of a MiB are archived at once (over the resident bytes): the three that fit and
        # the one that did not are read, not max_messages (200) of them.
        assert archive.groups_read <= 4
        page = await runtime.read_history(ANA, "chat-1", max_groups=3)
        assert sum(g.size_bytes for g in page.groups) <= 4 * mib
        # Both bounds hold at once: the tighter one decides.
        fewer = AgentiumHistoryProvider(runtime, ANA, max_bytes=4 * mib, max_messages=2)
        assert [m.text[:2] for m in await fewer.get_messages("chat-1")] == ["22", "23"]
        # A group over the bound alone: its newest messages that fit, oldest first.
        await provider.save_messages(
            "chat-1", [AFMessage("user", ["y" * 5 * mib]), AFMessage("user", ["a"]), AFMessage("user", ["b"])]
        )
        assert [m.text for m in await provider.get_messages("chat-1")] == ["a", "b"]
    for bad in (0, True, 2.0, MAX_PAGE_BYTES + 1):
        with pytest.raises(InvalidArgumentError, match="max_bytes"):
            AgentiumHistoryProvider(runtime, ANA, max_bytes=bad)  # type: ignore[arg-type]


class _ResetBetweenPages:
    """The runtime, with a reset_view landing right after the first page a read gets (once)."""

    def __init__(self, runtime: HarnessRuntime) -> None:
        self.runtime, self.pages = runtime, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runtime, name)

    async def read_history(self, *args: Any, **kwargs: Any) -> Any:
        page = await self.runtime.read_history(*args, **kwargs)
        self.pages += 1
        if self.pages == 1:
            await self.runtime.reset_view(ANA, "chat-1", reason="cleared by another writer")
        return page


async def test_a_load_over_several_pages_never_mixes_views(runtime: HarnessRuntime) -> None:
    # 1,100 one-message groups: a load of up to 1,500 reads two pages (1,000 groups at most each).
    for n in range(1_100):
        await runtime.append(ANA, "chat-1", [Message(Role.USER, f"m{n}")])
    provider = AgentiumHistoryProvider(runtime, ANA, max_messages=1_500)
    assert len(await provider.get_messages("chat-1")) == 1_100
    provider.runtime = _ResetBetweenPages(runtime)  # type: ignore[assignment]
    # The second page was read after the reset: the load returned the first page's 1,000 messages,
    # neither the view before the reset (1,100) nor after it (none). Now it reads again.
    assert await provider.get_messages("chat-1") == []


async def test_the_identity_is_bound_at_construction(runtime: HarnessRuntime) -> None:
    await AgentiumHistoryProvider(runtime, ANA).save_messages("chat-1", [AFMessage("user", ["mine"])])
    assert await AgentiumHistoryProvider(runtime, BOB).get_messages("chat-1") == []
    with pytest.raises(TypeError):
        AgentiumHistoryProvider(runtime, "acme/ana")  # type: ignore[arg-type]


async def test_a_session_id_of_a_str_subclass_is_taken_as_its_characters(runtime: HarnessRuntime) -> None:
    # The subclass reached core's id check and keys as it was: its own __len__ or __iter__ raised
    # a bare RuntimeError out of get_messages and save_messages.
    def hostile(*args: Any) -> Any:
        raise RuntimeError("hostile")

    provider = AgentiumHistoryProvider(runtime, ANA)
    for raising in ("__len__", "__iter__", "encode"):
        session_id = type("SessionId", (str,), {raising: hostile})("chat-1")
        await provider.save_messages(session_id, [AFMessage("user", [raising])])
        assert texts(await provider.get_messages(session_id))[-1] == ("user", raising)
    assert len(await provider.get_messages("chat-1")) == 3


async def test_bad_input_is_refused_and_nothing_is_written(runtime: HarnessRuntime) -> None:
    provider = AgentiumHistoryProvider(runtime, ANA)
    with pytest.raises(MissingSessionIdError):
        await provider.save_messages(None, [AFMessage("user", ["x"])])
    with pytest.raises(MissingSessionIdError):
        await provider.get_messages(None)
    with pytest.raises(ForeignMessageError):
        await provider.save_messages("chat-1", [AFMessage("user", ["ok"]), {"role": "user"}])  # type: ignore[list-item]
    assert (await runtime.inspect_session(ANA, "chat-1")).next_seq == 0


async def test_bad_arguments_and_unreadable_messages_get_typed_errors(runtime: HarnessRuntime) -> None:
    # The constructor raised bare TypeError/ValueError; a message whose to_dict() raised leaked its
    # error; save_messages(None) was taken as nothing to save and a str was iterated as characters.
    bad: list[dict[str, Any]] = [
        {"max_messages": 0},
        {"max_messages": 2.0},
        {"busy_timeout_s": -1},
        {"busy_timeout_s": True},
    ]
    for kwargs in bad:
        with pytest.raises(InvalidArgumentError):
            AgentiumHistoryProvider(runtime, ANA, **kwargs)
    with pytest.raises(InvalidArgumentError, match="runtime must be a HarnessRuntime"):
        AgentiumHistoryProvider(object(), ANA)  # type: ignore[arg-type]
    provider = AgentiumHistoryProvider(runtime, ANA)

    class Unserializable(AFMessage):
        def to_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            raise RuntimeError("cannot serialize")

    with pytest.raises(ForeignMessageError, match="could not be read or serialized"):
        await provider.save_messages("chat-1", [AFMessage("user", ["ok"]), Unserializable("user", ["x"])])

    # A to_dict() that Message.from_dict cannot decode was stored, and every later load of the
    # session failed with ForeignMessageError (a load never skips a message).
    class Undecodable(AFMessage):
        def __init__(self, payload: Any) -> None:
            super().__init__("user", ["x"])
            self.payload = payload

        def to_dict(self, *args: Any, **kwargs: Any) -> Any:
            return self.payload

    for payload in (
        {"type": "message", "role": "user", "contents": [{"type": "no_such_kind", "x": 1}]},
        {"bogus": 1},
        [],
    ):
        with pytest.raises(ForeignMessageError, match="does not decode"):
            await provider.save_messages("chat-1", [AFMessage("user", ["ok"]), Undecodable(payload)])
    for messages in (None, "hello", {"role": "user"}):
        with pytest.raises(ForeignMessageError, match="takes a list"):
            await provider.save_messages("chat-1", messages)  # type: ignore[arg-type]

    # A sequence whose own iteration raises let that error escape, and so did one whose __len__
    # raises (which is not needed); one that never ends never returned.
    def hostile(*args: Any) -> Any:
        raise RuntimeError("hostile")

    with pytest.raises(ForeignMessageError, match="could not iterate its messages"):
        await provider.save_messages(
            "chat-1", type("H", (list,), {"__iter__": hostile})([AFMessage("user", ["x"])])
        )
    endless = type(
        "Endless", (list,), {"__iter__": lambda self: iter(lambda: AFMessage("user", ["x"]), None)}
    )()
    with pytest.raises(ForeignMessageError, match="at most 10000 messages"):
        await provider.save_messages("chat-1", endless)
    assert (await runtime.inspect_session(ANA, "chat-1")).next_seq == 0
    await provider.save_messages(
        "chat-1", type("L", (list,), {"__len__": hostile})([AFMessage("user", ["x"])])
    )
    assert [m.text for m in await provider.get_messages("chat-1")] == ["x"]

    # A message id whose str() raises escaped from the replay check (only with a non-empty view).
    class NoText(str):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    with pytest.raises(ForeignMessageError, match="id or contents could not be read"):
        await provider.save_messages("chat-1", [AFMessage("user", ["y"], message_id=NoText("m-1"))])
    assert [m.text for m in await provider.get_messages("chat-1")] == ["x"]


async def test_bad_flags_source_id_and_recall_scope_are_refused_as_the_provider_is_built(
    runtime: HarnessRuntime,
) -> None:
    # The flags were taken for their truth (store_inputs="no" stored the inputs, load_messages=""
    # skipped loading), a store_context_from str matched its substrings as source ids, and a
    # source_id or recall_scope of the wrong type was taken and failed (or not) later.
    bad: list[dict[str, Any]] = [
        {"load_messages": "no"},
        {"load_messages": ""},
        {"store_inputs": "false"},
        {"store_outputs": 0},
        {"store_context_messages": 1},
        {"store_context_messages": None},
        {"store_context_from": "rag"},
        {"store_context_from": ["rag"]},
        {"store_context_from": {"rag", 5}},
        {"source_id": ""},
        {"source_id": None},
        {"source_id": 5},
    ]
    for kwargs in bad:
        with pytest.raises(InvalidArgumentError):
            AgentiumHistoryProvider(runtime, ANA, **kwargs)
    # The error HarnessRuntime.append raises for it, now at once, not at the first save.
    with pytest.raises(IdentityError, match="recall_scope must be a RecallScope or None"):
        AgentiumHistoryProvider(runtime, ANA, recall_scope="project-x")  # type: ignore[arg-type]
    provider = AgentiumHistoryProvider(
        runtime,
        ANA,
        source_id="history",
        load_messages=False,
        store_inputs=False,
        store_context_messages=True,
        store_context_from=frozenset({"rag"}),
        store_outputs=False,
    )
    assert (provider.source_id, provider.load_messages, provider.store_inputs) == ("history", False, False)
    assert provider.store_context_from == {"rag"} and provider.store_outputs is False
    assert (await runtime.inspect_session(ANA, "chat-1")).next_seq == 0


async def test_foreign_or_damaged_history_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "agentium.db"
    async with build(path, resident=1) as runtime:
        await runtime.append(
            ANA, "other", [Message(Role.USER, "hi", payload={"x": 1}, payload_format="openai.x/v1")]
        )
        provider = AgentiumHistoryProvider(runtime, ANA)
        with pytest.raises(ForeignMessageError, match=r"openai\.x/v1"):
            await provider.get_messages("other")
        for n in range(3):
            await provider.save_messages("chat-1", [AFMessage("user", [f"q{n}"])])
        key = SessionKey.of(ANA, "chat-1")
        _, data = group_row(path, key, 0)
        set_group_row(path, key, 0, data.replace(b"q0", b"qX"))
        with pytest.raises(ArchiveCorruptError):
            await provider.get_messages("chat-1")


async def test_a_replayed_transcript_is_not_stored_again(runtime: HarnessRuntime) -> None:
    # Chat UIs and AG-UI send the whole conversation as each run's input; the framework's own
    # providers store only what follows the overlap with what they hold, and so does this one.
    provider = AgentiumHistoryProvider(runtime, ANA)
    agent = Agent(client=ScriptedChatClient("a1", "a2"), context_providers=[provider])
    session = agent.create_session()
    await agent.run(AFMessage("user", ["u1"]), session=session)
    transcript = await provider.get_messages(session.session_id)
    await agent.run([*transcript, AFMessage("user", ["u2"])], session=session)
    stored = await provider.get_messages(session.session_id)
    assert texts(stored) == [("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2")]
    # A lone repeated user message without an id is the user saying it again: kept.
    await provider.save_messages("chat-2", [AFMessage("user", ["again"])])
    await provider.save_messages("chat-2", [AFMessage("user", ["again"])])
    assert texts(await provider.get_messages("chat-2")) == [("user", "again"), ("user", "again")]
    # Only the tail is compared: a message of another framework matches nothing.
    await runtime.append(ANA, "chat-3", [Message(Role.USER, "x", payload={}, payload_format="other/v1")])
    await provider.save_messages("chat-3", [AFMessage("user", ["x"])])
    page = await runtime.read_history(ANA, "chat-3", max_groups=10)
    assert [m.payload_format for m in page.messages] == ["other/v1", MESSAGE_FORMAT]


def test_new_messages_decides_from_the_tail_as_the_framework_does_from_all_of_history() -> None:
    # The framework's own rule (its providers' filter_new_messages, pinned version) on the whole
    # history against this provider's on the view's last len(incoming) messages.
    import random

    from agent_framework._sessions import filter_new_messages

    from agentium_agent_framework._replay import message_identity, new_messages

    rng = random.Random(7)
    pool = [AFMessage(role, [text]) for role in ("user", "assistant") for text in ("a", "b")]
    pool += [AFMessage("user", ["a"], message_id="m1"), AFMessage("assistant", ["b"], message_id="m2")]
    for _ in range(3000):
        history = [rng.choice(pool) for _ in range(rng.randint(0, 6))]
        incoming = [rng.choice(pool) for _ in range(rng.randint(1, 5))]
        if rng.random() < 0.4:  # a replay of the last part of history, then something new
            incoming = history[rng.randint(0, len(history)) :] + incoming
        tail = history[-len(incoming) :]
        ours = new_messages(
            [message_identity(m) for m in tail],
            [str(m.role) for m in tail],
            [message_identity(m) for m in incoming],
        )
        theirs = len(incoming) - len(filter_new_messages(history, incoming))
        assert ours == theirs, (texts(history), texts(incoming))


async def test_a_save_over_damaged_history_fails_closed_as_a_load_does(runtime: HarnessRuntime) -> None:
    # A framework message that no longer decodes (a payload Message.from_dict refuses: damage, or
    # a framework release that cannot read what another wrote) failed every load with
    # ForeignMessageError, but the save's replay check read it as another framework's message
    # (matching nothing) and appended over it: a replayed transcript was stored again whole.
    provider = AgentiumHistoryProvider(runtime, ANA)
    await provider.save_messages("chat-1", [AFMessage("user", ["u1"], message_id="m1")])
    await runtime.append(
        ANA, "chat-1", [Message(Role.ASSISTANT, "a1", payload={"bogus": 1}, payload_format=MESSAGE_FORMAT)]
    )
    with pytest.raises(ForeignMessageError, match="does not decode"):
        await provider.get_messages("chat-1")
    before = await runtime.inspect_session(ANA, "chat-1")
    replay = [AFMessage("user", ["u1"], message_id="m1"), AFMessage("assistant", ["a1"], message_id="m2")]
    with pytest.raises(ForeignMessageError, match="does not decode") as refused:
        await provider.save_messages("chat-1", [*replay, AFMessage("user", ["u2"])])
    assert refused.value.commit_state is CommitState.NOT_COMMITTED
    after = await runtime.inspect_session(ANA, "chat-1")
    assert (after.next_seq, after.revision) == (before.next_seq, before.revision)
    # A message of another framework is no damage: it matches nothing, and the save goes on.
    await runtime.append(ANA, "chat-2", [Message(Role.USER, "x", payload={}, payload_format="other/v1")])
    await provider.save_messages("chat-2", [AFMessage("user", ["x"])])
    assert (await runtime.inspect_session(ANA, "chat-2")).next_seq == 2


async def test_a_save_whose_replay_check_meets_damage_says_it_committed_nothing(tmp_path: Path) -> None:
    """The save's own read of the tail fails closed; the error says ``not_committed``, as its other refusals.

    Core's read errors carry no ``commit_state`` (a read commits nothing); ``save_messages``
    writes, so a host branching on ``commit_state`` must find what it committed: nothing.
    """
    path = tmp_path / "agentium.db"
    async with build(path, resident=1) as runtime:
        provider = AgentiumHistoryProvider(runtime, ANA)
        for n in range(3):
            await provider.save_messages("chat-1", [AFMessage("user", [f"q{n}"])])
        key = SessionKey.of(ANA, "chat-1")
        _, data = group_row(path, key, 1)
        set_group_row(path, key, 1, data.replace(b"q1", b"qX"))
        # A replay of q1, q2: the check reads back past the newest group, into the damaged one.
        replay = [AFMessage("user", ["q1"]), AFMessage("user", ["q2"]), AFMessage("user", ["q3"])]
        with pytest.raises(ArchiveCorruptError) as caught:
            await provider.save_messages("chat-1", replay)
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert (await runtime.inspect_session(ANA, "chat-1")).next_seq == 3  # nothing written
