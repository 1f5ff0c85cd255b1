"""AgentiumSession over the history API, on Agentium's real SQLite adapters (a file per test)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from agents.memory.session_settings import SessionSettings
from sdk_sessions import ANA, BOB

from agentium_harness import (
    ArchiveCorruptError,
    CommitState,
    HarnessRuntime,
    IdentityError,
    InvalidArgumentError,
    InvalidIdError,
    InvalidPayloadError,
    Message,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SnapshotCorruptError,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_harness.testing.sqlite_rows import group_row, set_group_row, set_snapshot_row, snapshot_row
from agentium_openai_agents import (
    ITEM_FORMAT,
    AgentiumSession,
    ForeignItemError,
    HistoryChangedError,
    SessionClosedError,
)

pytestmark = pytest.mark.anyio

CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
ANSWER = {
    "type": "message",
    "role": "assistant",
    "id": "msg_1",
    "status": "completed",
    "content": [{"type": "output_text", "text": "It is sunny in Paris.", "annotations": []}],
}


def turn(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"question {n}"}, {"role": "assistant", "content": f"answer {n}"}]


class CountingArchive(SQLiteArchive):
    """The SQLite archive, counting the groups each read returns (to check that reads are bounded)."""

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.groups_read = 0

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[Any]:
        groups = await super().read_groups(key, start_seq, max_groups, ctx)
        self.groups_read += len(groups)
        return groups


def small_runtime(path: Path, archive: SQLiteArchive | None = None) -> HarnessRuntime:
    """A runtime keeping 2 groups resident, so older history is read from the archive."""
    config = SQLiteConfig(path=str(path))
    archive = archive if archive is not None else SQLiteArchive(config)
    store = SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["(not called)"]),
        archive=archive,
        session_store=store,
        owned=(archive, store),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )


async def test_items_come_back_exactly_with_readable_content_and_their_format(
    runtime: HarnessRuntime,
) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    items = [{"role": "user", "content": "Weather in Paris?"}, CALL, OUTPUT, ANSWER]
    await session.add_items(items)
    assert await session.get_items() == items

    page = await runtime.read_history(ANA, "chat-1", max_groups=10)
    (group,) = page.groups  # one add_items call is one group: the call and its output together
    assert [m.payload for m in group.messages] == items
    assert {m.payload_format for m in group.messages} == {ITEM_FORMAT}
    # A tool's output is a ``tool`` message (its call id kept), never the user's: it was ``user``
    # until run() was found sending a fetched page as the user's words (test_session_tool_output.py).
    assert [(m.role, m.content, m.tool_call_id) for m in group.messages] == [
        (Role.USER, "Weather in Paris?", None),
        (Role.ASSISTANT, '[function_call get_weather] {"city": "Paris"}', None),
        (Role.TOOL, "[function_call_output call_1] sunny", "call_1"),
        (Role.ASSISTANT, "It is sunny in Paris.", None),
    ]


async def test_each_add_items_call_is_one_group_and_limit_reads_the_newest(runtime: HarnessRuntime) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    for n in range(5):
        await session.add_items(turn(n))
    assert [g.seq for g in (await runtime.read_history(ANA, "chat-1", max_groups=10)).groups] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert [i["content"] for i in await session.get_items(3)] == ["answer 3", "question 4", "answer 4"]
    assert await session.get_items(0) == []
    assert len(await session.get_items(-1)) == 10  # negative: no limit, as the SDK's SQLiteSession
    await session.add_items([])  # nothing to add: no group
    assert (await runtime.inspect_session(ANA, "chat-1")).next_seq == 5


async def test_session_settings_limit_is_the_default_and_an_explicit_limit_wins(
    runtime: HarnessRuntime,
) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1", session_settings={"limit": 2})
    for n in range(3):
        await session.add_items(turn(n))
    assert [i["content"] for i in await session.get_items()] == ["question 2", "answer 2"]
    assert len(await session.get_items(5)) == 5


async def test_the_identity_is_bound_at_construction_never_taken_from_the_session_id(
    runtime: HarnessRuntime,
) -> None:
    ana, bob = AgentiumSession(runtime, ANA, "chat-1"), AgentiumSession(runtime, BOB, "chat-1")
    await ana.add_items(turn(0))
    assert await bob.get_items() == []  # the same session id names Bob's own, empty session
    assert await bob.pop_item() is None
    await bob.clear_session()
    assert len(await ana.get_items()) == 2
    assert (await runtime.list_sessions(BOB, limit=10)).sessions == ()
    with pytest.raises(IdentityError):
        AgentiumSession(runtime, "acme/ana", "chat-1")  # type: ignore[arg-type]
    with pytest.raises(InvalidIdError):
        AgentiumSession(runtime, ANA, "")


async def test_a_session_id_of_a_str_subclass_is_taken_as_its_characters(runtime: HarnessRuntime) -> None:
    # The subclass reached core's id check and keys as it was: its own __len__ or __iter__ raised
    # a bare RuntimeError out of the constructor.
    for raising in ("__len__", "__iter__", "encode"):
        session_id = type("SessionId", (str,), {raising: _raise})("chat-1")
        session = AgentiumSession(runtime, ANA, session_id)
        assert type(session.session_id) is str and session.session_id == "chat-1"
        await session.add_items([{"role": "user", "content": raising}])
    assert [i["content"] for i in await AgentiumSession(runtime, ANA, "chat-1").get_items()] == [
        "__len__",
        "__iter__",
        "encode",
    ]
    with pytest.raises(InvalidIdError):
        AgentiumSession(runtime, ANA, type("SessionId", (str,), {"__len__": _raise})("bad\x01"))


async def test_pop_retracts_the_last_item_and_returns_it_nothing_is_deleted(runtime: HarnessRuntime) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    assert await session.pop_item() is None
    await session.add_items([{"role": "user", "content": "Weather?"}, CALL, OUTPUT])
    assert await session.pop_item() == OUTPUT
    assert await session.get_items() == [{"role": "user", "content": "Weather?"}, CALL]
    assert await session.pop_item() == CALL
    assert await session.pop_item() == {"role": "user", "content": "Weather?"}
    assert await session.pop_item() is None
    # Canonical history still has every item; the control groups say what was retracted.
    audit = await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)
    assert [m.payload for m in audit.groups[0].group.messages] == [
        {"role": "user", "content": "Weather?"},
        CALL,
        OUTPUT,
    ]
    assert [g.control.kind.value for g in audit.groups if g.control] == ["retract"] * 3


async def test_a_pop_past_the_span_limit_raises_the_typed_error_and_retracts_nothing(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Core's RetractionLimitError reaches the host as it is; clear_session lets pops go on."""
    from agentium_harness import RetractionLimitError
    from agentium_harness._engine import history_checks

    monkeypatch.setattr(history_checks, "MAX_RETRACTION_SPANS", 1)
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items(turn(0)[:1])
    await session.add_items(turn(0)[1:])
    assert await session.pop_item() == {"role": "assistant", "content": "answer 0"}
    await session.add_items(turn(1))  # popping its answer leaves its question between two spans
    before = await runtime.inspect_session(ANA, "chat-1")
    with pytest.raises(RetractionLimitError, match="reset_view"):
        await session.pop_item()
    after = await runtime.inspect_session(ANA, "chat-1")
    assert (after.next_seq, after.retracted) == (before.next_seq, before.retracted)
    assert [i["content"] for i in await session.get_items()] == ["question 0", "question 1", "answer 1"]
    await session.clear_session()
    await session.add_items(turn(2)[1:])
    assert await session.pop_item() == {"role": "assistant", "content": "answer 2"}


async def test_clear_resets_the_view_and_keeps_history(runtime: HarnessRuntime) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.clear_session()  # an empty view: nothing is written
    assert (await runtime.inspect_session(ANA, "chat-1")).next_seq == 0
    await session.add_items(turn(0))
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None  # a pop never reaches past the clear
    await session.add_items(turn(1))
    assert [i["content"] for i in await session.get_items()] == ["question 1", "answer 1"]
    audit = await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)
    assert [m.content for g in audit.groups for m in g.group.messages] == [
        "question 0",
        "answer 0",
        "question 1",
        "answer 1",
    ]


async def test_clear_on_a_view_that_changes_after_every_read_gives_up_with_nothing_changed(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer appends after each read: the reset (at the revision read) is never made.

    With ``busy_timeout_s=0`` the clear gives up after its 3 attempts (with time left, it
    reads again until ``busy_timeout_s`` is spent: test_session_contention.py).
    """
    session = AgentiumSession(runtime, ANA, "chat-1", busy_timeout_s=0)
    await session.add_items(turn(0))
    read = runtime.read_history
    reads = 0

    async def read_then_append(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        page = await read(*args, **kwargs)
        reads += 1
        await runtime.append(ANA, "chat-1", [Message(Role.USER, f"other {reads}")])
        return page

    monkeypatch.setattr(runtime, "read_history", read_then_append)
    with pytest.raises(HistoryChangedError, match="nothing was changed") as gave_up:
        await session.clear_session()
    assert gave_up.value.commit_state is CommitState.NOT_COMMITTED
    monkeypatch.undo()
    assert reads == 3
    audit = await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)
    assert not any(g.control for g in audit.groups)
    assert len(await session.get_items()) == 5


async def test_get_items_reads_only_the_groups_its_limit_needs(tmp_path: Path) -> None:
    archive = CountingArchive(SQLiteConfig(path=str(tmp_path / "agentium.db")))
    async with small_runtime(tmp_path / "agentium.db", archive) as runtime:
        session = AgentiumSession(runtime, ANA, "chat-1")
        for n in range(40):
            await session.add_items(turn(n))
        archive.groups_read = 0
        assert [i["content"] for i in await session.get_items(6)] == [
            "question 37",
            "answer 37",
            "question 38",
            "answer 38",
            "question 39",
            "answer 39",
        ]
        assert archive.groups_read == 1  # 3 groups: 2 resident, 1 archived
        archive.groups_read = 0
        assert len(await session.get_items()) == 80
        assert archive.groups_read == 38


async def test_items_changed_by_the_caller_never_change_what_later_reads_return(tmp_path: Path) -> None:
    """The SDK and hosts may change the items they get in place; the next read still gives the stored ones."""
    async with small_runtime(tmp_path / "agentium.db") as runtime:
        session = AgentiumSession(runtime, ANA, "chat-1")
        for n in range(4):
            await session.add_items(turn(n))
        await session.add_items([ANSWER])
        want = [*(item for n in range(4) for item in turn(n)), ANSWER]
        assert await session.get_items() == want
        for _ in range(2):  # resident and archived groups alike, read once already
            items = await session.get_items()
            assert items == want
            for item in items:
                item["content"] = "changed" if isinstance(item["content"], str) else item["content"]
                item["extra"] = True
            items[-1]["content"][0]["text"] = "changed too"
            items[-1]["content"].append({"type": "output_text", "text": "more", "annotations": []})
        assert await session.get_items() == want
        assert await session.get_items(3) == want[-3:]
        popped = await session.pop_item()
        assert popped == ANSWER
        popped["content"].clear()
        history = await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)
        assert [m.payload for g in history.groups for m in g.group.messages][:9] == [*want[:8], ANSWER]


async def test_damaged_history_fails_closed_never_skipped(tmp_path: Path) -> None:
    path = tmp_path / "agentium.db"
    async with small_runtime(path) as runtime:
        session = AgentiumSession(runtime, ANA, "chat-1")
        for n in range(4):
            await session.add_items(turn(n))
        key = SessionKey.of(ANA, "chat-1")
        _, data = group_row(path, key, 0)  # flip the archived group 0's bytes (its digest is kept)
        set_group_row(path, key, 0, data.replace(b"question 0", b"question X"))
        assert len(await session.get_items(4)) == 4  # the newest groups do not touch the damage
        with pytest.raises(ArchiveCorruptError):
            await session.get_items()
        stored = snapshot_row(path, key)
        assert stored is not None
        set_snapshot_row(path, key, stored[1].replace(b"answer 3", b"answer X"))
        for call in (session.get_items, session.pop_item, lambda: session.add_items(turn(9))):
            with pytest.raises(SnapshotCorruptError):
                await call()


async def test_a_pop_or_clear_whose_read_fails_says_nothing_was_committed(tmp_path: Path) -> None:
    """The read before the retraction (or reset) fails: the error says so (``not_committed``), as others do.

    It carried no ``commit_state`` (an append's, a retraction's and a reset's errors do).
    """
    path = tmp_path / "agentium.db"
    async with small_runtime(path) as runtime:
        session = AgentiumSession(runtime, ANA, "chat-1")
        await session.add_items(turn(0))
        key = SessionKey.of(ANA, "chat-1")
        stored = snapshot_row(path, key)
        assert stored is not None
        set_snapshot_row(path, key, stored[1].replace(b"answer 0", b"answer X"))
        for call in (session.pop_item, session.clear_session):
            with pytest.raises(SnapshotCorruptError) as caught:
                await call()
            assert caught.value.commit_state is CommitState.NOT_COMMITTED, call
        set_snapshot_row(path, key, stored[1])  # repaired: nothing was retracted or reset meanwhile
        assert [i["content"] for i in await session.get_items()] == ["question 0", "answer 0"]


async def test_another_frameworks_items_fail_closed(runtime: HarnessRuntime) -> None:
    await runtime.append(
        ANA,
        "chat-1",
        [Message(Role.USER, "hi", payload={"type": "message"}, payload_format="other.framework/v1")],
    )
    session = AgentiumSession(runtime, ANA, "chat-1")
    with pytest.raises(ForeignItemError, match=r"other\.framework/v1"):
        await session.get_items()


async def test_popping_another_frameworks_item_is_refused_and_changes_nothing(
    runtime: HarnessRuntime,
) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items(turn(0))
    await runtime.append(
        ANA,
        "chat-1",
        [Message(Role.USER, "hi", payload={"type": "message"}, payload_format="other.framework/v1")],
    )
    before = await runtime.inspect_session(ANA, "chat-1")
    with pytest.raises(ForeignItemError, match=r"other\.framework/v1") as refused:
        await session.pop_item()
    assert refused.value.commit_state is CommitState.NOT_COMMITTED
    after = await runtime.inspect_session(ANA, "chat-1")
    assert (after.next_seq, after.retracted) == (before.next_seq, before.retracted)
    page = await runtime.read_history(ANA, "chat-1", max_groups=10)
    assert [m.content for m in page.messages][-1] == "hi"


async def test_history_written_by_runs_reads_as_plain_messages(runtime: HarnessRuntime) -> None:
    await runtime.append(ANA, "chat-1", [Message(Role.USER, "hi"), Message(Role.ASSISTANT, "hello")])
    session = AgentiumSession(runtime, ANA, "chat-1")
    assert await session.get_items() == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]


async def test_bad_items_are_refused_and_nothing_is_written(runtime: HarnessRuntime) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items(turn(0))
    bad: list[list[Any]] = [
        [{"role": "user", "content": "ok"}, "not an item"],
        [{"role": "user", "content": float("nan")}],
        [{"role": "user", "content": "x", "extra": (1, 2)}],
        [{"role": "user", "content": "x", 1: "non-string key"}],
        [{"role": "user", "content": object()}],
    ]
    for items in bad:
        with pytest.raises((ForeignItemError, InvalidPayloadError)):
            await session.add_items(items)
    assert (await runtime.inspect_session(ANA, "chat-1")).next_seq == 1
    assert len(await session.get_items()) == 2


async def test_mappings_of_no_sdk_items_shape_are_refused_and_nothing_is_written(
    runtime: HarnessRuntime,
) -> None:
    # Stored as they were, each was sent to the model on every later run of the session (and
    # refused there): the session could not run again until the item was popped or cleared.
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items(turn(0))
    bad: list[dict[Any, Any]] = [
        {},
        {"content": "secret words"},
        {"role": "tool", "content": "secret words"},  # Chat Completions' role, no input item's
        {"role": None, "content": "secret words"},
        {"type": "message", "role": "User", "content": "secret words"},
        {"type": 5},
        {"type": ""},
        {"type": None, "role": 1},
    ]
    for item in bad:
        with pytest.raises(ForeignItemError, match="no SDK item has that shape") as raised:
            await session.add_items([turn(1)[0], item])
        assert "secret" not in str(raised.value)
    assert (await runtime.inspect_session(ANA, "chat-1")).next_seq == 1
    # Every shape an input item has passes, a type this SDK release does not know included.
    good: list[dict[str, Any]] = [
        {"id": "msg_1"},  # an item reference, whose type may be left out
        {"type": "item_reference", "id": "msg_1"},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
        {"role": "system", "content": "s"},
        {"type": "a_later_release_item", "data": 1},
        CALL,
        OUTPUT,
        ANSWER,
    ]
    await session.add_items(good)
    assert await session.get_items(len(good)) == good


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


class _HostileMapping(Mapping[str, Any]):
    """A mapping whose every read raises: reading it must not let a bare error escape."""

    def __getitem__(self, key: str) -> Any:
        raise TypeError("unreadable")

    def __iter__(self) -> Iterator[str]:
        return iter(["type"])

    def __len__(self) -> int:
        return 1


async def test_items_that_cannot_be_rendered_get_a_typed_error_and_nothing_is_written(
    runtime: HarnessRuntime,
) -> None:
    # The readable text of a tool output is its JSON: an output that is not plain JSON used to
    # raise json's bare ValueError/RecursionError (or whatever str() of an object raised).
    cycle: list[Any] = []
    cycle.append(cycle)
    deep: list[Any] = []
    for _ in range(5_000):
        deep = [deep]
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items(turn(0))
    for output in ({"x": float("nan")}, {"x": cycle}, {"x": deep}, {"x": _Unprintable()}):
        item = {"type": "function_call_output", "call_id": "call_1", "output": output}
        with pytest.raises(InvalidPayloadError):
            await session.add_items([item])
    with pytest.raises(ForeignItemError, match="could not be read"):
        await session.add_items([_HostileMapping()])  # type: ignore[list-item]
    assert (await runtime.inspect_session(ANA, "chat-1")).next_seq == 1
    assert len(await session.get_items()) == 2


def _raise(*args: Any) -> Any:
    raise RuntimeError("hostile")


class _HostileStr(str):
    """Text whose own methods raise: measuring or encoding it must not run them."""

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        raise RuntimeError("no bytes")

    def __len__(self) -> int:
        raise RuntimeError("no length")


async def test_item_text_of_a_str_subclass_is_taken_as_its_characters(runtime: HarnessRuntime) -> None:
    # A message item's content was handed to Agentium as the subclass: its encode() or __len__
    # ran inside append (the eviction plan measuring the group) and a bare RuntimeError escaped.
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items([{"role": "user", "content": _HostileStr("hi")}])
    assert await session.get_items() == [{"role": "user", "content": "hi"}]
    (message,) = (await runtime.read_history(ANA, "chat-1", max_groups=1)).messages
    assert type(message.content) is str and message.content == "hi"


async def test_arguments_of_the_wrong_type_get_a_typed_error_and_change_nothing(
    runtime: HarnessRuntime,
) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    await session.add_items(turn(0))
    # A str limit raised a bare TypeError, a float one read_history's max_groups error, True read 1 item.
    for limit in (True, False, 2.0, float("nan"), "3"):
        with pytest.raises(InvalidArgumentError, match="limit must be an int or None"):
            await session.get_items(limit)  # type: ignore[arg-type]
    session.session_settings = SessionSettings(limit=2)
    object.__setattr__(session.session_settings, "limit", 1.0)  # a setting that bypassed validation
    with pytest.raises(InvalidArgumentError, match=r"session_settings\.limit must be an int"):
        await session.get_items()
    session.session_settings = SessionSettings()
    # None was taken as "nothing to add", a dict was iterated as its keys (a str each).
    for items in (None, {"role": "user", "content": "x"}, "x", iter(turn(1))):
        with pytest.raises(InvalidArgumentError, match="add_items takes a list of items"):
            await session.add_items(items)  # type: ignore[arg-type]
    # A sequence whose own iteration (or __len__, which is not needed) raises let that error escape.
    with pytest.raises(InvalidArgumentError, match="could not iterate its items"):
        await session.add_items(type("Hostile", (list,), {"__iter__": _raise})(turn(1)))
    endless = type("Endless", (list,), {"__iter__": lambda self: iter(lambda: turn(1)[0], None)})()
    with pytest.raises(InvalidArgumentError, match="at most 10000 items"):
        await session.add_items(endless)
    await session.add_items((turn(1)[0],))  # a tuple of items is a sequence: fine
    assert len(await session.get_items()) == 3
    assert (await runtime.inspect_session(ANA, "chat-1")).next_seq == 2
    await session.add_items(type("NoLength", (list,), {"__len__": _raise})(turn(2)))
    assert len(await session.get_items()) == 5


async def test_bad_constructor_arguments_raise_the_typed_error(runtime: HarnessRuntime) -> None:
    # Each raised a bare TypeError or ValueError, or pydantic's ValidationError.
    bad: list[dict[str, Any]] = [
        {"busy_timeout_s": -1},
        {"busy_timeout_s": True},
        {"busy_timeout_s": "30"},
        {"session_settings": 5},
        {"session_settings": {"bogus": 1}},
        {"session_settings": {"limit": "x\ud800"}},
        {"session_settings": {"limit": 2.5}},
    ]
    for kwargs in bad:
        with pytest.raises(InvalidArgumentError) as raised:
            AgentiumSession(runtime, ANA, "chat-1", **kwargs)
        str(raised.value).encode("utf-8")  # loggable: no lone surrogate quoted
    with pytest.raises(InvalidArgumentError, match="runtime must be a HarnessRuntime"):
        AgentiumSession(object(), ANA, "chat-1")  # type: ignore[arg-type]
    assert AgentiumSession(runtime, ANA, "chat-1", session_settings={"limit": 3}).session_settings.limit == 3


async def test_a_settings_limit_or_recall_scope_of_the_wrong_type_is_refused_at_construction(
    runtime: HarnessRuntime,
) -> None:
    # The SDK's coercion made True a limit of 1 and "3" or 2.0 a limit of 3 or 2, which
    # get_items(limit) refuses; a recall_scope of the wrong type failed only at the first add_items.
    for limit in (True, False, "3", 2.0):
        with pytest.raises(InvalidArgumentError, match=r"session_settings\.limit must be an int"):
            AgentiumSession(runtime, ANA, "chat-1", session_settings={"limit": limit})
    with pytest.raises(IdentityError, match="recall_scope must be a RecallScope or None"):
        AgentiumSession(runtime, ANA, "chat-1", recall_scope="project-x")  # type: ignore[arg-type]
    # A limit of an int subclass is taken as its value: its own comparisons never run.
    hostile = type("Hostile", (int,), {"__lt__": _raise, "__le__": _raise, "__eq__": _raise})
    session = AgentiumSession(runtime, ANA, "chat-1", session_settings={"limit": -1})
    await session.add_items(turn(0))
    assert len(await session.get_items(hostile(1))) == 1
    assert len(await session.get_items()) == 2
    assert (await runtime.inspect_session(ANA, "chat-1")).next_seq == 1


async def test_a_closed_session_refuses_every_call(runtime: HarnessRuntime) -> None:
    session = AgentiumSession(runtime, ANA, "chat-1")
    session.close()
    for call in (session.get_items, session.pop_item, session.clear_session, lambda: session.add_items([])):
        with pytest.raises(SessionClosedError, match="AgentiumSession is closed"):
            await call()
    assert session.closed and (await runtime.inspect_session(ANA, "chat-1")).next_seq == 0


async def test_a_stored_item_of_no_sdk_items_shape_fails_the_read_closed(runtime: HarnessRuntime) -> None:
    # add_items refuses an item of no input item's shape (sent to the model on every later run,
    # the API refuses it), but one in stored history under this SDK's format (written by another
    # writer of the session, or damaged) was handed to the SDK as an item by get_items and pop_item.
    for n, bad in enumerate(
        [{}, {"role": "tool", "content": "secret words"}, {"type": 5}, {"type": "message", "role": ["x"]}]
    ):
        sid = f"chat-{n}"
        session = AgentiumSession(runtime, ANA, sid)
        await session.add_items(turn(0))
        await runtime.append(ANA, sid, [Message(Role.USER, "x", payload=bad, payload_format=ITEM_FORMAT)])
        await session.add_items([turn(1)[0]])
        for read in (session.get_items, lambda s=session: s.get_items(2)):
            with pytest.raises(ForeignItemError, match="no SDK item has that shape") as raised:
                await read()
            assert "secret" not in str(raised.value)
        # The items after it are still read (a limited read makes only the items it returns).
        assert await session.get_items(1) == [turn(1)[0]]
        await session.pop_item()
        before = await runtime.inspect_session(ANA, sid)
        with pytest.raises(ForeignItemError, match="no SDK item has that shape"):
            await session.pop_item()
        after = await runtime.inspect_session(ANA, sid)
        assert (after.revision, after.retracted) == (before.revision, before.retracted)
