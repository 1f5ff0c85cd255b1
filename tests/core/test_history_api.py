"""The history API: append, read_history, list_sessions, retract and reset_view (issue 22, item 1).

Each test drives the public runtime over the real in-memory (or SQLite)
adapters, as a host running its own agent loop would: it appends groups
without a model, reads them back in pages, retracts and resets the view,
and checks what ``run()`` then sends the model. Every refused input is
checked to change nothing (revision, stored bytes and archive unchanged).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import anyio
import pytest
from _archive_support import GatedReads
from _session_store_support import RevisionsRestartStore

from agentium_harness import (
    MAX_APPEND_BYTES,
    MAX_PAGE_GROUPS,
    MAX_PAYLOAD_BYTES,
    AppendResult,
    ArchiveCorruptError,
    CapabilityError,
    CommitState,
    ContractViolationError,
    ControlKind,
    EraseTarget,
    EvictionStatus,
    HarnessRuntime,
    HistoryPage,
    IncompleteGroupError,
    InvalidArgumentError,
    InvalidPayloadError,
    Message,
    MessageGroup,
    MessageRef,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    RetractionRefusedError,
    Role,
    RuntimeClosedError,
    RuntimeLimits,
    SessionBusyError,
    SessionConflictError,
    SessionDivergedError,
    SessionKey,
    SummaryLimits,
    ToolCall,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OpContext,
    ProviderCapabilities,
    SessionStoreCapabilities,
)
from agentium_harness.testing import record_requests

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
BOB = VerifiedIdentity("acme", "bob", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
FORMAT = "openai.responses.input_item/v1"


class Echoing(ModelProvider):
    """Answers ``echo <latest user text>``; optionally waits at a gate."""

    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(tool_calls=False, deterministic=True)

    def __init__(self) -> None:
        self.gate: anyio.Event | None = None
        self.entered = anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        latest = next(m.content for m in reversed(request.turn) if m.role is Role.USER)
        return ModelResponse(message=Message(Role.ASSISTANT, f"echo {latest}"))


def runtime(
    *,
    max_groups: int = 8,
    provider: Echoing | None = None,
    archive: InMemoryArchive | None = None,
    store: Any = None,
) -> tuple[HarnessRuntime, Echoing, InMemoryArchive, Any]:
    provider = provider or Echoing()
    archive = archive or InMemoryArchive()
    store = store or InMemorySessionStore()
    rt = create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=max_groups)),
    )
    return rt, provider, archive, store


def pair(n: int) -> list[Message]:
    return [Message(Role.USER, f"u{n}"), Message(Role.ASSISTANT, f"a{n}")]


def texts(messages: Any) -> list[str]:
    return [m.content for m in messages]


def stored_state(store: InMemorySessionStore, archive: InMemoryArchive, key: SessionKey = KEY) -> Any:
    """Everything stored for ``key``: the snapshot row and every archived row (compared before/after)."""
    rows = {seq: archive.raw(key, seq) for seq in range(64)}
    return store.raw(key), {s: r for s, r in rows.items() if r is not None}


# -- append -----------------------------------------------------------------------------------------


async def test_append_commits_one_group_without_a_model_call() -> None:
    rt, provider, _, _ = runtime()
    requests = record_requests(provider)
    first = await rt.append(ANA, "s1", pair(0))
    assert isinstance(first, AppendResult)
    assert (first.seq, first.snapshot_revision, first.commit_state) == (0, 1, CommitState.COMMITTED)
    assert first.eviction is EvictionStatus.NOT_NEEDED
    second = await rt.append(ANA, "s1", pair(1), expected_revision=1)
    assert (second.seq, second.snapshot_revision) == (1, 2)
    page = await rt.read_history(ANA, "s1", max_groups=10)
    assert texts(page.messages) == ["u0", "a0", "u1", "a1"]
    assert [g.seq for g in page.groups] == [0, 1] and page.next_before_seq is None
    assert requests == []


async def test_a_tool_call_with_its_result_is_one_complete_group() -> None:
    rt, _, _, _ = runtime()
    call = ToolCall("c1", "lookup", {"q": "x"})
    done = await rt.append(
        ANA,
        "s1",
        [
            Message(Role.USER, "find x"),
            Message(Role.ASSISTANT, "", tool_calls=(call,)),
            Message(Role.TOOL, "found", tool_call_id="c1"),
            Message(Role.ASSISTANT, "x is found"),
        ],
    )
    page = await rt.read_history(ANA, "s1", max_groups=1)
    assert page.groups[0].group.is_complete and done.seq == 0
    assert page.groups[0].messages[1].tool_calls == (call,)


async def test_payload_round_trips_exactly_and_is_never_sent_to_the_model() -> None:
    rt, provider, _, _ = runtime()
    requests = record_requests(provider)
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "héllo \u2603"}],
        "n": [1, -0.5, 1e300, 0, True, None],
        "nested": {"a": {"b": []}},
    }
    await rt.append(ANA, "s1", [Message(Role.USER, "héllo", payload=item, payload_format=FORMAT)])
    item["n"].append("mutated after the call")  # the committed copy is private
    page = await rt.read_history(ANA, "s1", max_groups=1)
    (message,) = page.messages
    assert message.payload_format == FORMAT
    assert message.payload["n"] == [1, -0.5, 1e300, 0, True, None]
    assert type(message.payload["n"][0]) is int and type(message.payload["n"][1]) is float
    assert message.content == "héllo"
    result = await rt.run(ANA, "s1", "next")
    (history,) = requests[0].history
    assert history.content == "héllo" and history.payload is None and history.payload_format is None
    assert result.output == "echo next"


async def test_payload_values_come_back_exactly_and_keys_in_code_point_order() -> None:
    # What docs/history-api.md promises, resident and archived alike: equal value for value (the
    # sign of zero, the smallest subnormal, big integers), keys in canonical JSON's order.
    rt, _, _, _ = runtime(max_groups=1)
    item = {"b": -0.0, "a": 5e-324, "é": 2**80, "B": [1e308, -1.5e-7], "": {"z": 1, "y": 2}}
    await rt.append(ANA, "s1", [Message(Role.USER, "x", payload=item, payload_format=FORMAT)])
    for n in range(2):
        (message,) = (await rt.read_history(ANA, "s1", before_seq=1, max_groups=1)).messages
        assert message.payload == item and list(message.payload) == ["", "B", "a", "b", "é"]
        assert list(message.payload[""]) == ["y", "z"]
        assert math.copysign(1.0, message.payload["b"]) == -1.0 and message.payload["a"] == 5e-324
        assert type(message.payload["é"]) is int
        await rt.append(ANA, "s1", pair(n))  # the next read finds the group archived


async def test_messages_without_payload_keep_their_canonical_bytes() -> None:
    """A message without a payload encodes exactly as before payloads existed (digests unchanged)."""
    rt, _, _, _ = runtime()
    await rt.append(ANA, "s1", [Message(Role.USER, "hi")])
    (group,) = (await rt.read_history(ANA, "s1", max_groups=1)).groups
    assert b"payload" not in group.group.canonical_bytes()
    assert b"control" not in group.group.canonical_bytes()
    assert group.group.canonical_bytes().startswith(
        b'{"messages":[{"content":"hi","role":"user","tool_call_id":null,"tool_calls":[]}],"retained":'
    )


def _deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


class _UnreadableMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        return 1

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("cannot iterate")

    def __len__(self) -> int:
        return 1


class _LyingMapping(Mapping[str, Any]):
    """Lists a key it then has no value for."""

    def __getitem__(self, key: str) -> Any:
        return {"a": 1}[key]

    def __iter__(self) -> Iterator[str]:
        return iter(["a", "b"])

    def __len__(self) -> int:
        return 2


class _UnreadableList(list[Any]):
    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("cannot iterate")


class _EqRaises(dict[str, Any]):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("cannot compare")

    def __ne__(self, other: object) -> bool:
        raise RuntimeError("cannot compare")

    __hash__ = None  # type: ignore[assignment]


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(math.nan, id="nan"),
        pytest.param({"x": math.inf}, id="inf"),
        pytest.param({"x": -math.inf}, id="minus-inf"),
        pytest.param({"x": (1, 2)}, id="tuple"),
        pytest.param({1: "int key"}, id="int-key"),
        pytest.param({"x": {1, 2}}, id="set"),
        pytest.param({"x": b"bytes"}, id="bytes"),
        pytest.param({"x": "\ud800"}, id="lone-surrogate"),
        pytest.param({"x": object()}, id="object"),
        pytest.param({"x": 10**5000}, id="huge-int"),
        pytest.param(_deep(65), id="too-deep"),
        pytest.param("x" * (MAX_PAYLOAD_BYTES + 1), id="too-large"),
        # Containers of the host's own whose reading raises leaked that exception (bare).
        pytest.param(_UnreadableMapping(), id="mapping-iter-raises"),
        pytest.param(_LyingMapping(), id="mapping-keys-lie"),
        pytest.param({"x": _UnreadableList([1])}, id="list-iter-raises"),
        pytest.param({"x": _EqRaises(a=(1,))}, id="eq-raises"),
    ],
)
async def test_a_payload_that_is_not_plain_json_or_too_large_is_refused_and_changes_nothing(
    payload: Any,
) -> None:
    rt, _, archive, store = runtime()
    await rt.append(ANA, "s1", pair(0))
    before = stored_state(store, archive)
    with pytest.raises(InvalidPayloadError) as caught:
        await rt.append(ANA, "s1", [Message(Role.USER, "x", payload=payload, payload_format=FORMAT)])
    assert caught.value.commit_state in (None, CommitState.NOT_COMMITTED)
    assert "nothing was written" in str(caught.value)
    assert stored_state(store, archive) == before


async def test_an_integer_only_a_raised_digit_limit_encodes_is_refused_and_changes_nothing() -> None:
    # A host that raised its own int digit limit could commit an integer that every process at
    # Python's default limit (4300 digits) then fails to decode: history nobody else can read.
    rt, _, archive, store = runtime(max_groups=1)
    await rt.append(ANA, "s1", pair(0))
    before = stored_state(store, archive)
    longest = 10**4300 - 1  # 4300 digits: decodable everywhere
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # no limit in this process
    try:
        too_long = [
            Message(Role.USER, "x", payload={"n": [-(10**4300)]}, payload_format=FORMAT),
            Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "f", {"n": 10**4300}),)),
        ]
        for messages in ([too_long[0]], [too_long[1], Message(Role.TOOL, "r", tool_call_id="c1")]):
            with pytest.raises(InvalidPayloadError, match="4300 digits"):
                await rt.append(ANA, "s1", messages)
            assert stored_state(store, archive) == before
        await rt.append(ANA, "s1", [Message(Role.USER, "y", payload={"n": longest}, payload_format=FORMAT)])
        # A long run of digits in a string is text, not an integer.
        digits = Message(Role.USER, "z", payload={"t": "7" * 5000}, payload_format=FORMAT)
        await rt.append(ANA, "s1", [digits])
        # Many integers just short of the bound are accepted (each run is 4,300 digits, not more).
        runs = Message(Role.USER, "r", payload=[10**4299] * 50, payload_format=FORMAT)
        await rt.append(ANA, "s2", [runs])
    finally:
        sys.set_int_max_str_digits(limit)
    await rt.append(ANA, "s1", pair(1))  # archives the groups: they are decoded again
    page = await rt.read_history(ANA, "s1", max_groups=10)
    assert [m.payload for m in page.messages if m.payload] == [{"n": longest}, {"t": "7" * 5000}]


async def test_a_group_over_max_append_bytes_is_refused_and_changes_nothing() -> None:
    # Five messages of 7 MiB each: every one within its own bounds, the group over 32 MiB.
    rt, _, archive, store = runtime()
    await rt.append(ANA, "s1", pair(0))
    before = stored_state(store, archive)
    big = [Message(Role.USER, "x" * (7 * 1024 * 1024)) for _ in range(5)]
    with pytest.raises(InvalidArgumentError, match=f"over the limit of {MAX_APPEND_BYTES}") as caught:
        await rt.append(ANA, "s1", big)
    assert caught.value.commit_state in (None, CommitState.NOT_COMMITTED)
    assert "nothing was written" in str(caught.value)
    assert stored_state(store, archive) == before
    # Four of them (28 MiB) are within the bound and commit.
    await rt.append(ANA, "s1", big[:4])


async def test_payload_depth_64_is_accepted() -> None:
    rt, _, _, _ = runtime()
    await rt.append(ANA, "s1", [Message(Role.USER, "x", payload=_deep(63), payload_format=FORMAT)])
    (message,) = (await rt.read_history(ANA, "s1", max_groups=1)).messages
    assert message.payload == _deep(63)


@pytest.mark.parametrize(
    ("payload", "payload_format"),
    [({"a": 1}, None), (None, FORMAT), ({"a": 1}, ""), ({"a": 1}, "has space"), ({"a": 1}, "x" * 129)],
)
async def test_payload_and_its_format_go_together(payload: Any, payload_format: Any) -> None:
    rt, _, archive, store = runtime()
    with pytest.raises(InvalidPayloadError):
        await rt.append(ANA, "s1", [Message(Role.USER, "x", payload=payload, payload_format=payload_format)])
    assert stored_state(store, archive) == (None, {})


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([], id="empty"),
        pytest.param(
            [Message(Role.USER, "q"), Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "t"),))],
            id="call-without-result",
        ),
        pytest.param([Message(Role.TOOL, "out", tool_call_id="c1")], id="result-without-call"),
        pytest.param(
            [
                Message(Role.TOOL, "early", tool_call_id="c1"),
                Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "t"),)),
            ],
            id="result-before-call",
        ),
    ],
)
async def test_messages_that_would_form_an_incomplete_group_are_refused(messages: list[Message]) -> None:
    rt, _, archive, store = runtime()
    await rt.append(ANA, "s1", pair(0))
    before = stored_state(store, archive)
    with pytest.raises(IncompleteGroupError):
        await rt.append(ANA, "s1", messages)
    assert stored_state(store, archive) == before


def _forced(message: Message, **fields: Any) -> Message:
    """``message`` with ``fields`` set behind its frozen class's back (a host's broken object)."""
    for name, value in fields.items():
        object.__setattr__(message, name, value)
    return message


@pytest.mark.parametrize(
    "messages",
    [
        "text",
        Message(Role.USER, "x"),
        [object()],
        [Message(Role.USER, "\udcff")],
        [_forced(Message(Role.USER, "x"), tool_calls=None)],
        [_forced(Message(Role.USER, "x"), content=5)],
    ],
)
async def test_messages_of_the_wrong_kind_are_refused(messages: Any) -> None:
    rt, _, archive, store = runtime()
    with pytest.raises(InvalidArgumentError):
        await rt.append(ANA, "s1", messages)
    assert stored_state(store, archive) == (None, {})


@pytest.mark.parametrize(
    "fields",
    [
        {"role": "robot"},
        {"role": ""},
        {"role": b"user"},
        {"role": None},
        {"role": 1},
        {"role": ["user"]},
        {"role": "\ud800"},
        {"role": Role.USER, "tool_calls": None},
        {"role": Role.USER, "tool_calls": 5},
        {"role": Role.USER, "tool_calls": ToolCall("c1", "lookup")},  # one call, not an iterable of them
    ],
)
def test_a_bad_role_or_tool_calls_is_refused_typed_as_the_message_is_built(
    fields: dict[str, Any],
) -> None:
    # A host building the messages it appends got a bare ValueError (an unknown role) or TypeError
    # (tool_calls that are not iterable) from the constructor, not the library's typed error.
    with pytest.raises(InvalidArgumentError, match=r"^message (role|tool_calls) must be"):
        Message(**fields)


async def test_a_stale_expected_revision_is_a_conflict_and_changes_nothing() -> None:
    rt, _, archive, store = runtime()
    with pytest.raises(SessionConflictError) as caught:
        await rt.append(ANA, "s1", pair(0), expected_revision=3)
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    await rt.append(ANA, "s1", pair(0), expected_revision=0)
    before = stored_state(store, archive)
    for stale in (0, 2):
        with pytest.raises(SessionConflictError):
            await rt.append(ANA, "s1", pair(1), expected_revision=stale)
    assert stored_state(store, archive) == before
    with pytest.raises(InvalidArgumentError):
        await rt.append(ANA, "s1", pair(1), expected_revision=-1)


async def test_a_retraction_at_a_stale_expected_revision_is_a_conflict_and_changes_nothing() -> None:
    rt, _, archive, store = runtime()
    await rt.append(ANA, "s1", pair(0))
    page = await rt.read_history(ANA, "s1", max_groups=1)
    await rt.append(ANA, "s1", pair(1))  # the messages read are no longer the view's last
    before = stored_state(store, archive)
    for stale in (page.snapshot_revision, 0, 3):
        with pytest.raises(SessionConflictError) as caught:
            await rt.retract(ANA, "s1", reason="pop", expected_revision=stale)
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
    for bad in (-1, True, "2"):
        with pytest.raises(InvalidArgumentError):
            await rt.retract(ANA, "s1", reason="pop", expected_revision=bad)  # type: ignore[arg-type]
    assert stored_state(store, archive) == before
    done = await rt.retract(ANA, "s1", reason="pop", expected_revision=page.snapshot_revision + 1)
    assert [m.content for m in done.messages] == [pair(1)[-1].content]


async def test_a_view_reset_at_a_stale_expected_revision_is_a_conflict_and_changes_nothing() -> None:
    rt, _, archive, store = runtime()
    await rt.append(ANA, "s1", pair(0))
    page = await rt.read_history(ANA, "s1", max_groups=1)
    await rt.append(ANA, "s1", pair(1))  # the view read is no longer the session's
    before = stored_state(store, archive)
    for stale in (page.snapshot_revision, 0, 3):
        with pytest.raises(SessionConflictError) as caught:
            await rt.reset_view(ANA, "s1", reason="clear", expected_revision=stale)
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
    for bad in (-1, True, "2", 1.0):
        with pytest.raises(InvalidArgumentError):
            await rt.reset_view(ANA, "s1", reason="clear", expected_revision=bad)  # type: ignore[arg-type]
    assert stored_state(store, archive) == before
    assert (await rt.inspect_session(ANA, "s1")).revision == page.snapshot_revision + 1
    done = await rt.reset_view(ANA, "s1", reason="clear", expected_revision=page.snapshot_revision + 1)
    assert done.snapshot_revision == page.snapshot_revision + 2
    assert (await rt.read_history(ANA, "s1", max_groups=10)).messages == ()


async def test_a_view_reset_expecting_a_revision_never_brings_back_an_erased_session() -> None:
    # Without expected_revision a reset of an absent session creates it (an unconditional clear
    # never fails); a host that read the session first means to clear *that* session, which an
    # operator may have erased since: refused, and nothing is stored for it.
    rt, _, archive, store = runtime()
    operator = OperatorAttestation(VerifiedIdentity("acme", "ops", "test-auth"), "request 1")
    async with rt:
        await rt.append(ANA, "s1", pair(0))
        page = await rt.read_history(ANA, "s1", max_groups=1)
        await rt.erase(EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=operator)
        with pytest.raises(SessionConflictError) as caught:
            await rt.reset_view(ANA, "s1", reason="clear", expected_revision=page.snapshot_revision)
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert stored_state(store, archive) == (None, {})
        assert (await rt.list_sessions(ANA, limit=10)).sessions == ()
        # Expecting 0 (absent) is the one revision an erased session is at. Created again, it starts
        # above the erased one's revisions (the store's revision floor), never back at 1.
        done = await rt.reset_view(ANA, "s1", reason="clear", expected_revision=0)
        assert done.snapshot_revision == page.snapshot_revision + 1


async def test_append_evicts_archives_and_pages_back_over_the_archive() -> None:
    rt, _, archive, _ = runtime(max_groups=2)
    results = [await rt.append(ANA, "s1", pair(n)) for n in range(7)]
    assert results[-1].boundary == 5 and results[-1].eviction is EvictionStatus.ARCHIVED
    assert archive.raw(KEY, 4) is not None
    seen: list[str] = []
    before: int | None = None
    while True:
        page = await rt.read_history(ANA, "s1", before_seq=before, max_groups=3)
        assert len(page.groups) <= 3
        seen[:0] = texts(page.messages)
        before = page.next_before_seq
        if before is None:
            break
    assert seen == [t for n in range(7) for t in (f"u{n}", f"a{n}")]


async def test_max_bytes_keeps_the_newest_groups_and_refuses_a_group_over_it() -> None:
    rt, _, _, _ = runtime()
    for n in range(4):
        await rt.append(ANA, "s1", pair(n))
    one = (await rt.read_history(ANA, "s1", max_groups=1)).groups[0].group.size_bytes
    page = await rt.read_history(ANA, "s1", max_groups=4, max_bytes=2 * one + 2)
    assert [g.seq for g in page.groups] == [2, 3] and page.next_before_seq == 2
    with pytest.raises(InvalidArgumentError, match="larger max_bytes"):
        await rt.read_history(ANA, "s1", max_groups=4, max_bytes=one // 2)


@pytest.mark.parametrize("before_seq", [-1, 3, True, 1.0, "1"])
async def test_before_seq_out_of_range_is_refused(before_seq: Any) -> None:
    rt, _, _, _ = runtime()
    await rt.append(ANA, "s1", pair(0))
    await rt.append(ANA, "s1", pair(1))
    with pytest.raises(InvalidArgumentError, match="before_seq"):
        await rt.read_history(ANA, "s1", before_seq=before_seq, max_groups=1)
    assert (await rt.read_history(ANA, "s1", before_seq=0, max_groups=1)).groups == ()


@pytest.mark.parametrize(
    ("max_groups", "max_bytes"),
    [(0, None), (MAX_PAGE_GROUPS + 1, None), (10**12, None), (True, None), (1, 0)],
)
async def test_page_bounds_follow_the_one_count_rule(max_groups: Any, max_bytes: Any) -> None:
    rt, _, _, _ = runtime()
    with pytest.raises(InvalidArgumentError):
        await rt.read_history(ANA, "s1", max_groups=max_groups, max_bytes=max_bytes)


@pytest.mark.parametrize("view", [1, None, "no"])
async def test_a_view_flag_that_is_not_a_bool_is_refused(view: Any) -> None:
    rt, _, _, _ = runtime()
    await rt.append(ANA, "s1", pair(0))
    with pytest.raises(InvalidArgumentError, match="view must be True or False"):
        await rt.read_history(ANA, "s1", max_groups=1, view=view)


async def test_another_identity_never_reads_or_changes_a_session_of_the_same_id() -> None:
    rt, _, archive, store = runtime()
    await rt.append(ANA, "s1", pair(0))
    before = stored_state(store, archive)
    page = await rt.read_history(BOB, "s1", max_groups=10, view=False)
    assert page.groups == () and page.snapshot_revision == 0
    with pytest.raises(RetractionRefusedError):
        await rt.retract(BOB, "s1", reason="pop")
    assert stored_state(store, archive) == before
    assert (await rt.list_sessions(BOB, limit=10)).sessions == ()


# -- concurrency ------------------------------------------------------------------------------------


async def test_append_on_a_session_a_run_holds_is_busy_and_changes_nothing() -> None:
    rt, provider, _, _ = runtime()
    provider.gate = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rt.run, ANA, "s1", "first")
        await provider.entered.wait()
        with pytest.raises(SessionBusyError):
            await rt.append(ANA, "s1", pair(9))
        with pytest.raises(SessionBusyError):
            await rt.retract(ANA, "s1", reason="pop")
        with pytest.raises(SessionBusyError):
            await rt.reset_view(ANA, "s1", reason="clear")
        provider.gate.set()
    page = await rt.read_history(ANA, "s1", max_groups=10, view=False)
    assert texts(page.messages) == ["first", "echo first"]


class GatedSaves(InMemorySessionStore):
    """The public in-memory store whose saves wait at a gate once ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: anyio.Event | None = None
        self.saving = anyio.Event()

    async def save(
        self, key: SessionKey, snapshot: Any, expected_revision: int | None, ctx: OpContext
    ) -> int:
        if self.gate is not None:
            self.saving.set()
            await self.gate.wait()
        return await super().save(key, snapshot, expected_revision, ctx)


async def test_a_run_on_a_session_an_append_holds_is_busy_before_any_model_call() -> None:
    store = GatedSaves()
    rt, provider, _, _ = runtime(store=store)
    requests = record_requests(provider)
    store.gate = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rt.append, ANA, "s1", pair(0))
        await store.saving.wait()
        with pytest.raises(SessionBusyError):
            await rt.run(ANA, "s1", "refused")
        store.gate.set()
    assert requests == []
    assert texts((await rt.read_history(ANA, "s1", max_groups=5)).messages) == ["u0", "a0"]


async def test_two_runtimes_racing_on_one_session_lose_nothing() -> None:
    """Across processes (two runtimes, one store) compare-and-set decides: one conflict, nothing lost."""
    store = GatedSaves()
    archive = InMemoryArchive()
    rt_a, _, _, _ = runtime(store=store, archive=archive)
    rt_b, _, _, _ = runtime(store=store, archive=archive)
    store.gate = anyio.Event()
    outcomes: list[Any] = []

    async def attempt(rt: HarnessRuntime, n: int) -> None:
        try:
            outcomes.append(await rt.append(ANA, "s1", pair(n)))
        except SessionConflictError as exc:
            outcomes.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(attempt, rt_a, 0)
        tg.start_soon(attempt, rt_b, 1)
        await anyio.wait_all_tasks_blocked()
        store.gate.set()
    assert sorted(type(o).__name__ for o in outcomes) == ["AppendResult", "SessionConflictError"]
    conflict = next(o for o in outcomes if isinstance(o, SessionConflictError))
    assert conflict.commit_state is CommitState.NOT_COMMITTED
    assert len((await rt_a.read_history(ANA, "s1", max_groups=5)).groups) == 1


@pytest.mark.parametrize("write", ["append", "retract"])
async def test_two_runtimes_writing_equal_groups_on_one_revision_are_not_both_committed(write: str) -> None:
    """Two equal writes (the same user words, or two pops of the same last message) race across runtimes.

    Compare-and-set lets one land; the other's save is refused as a conflict, and the read-back
    finds the snapshot it would have saved (the same bytes, written by the winner) and reports it
    committed: two appends acknowledged at one seq with one group stored, or two pops both
    returning the message only one of them retracted.
    """
    store = GatedSaves()
    archive = InMemoryArchive()
    rt_a, _, _, _ = runtime(store=store, archive=archive)
    rt_b, _, _, _ = runtime(store=store, archive=archive)
    await rt_a.append(ANA, "s1", pair(0))
    await rt_a.append(ANA, "s1", pair(1))
    revision = (await rt_a.read_history(ANA, "s1", max_groups=1)).snapshot_revision
    store.gate = anyio.Event()
    outcomes: list[Any] = []

    async def attempt(rt: HarnessRuntime) -> None:
        try:
            if write == "append":
                outcomes.append(await rt.append(ANA, "s1", [Message(Role.USER, "yes")]))
            else:
                outcomes.append(
                    await rt.retract(ANA, "s1", count=1, reason="pop_item", expected_revision=revision)
                )
        except SessionConflictError as exc:
            outcomes.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(attempt, rt_a)
        tg.start_soon(attempt, rt_b)
        await anyio.wait_all_tasks_blocked()
        store.gate.set()
    committed = [o for o in outcomes if not isinstance(o, SessionConflictError)]
    page = await rt_a.read_history(ANA, "s1", max_groups=10)
    # Each write told committed is in history: as many "yes" groups, or retracted messages.
    if write == "append":
        assert len(committed) == texts(page.messages).count("yes")
    else:
        assert len(committed) == 4 - len(page.messages)


# -- list_sessions ----------------------------------------------------------------------------------


async def test_list_sessions_pages_the_identitys_own_sessions() -> None:
    rt, _, _, _ = runtime()
    for sid in ("b", "a", "d", "c", "e"):
        await rt.append(ANA, sid, pair(0))
    await rt.append(BOB, "zz", pair(0))
    first = await rt.list_sessions(ANA, limit=2)
    assert first.sessions == ("a", "b") and first.next_after == "b"
    second = await rt.list_sessions(ANA, after=first.next_after, limit=2)
    assert second.sessions == ("c", "d") and second.next_after == "d"
    last = await rt.list_sessions(ANA, after=second.next_after, limit=2)
    assert last.sessions == ("e",) and last.next_after is None
    for limit in (0, 1001, True):
        with pytest.raises(InvalidArgumentError):
            await rt.list_sessions(ANA, limit=limit)


class NoListing(InMemorySessionStore):
    capabilities: ClassVar[SessionStoreCapabilities] = SessionStoreCapabilities(compare_and_set=True)


async def test_list_sessions_without_the_listing_capability_is_a_capability_error() -> None:
    rt, _, _, _ = runtime(store=NoListing())
    with pytest.raises(CapabilityError, match="listing"):
        await rt.list_sessions(ANA, limit=10)


class ListsBadIds(InMemorySessionStore):
    """A store whose listing adds an id no session key holds (a NUL, a lone surrogate, ""), sorted last."""

    bad = "z\x00"

    async def list_sessions(self, tenant: str, user: str, limit: int, ctx: Any, after: Any = None) -> Any:
        return [*await super().list_sessions(tenant, user, limit, ctx, after=after), self.bad][:limit]


@pytest.mark.parametrize("bad", ["z\x00", "z\ud800", "z" * 257])
async def test_a_listing_naming_an_id_no_session_has_is_a_contract_violation(bad: str) -> None:
    # It was handed to the host as a session id (and as next_after): the host's read of it, or the
    # next page, was then refused as the host's own bad id (InvalidIdError).
    store = ListsBadIds()
    store.bad = bad
    rt, _, _, _ = runtime(store=store)
    await rt.append(ANA, "a", pair(0))
    with pytest.raises(ContractViolationError, match="no session key holds"):
        await rt.list_sessions(ANA, limit=10)


# -- retract and reset_view -------------------------------------------------------------------------


async def test_retract_takes_the_last_messages_of_the_view_and_deletes_nothing() -> None:
    rt, provider, _, _ = runtime()
    requests = record_requests(provider)
    await rt.append(ANA, "s1", pair(0))
    await rt.append(ANA, "s1", pair(1))
    popped = await rt.retract(ANA, "s1", reason="pop")
    assert texts(popped.messages) == ["a1"] and popped.retracted == (MessageRef(1, 1),)
    assert (popped.seq, popped.view_retracted, popped.commit_state) == (2, 1, CommitState.COMMITTED)
    assert texts((await rt.read_history(ANA, "s1", max_groups=10)).messages) == ["u0", "a0", "u1"]
    # Two more: across the group boundary.
    again = await rt.retract(ANA, "s1", count=2, reason="undo")
    assert texts(again.messages) == ["a0", "u1"]
    view = await rt.read_history(ANA, "s1", max_groups=10)
    assert texts(view.messages) == ["u0"] and view.view_retracted == 3
    audit = await rt.read_history(ANA, "s1", max_groups=10, view=False)
    assert texts(m for g in audit.groups for m in g.group.messages) == ["u0", "a0", "u1", "a1"]
    controls = [g.control for g in audit.groups if g.control is not None]
    assert [c.kind for c in controls] == [ControlKind.RETRACT, ControlKind.RETRACT]
    assert controls[1].retracted == (MessageRef(0, 1), MessageRef(1, 0)) and controls[1].reason == "undo"
    await rt.run(ANA, "s1", "next")
    assert texts(requests[-1].history) == ["u0"]
    view = await rt.inspect_session(ANA, "s1")
    assert (view.view_start, view.retracted) == (0, 3)
    assert texts((await rt.read_history(ANA, "s1", max_groups=10)).messages) == ["u0", "next", "echo next"]


async def test_retract_past_the_view_start_is_refused_and_changes_nothing() -> None:
    rt, _, archive, store = runtime()
    with pytest.raises(RetractionRefusedError) as caught:
        await rt.retract(ANA, "s1", reason="pop")
    assert caught.value.available == 0
    await rt.append(ANA, "s1", pair(0))
    await rt.reset_view(ANA, "s1", reason="clear")
    await rt.append(ANA, "s1", [Message(Role.USER, "after")])
    before = stored_state(store, archive)
    with pytest.raises(RetractionRefusedError) as caught:
        await rt.retract(ANA, "s1", count=2, reason="pop")
    assert caught.value.available == 1
    assert stored_state(store, archive) == before
    for count in (0, 10_001, True):
        with pytest.raises(InvalidArgumentError):
            await rt.retract(ANA, "s1", count=count, reason="pop")
    with pytest.raises(InvalidArgumentError):
        await rt.retract(ANA, "s1", reason=None)  # type: ignore[arg-type]
    assert stored_state(store, archive) == before


async def test_reset_view_clears_the_view_and_run_sends_none_of_it() -> None:
    rt, provider, _, _ = runtime()
    requests = record_requests(provider)
    await rt.append(ANA, "s1", pair(0))
    await rt.run(ANA, "s1", "hello")
    reset = await rt.reset_view(ANA, "s1", reason="clear")
    assert (reset.seq, reset.view_start, reset.commit_state) == (2, 3, CommitState.COMMITTED)
    page = await rt.read_history(ANA, "s1", max_groups=10)
    assert page.groups == () and page.view_start == 3 and page.next_before_seq is None
    audit = await rt.read_history(ANA, "s1", max_groups=10, view=False)
    assert texts(audit.groups[0].group.messages) == ["u0", "a0"] and audit.groups[0].shown == ()
    assert audit.groups[-1].control is not None and audit.groups[-1].control.kind is ControlKind.RESET_VIEW
    await rt.run(ANA, "s1", "fresh")
    assert requests[-1].history == ()
    assert (await rt.inspect_session(ANA, "s1")).view_start == 3


async def test_the_model_never_gets_half_a_tool_exchange() -> None:
    rt, provider, _, _ = runtime()
    requests = record_requests(provider)
    await rt.append(
        ANA,
        "s1",
        [
            Message(Role.USER, "find x"),
            Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "lookup", {}),)),
            Message(Role.TOOL, "found", tool_call_id="c1"),
            Message(Role.ASSISTANT, "x is found"),
        ],
    )
    await rt.retract(ANA, "s1", count=2, reason="pop the result and the answer")
    await rt.run(ANA, "s1", "again")
    history = requests[-1].history
    assert [(m.role, m.content, m.tool_calls) for m in history] == [(Role.USER, "find x", ())]
    # The view itself keeps exactly what was not retracted, the unanswered call included.
    view = (await rt.read_history(ANA, "s1", max_groups=1, before_seq=1)).messages
    assert [m.role for m in view] == [Role.USER, Role.ASSISTANT] and view[1].tool_calls


async def test_retract_reaches_into_archived_groups_and_read_skips_retracted_ones() -> None:
    rt, provider, _, _ = runtime(max_groups=2)
    requests = record_requests(provider)
    for n in range(5):
        await rt.append(ANA, "s1", pair(n))
    popped = await rt.retract(ANA, "s1", count=7, reason="undo most")
    assert texts(popped.messages) == ["a1", "u2", "a2", "u3", "a3", "u4", "a4"]
    page = await rt.read_history(ANA, "s1", max_groups=1)
    assert [g.seq for g in page.groups] == [1] and texts(page.messages) == ["u1"]
    assert page.next_before_seq == 1
    older = await rt.read_history(ANA, "s1", before_seq=1, max_groups=5)
    assert texts(older.messages) == ["u0", "a0"] and older.next_before_seq is None
    await rt.append(ANA, "s1", pair(9))
    await rt.retract(ANA, "s1", count=3, reason="more")
    assert texts((await rt.read_history(ANA, "s1", max_groups=10)).messages) == ["u0", "a0"]
    await rt.run(ANA, "s1", "now")
    assert texts(requests[-1].history) == []  # the view's messages are archived, not resident


async def test_a_damaged_archived_group_fails_the_read_closed() -> None:
    rt, _, archive, _ = runtime(max_groups=1)
    for n in range(3):
        await rt.append(ANA, "s1", pair(n))
    data, digest = archive.raw(KEY, 0)  # type: ignore[misc]
    archive.put_raw(KEY, 0, data.replace(b"u0", b"uX"), digest)
    assert texts((await rt.read_history(ANA, "s1", max_groups=2)).messages) == ["u1", "a1", "u2", "a2"]
    with pytest.raises(ArchiveCorruptError):
        await rt.read_history(ANA, "s1", max_groups=3)
    with pytest.raises(ArchiveCorruptError):
        await rt.retract(ANA, "s1", count=5, reason="reaches the damaged group")


async def test_memory_is_a_read_only_property() -> None:
    rt, _, _, _ = runtime()
    assert rt.memory is None
    with pytest.raises(AttributeError):
        rt.memory = None  # type: ignore[misc]


async def test_a_diverged_session_refuses_append_retract_and_reset_and_changes_nothing() -> None:
    """Another writer's group sits in the archive at a seq this session never archived: diverged."""
    rt, _, archive, store = runtime(max_groups=1)
    await rt.append(ANA, "s1", pair(0))
    theirs = MessageGroup(seq=0, messages=[Message(Role.USER, "theirs")])
    archive.put_raw(KEY, 0, theirs.canonical_bytes(), theirs.digest)  # another writer archived seq 0
    diverging = await rt.append(ANA, "s1", pair(1))  # its eviction meets the other copy
    assert diverging.eviction is EvictionStatus.DIVERGED and diverging.has("archive_diverged")
    before = stored_state(store, archive)
    with pytest.raises(SessionDivergedError) as caught:
        await rt.append(ANA, "s1", pair(2))
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    with pytest.raises(SessionDivergedError):
        await rt.retract(ANA, "s1", reason="pop")
    with pytest.raises(SessionDivergedError):
        await rt.reset_view(ANA, "s1", reason="clear")
    assert stored_state(store, archive) == before


async def test_an_append_cancelled_by_aclose_in_its_save_says_unknown() -> None:
    """As for a run: a save that may have landed is neither reported committed nor not committed."""
    store = GatedSaves()
    provider = Echoing()
    rt = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=store,
        # The settle wait runs out (the save is gated); the cancelled save then stops at once, so
        # the close wait is generous: a stalled machine must not cut the clean-up short.
        limits=RuntimeLimits(settle_timeout_s=0.05, close_timeout_s=30.0),
    )
    store.gate = anyio.Event()
    caught: list[BaseException] = []

    async def victim() -> None:
        try:
            await rt.append(ANA, "s1", pair(0))
        except RuntimeClosedError as exc:
            caught.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(victim)
        await store.saving.wait()
        await rt.aclose()
    (error,) = caught
    assert error.commit_state is CommitState.UNKNOWN
    assert "unknown" in str(error)
    with pytest.raises(RuntimeClosedError):
        await rt.append(ANA, "s1", pair(1))


@pytest.mark.parametrize("adapters", ["memory", "sqlite"])
async def test_what_a_read_hands_out_is_the_callers_own(adapters: str, tmp_path: Any) -> None:
    # The SQLite adapters hand the same decoded group to every read and to run(): a payload or a
    # tool call's arguments changed in place changed later reads and what run() sent the model.
    if adapters == "sqlite":
        config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
        store: Any = SQLiteSessionStore(config)
        rt = create_harness_runtime(
            provider=(provider := Echoing()), archive=SQLiteArchive(config), session_store=store
        )
    else:
        rt, provider, _, _ = runtime()
    requests = record_requests(provider)
    call = ToolCall("c1", "transfer", {"amount": 10, "to": ["acct"]})
    await rt.append(
        ANA,
        "s1",
        [
            Message(Role.USER, "pay", payload={"type": "message", "parts": [1]}, payload_format=FORMAT),
            Message(Role.ASSISTANT, "", tool_calls=(call,)),
            Message(Role.TOOL, "paid", tool_call_id="c1"),
        ],
    )
    await rt.append(ANA, "s1", [Message(Role.USER, "note", payload={"k": [1]}, payload_format=FORMAT)])
    page = await rt.read_history(ANA, "s1", max_groups=2)
    entry = page.groups[0]
    entry.messages[0].payload["parts"].append(2)
    entry.messages[1].tool_calls[0].arguments["amount"] = 1_000_000
    entry.group.messages[1].tool_calls[0].arguments["to"].append("thief")
    taken = await rt.retract(ANA, "s1", reason="pop")
    taken.messages[0].payload["k"].append(9)

    audit = (await rt.read_history(ANA, "s1", max_groups=3, view=False)).groups
    assert audit[0].group.messages[0].payload == {"type": "message", "parts": [1]}
    assert audit[0].group.messages[1].tool_calls == (call,) and audit[0].digest == entry.digest
    assert audit[1].group.messages[0].payload == {"k": [1]}
    await rt.run(ANA, "s1", "again")
    (sent,) = requests
    assert [m.tool_calls for m in sent.history if m.tool_calls] == [(call,)]
    # copy=False: the runtime's own objects (no copy), for a caller that never changes them.
    one = (await rt.read_history(ANA, "s1", max_groups=10, copy=False)).messages
    two = (await rt.read_history(ANA, "s1", max_groups=10, copy=False)).messages
    assert one[0].payload is two[0].payload if adapters == "sqlite" else one[0].payload == two[0].payload
    with pytest.raises(InvalidArgumentError, match="copy must be True or False"):
        await rt.read_history(ANA, "s1", max_groups=1, copy=None)  # type: ignore[arg-type]
    await rt.aclose()


async def test_expected_revision_looks_past_this_runtimes_background_summary_updates() -> None:
    # A summary update landing after an append moves the revision without changing history: a
    # host chaining expected_revision got a conflict with no other writer.
    rt = create_harness_runtime(
        provider=Echoing(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=True),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    done = await rt.append(ANA, "s1", pair(0), expected_revision=0)
    for n in range(1, 8):
        done = await rt.append(ANA, "s1", pair(n), expected_revision=done.snapshot_revision)
    await rt.drain()
    view = await rt.inspect_session(ANA, "s1")
    assert view.summary is not None and view.revision > done.snapshot_revision  # summaries landed after
    page = await rt.read_history(ANA, "s1", max_groups=1)
    # A real change since is still refused: another append, then one expecting the page's revision.
    await rt.append(ANA, "s1", pair(8))
    with pytest.raises(SessionConflictError):
        await rt.append(ANA, "s1", pair(9), expected_revision=page.snapshot_revision)
    await rt.retract(
        ANA, "s1", reason="pop", expected_revision=(await rt.inspect_session(ANA, "s1")).revision
    )
    await rt.aclose()


async def test_expected_revision_is_not_looked_past_an_update_of_an_erased_incarnation() -> None:
    # With a store that starts an erased session id used again at revision 1 again (the built-in
    # ones never do: their revision floor), a summary update of the old incarnation (revision 3 on
    # 2, here) must not let a write expecting 2 past another writer's real append that made the
    # new incarnation's revision 3.
    archive, store = InMemoryArchive(), RevisionsRestartStore()
    rt = create_harness_runtime(
        provider=Echoing(),
        archive=archive,
        session_store=store,
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=True),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    other = create_harness_runtime(provider=Echoing(), archive=archive, session_store=store)
    async with rt, other:
        for n in range(2):
            await rt.append(ANA, "s1", pair(n))
            await rt.drain()
        assert (await rt.inspect_session(ANA, "s1")).revision == 3  # 3: a summary update on 2
        operator = OperatorAttestation(VerifiedIdentity("acme", "ops", "test-auth"), "request 1")
        await rt.erase(EraseTarget.session("acme", "ana", "s1"), reason="erase", attestation=operator)
        seen = [(await other.append(ANA, "s1", pair(n))).snapshot_revision for n in range(3)]
        assert seen == [1, 2, 3]
        before = stored_state(store, archive)
        with pytest.raises(SessionConflictError) as caught:
            await rt.append(ANA, "s1", pair(9), expected_revision=2)
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert stored_state(store, archive) == before
        # This runtime's own update of the new incarnation is still looked past.
        done = await rt.append(ANA, "s1", pair(10), expected_revision=3)
        await rt.drain()
        assert (await rt.inspect_session(ANA, "s1")).revision > done.snapshot_revision
        await rt.append(ANA, "s1", pair(11), expected_revision=done.snapshot_revision)


@pytest.mark.parametrize("erasure", ["session", "retention"])
async def test_an_erasure_while_a_page_is_read_is_not_reported_as_damage(erasure: str) -> None:
    # Reads are not exclusive: an erasure may remove archived rows the page's snapshot still
    # names. That is not damage: the page is read again from the session as it is now.
    archive = GatedReads()
    rt = create_harness_runtime(
        provider=Echoing(),
        archive=archive,
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        retention=RetentionPolicy(max_archived_groups=1),
    )
    operator = OperatorAttestation(VerifiedIdentity("acme", "ops", "test-auth"), "request 1")
    async with rt:
        for n in range(4):
            await rt.append(ANA, "s1", pair(n))
        gate = archive.gate = anyio.Event()
        pages: list[Any] = []

        async def read() -> None:
            pages.append(await rt.read_history(ANA, "s1", max_groups=10))

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await archive.entered.wait()  # the snapshot is loaded; groups 0..2 are archived
            if erasure == "session":
                await rt.erase(EraseTarget.session("acme", "ana", "s1"), reason="erase", attestation=operator)
            else:
                await rt.apply_retention(operator, reason="trim")
            gate.set()
        [page] = pages
        if erasure == "session":
            assert page.groups == () and page.next_seq == 0
        else:
            assert [g.seq for g in page.groups] == [2, 3]  # groups 0 and 1 were erased
        # Damage found while the session stays as it is is still damage, after one more look.
        for n in range(4, 7):
            await rt.append(ANA, "s1", pair(n))
        seq = (await rt.inspect_session(ANA, "s1")).boundary - 1
        data, digest = archive.raw(KEY, seq)  # type: ignore[misc]
        damaged = data.replace(b'"content":"u', b'"content":"X')
        assert damaged != data
        archive.put_raw(KEY, seq, damaged, digest)
        with pytest.raises(ArchiveCorruptError):
            await rt.read_history(ANA, "s1", max_groups=10)


async def test_a_retraction_meeting_another_runtimes_erasure_is_a_conflict_not_damage() -> None:
    # Another process (runtime) erases the session while a retraction reads the archived
    # messages it means to take: the retraction is refused as a conflict, nothing written.
    archive, store = GatedReads(), InMemorySessionStore()
    here, there = (
        create_harness_runtime(
            provider=Echoing(),
            archive=archive,
            session_store=store,
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        )
        for _ in range(2)
    )
    operator = OperatorAttestation(VerifiedIdentity("acme", "ops", "test-auth"), "request 1")
    async with here, there:
        for n in range(3):
            await here.append(ANA, "s1", pair(n))
        gate = archive.gate = anyio.Event()
        caught: list[BaseException] = []

        async def retract() -> None:
            try:
                await here.retract(ANA, "s1", count=4, reason="pop")  # reaches archived group 1
            except Exception as exc:
                caught.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(retract)
            await archive.entered.wait()
            await there.erase(EraseTarget.session("acme", "ana", "s1"), reason="erase", attestation=operator)
            gate.set()
        [error] = caught
        assert isinstance(error, SessionConflictError), repr(error)
        assert error.commit_state is CommitState.NOT_COMMITTED
        assert store.raw(KEY) is None  # nothing written after the erasure


class CountingArchive(InMemoryArchive):
    """Counts the groups its reads hand back."""

    def __init__(self) -> None:
        super().__init__()
        self.groups_read = 0

    async def read_groups(self, key: Any, first_seq: int, count: int, ctx: Any) -> Any:
        groups = await super().read_groups(key, first_seq, count, ctx)
        self.groups_read += len(groups)
        return groups


async def test_max_bytes_bounds_what_a_page_reads_from_the_archive_not_only_what_it_returns() -> None:
    # max_groups archived groups of up to 32 MiB each were read whole before max_bytes cut the page.
    archive = CountingArchive()
    rt, _, _, _ = runtime(max_groups=1, archive=archive)
    mib = 1024 * 1024
    for n in range(20):
        await rt.append(ANA, "s1", [Message(Role.USER, f"{n:02d}" + "x" * mib)])
    archive.groups_read = 0
    page = await rt.read_history(ANA, "s1", max_groups=20, max_bytes=3 * mib + mib // 2)
    assert [g.seq for g in page.groups] == [17, 18, 19] and page.next_before_seq == 17
    # The three that fit (one of them resident at most) and the one that did not: not twenty.
    assert archive.groups_read <= 4


async def test_a_page_joins_the_read_it_continues_only_while_the_seam_is_unchanged() -> None:
    # HistoryPage.joins: an older page read from the seam on continues the read while the seam
    # group is as the first page saw it, in the same view: not after a retraction, or after an
    # erasure whose session id was used again up to the same seqs.
    from agentium_harness import OperatorAttestation

    rt, _, _, _ = runtime(max_groups=4)
    operator = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "request 7")
    async with rt:

        async def fill(n: int, tag: str) -> None:
            for i in range(n):
                await rt.append(ANA, "s", [Message(Role.USER, f"{tag}{i}"), Message(Role.ASSISTANT, "ok")])

        async def older(first: HistoryPage) -> HistoryPage:
            seam = first.groups[0]
            return await rt.read_history(ANA, "s", before_seq=seam.group.seq + 1, max_groups=3)

        await fill(10, "old")
        first = await rt.read_history(ANA, "s", max_groups=3)
        seam = first.groups[0]
        assert (await older(first)).joins(first, seam)
        await fill(2, "more")  # appends leave the older groups as they were
        assert (await older(first)).joins(first, seam)

        await rt.retract(ANA, "s", count=1, reason="test")  # the view changed
        assert not (await older(first)).joins(first, seam)

        first = await rt.read_history(ANA, "s", max_groups=3)
        seam = first.groups[0]
        await rt.erase(EraseTarget.session("acme", "ana", "s"), reason="dsr", attestation=operator)
        await fill(14, "new")  # the id used again, past the old seam's seq
        page = await older(first)
        assert page.groups[-1].group.seq == seam.group.seq
        assert not page.joins(first, seam)


async def test_joins_refuses_a_first_page_or_seam_of_the_wrong_kind_typed() -> None:
    # page.joins(None, seam) or joins(first, first) (the page, not its group) raised a bare
    # AttributeError; a subclass's own attributes or __eq__ would have decided the answer.
    rt, _, _, _ = runtime(max_groups=4)
    async with rt:
        for n in range(3):
            await rt.append(ANA, "s", pair(n))
        first = await rt.read_history(ANA, "s", max_groups=1)
        seam = first.groups[0]
        page = await rt.read_history(ANA, "s", before_seq=seam.group.seq + 1, max_groups=2)
        assert page.joins(first, seam)
        for bad_first, bad_seam in [
            (None, seam),
            (first, None),
            (first, first),
            (seam, seam),
            (first, seam.group),
        ]:
            with pytest.raises(InvalidArgumentError, match="joins"):
                page.joins(bad_first, bad_seam)
