"""Stored groups and snapshots are held to what ``append`` commits, even when their digest matches.

Digests are unkeyed: a row written by something other than Agentium (a migration script, a
stray tool) can carry a matching digest and values the public API never commits. ``Message``
itself builds with them (its checks are ``append``'s), so each row below is the canonical
encoding of such a message with its true digest: the decoders must refuse it with their typed
corruption error and change nothing.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from agentium_harness._engine.history_checks import check_messages
from agentium_harness._errors import ArchiveCorruptError, InvalidArgumentError, SnapshotCorruptError
from agentium_harness._history import Message, MessageGroup, Role, ToolCall
from agentium_harness._ports import OpContext
from agentium_harness._ports.archive import decode_archived_group
from agentium_harness._ports.sessions import SessionSnapshot, decode_snapshot, seal_snapshot
from agentium_harness._ports.snapshot import snapshot_bytes
from agentium_harness._scope import Scope, SessionKey
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore

pytestmark = pytest.mark.anyio

KEY = SessionKey("tenant", "user", "session")


def _deep(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def _call(call_id: str = "c1", arguments: dict[str, Any] | None = None) -> tuple[Message, Message]:
    return (
        Message(Role.ASSISTANT, "", (ToolCall(call_id, "search", arguments or {}),)),
        Message(Role.TOOL, "result", tool_call_id=call_id),
    )


def _answered(result: Message) -> tuple[Message, ...]:
    return (Message(Role.ASSISTANT, "", (ToolCall("c1", "search", {}),)), result)


# Each: messages that Message builds but append refuses, and what the refusal names.
REFUSED: dict[str, tuple[tuple[Message, ...], str]] = {
    "an empty tool_call_id": (_answered(Message(Role.TOOL, "r", tool_call_id="")), "tool_call_id"),
    "a NUL in a tool_call_id": (_answered(Message(Role.TOOL, "r", tool_call_id="c\x001")), "U\\+0000"),
    "a tool_call_id of 257 characters": (
        _answered(Message(Role.TOOL, "r", tool_call_id="c" * 257)),
        "at most 256",
    ),
    "a payload without its format": ((Message(Role.USER, "hi", payload={"a": 1}),), "together"),
    "a format without a payload": ((Message(Role.USER, "hi", payload_format="x/v1"),), "together"),
    "a malformed payload format": (
        (Message(Role.USER, "hi", payload={"a": 1}, payload_format="not a name!"),),
        "well-formed",
    ),
    "a payload format of 129 characters": (
        (Message(Role.USER, "hi", payload={"a": 1}, payload_format="x" * 129),),
        "well-formed",
    ),
    "a payload 65 levels deep": (
        (Message(Role.USER, "hi", payload=_deep(65), payload_format="x/v1"),),
        "deeper than 64",
    ),
    "tool call arguments 65 levels deep": (_call(arguments={"a": _deep(64)}), "deeper than 64"),
}


def _group(messages: tuple[Message, ...], seq: int = 0) -> MessageGroup:
    return MessageGroup(seq=seq, messages=messages)


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
async def test_an_archived_group_holding_what_append_refuses_is_corrupt(case: str) -> None:
    messages, named = REFUSED[case]
    with pytest.raises(InvalidArgumentError):  # the rule held: append refuses these too
        check_messages(messages)
    group = _group(messages)
    data, digest = group.canonical_bytes(), group.digest
    with pytest.raises(ArchiveCorruptError, match=named):
        decode_archived_group(KEY, 0, digest, data, "group 0")
    # Through an archive's read too: refused, the row left as it is.
    archive = InMemoryArchive()
    archive.put_raw(KEY, 0, data, digest)
    with pytest.raises(ArchiveCorruptError, match="never commits"):
        await archive.read_groups(KEY, 0, 10, OpContext())
    assert archive.raw(KEY, 0) == (data, digest)


def _sealed(messages: tuple[Message, ...]) -> tuple[SessionSnapshot, bytes]:
    snapshot = seal_snapshot(
        SessionSnapshot(
            memory_scope=Scope(KEY.tenant, KEY.user, KEY.session),
            boundary=3,
            next_seq=5,
            resident=(
                _group((Message(Role.USER, "q"), Message(Role.ASSISTANT, "a")), 3),
                _group(messages, 4),
            ),
        )
    )
    return snapshot, snapshot_bytes(snapshot)


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
async def test_a_snapshot_whose_resident_group_holds_what_append_refuses_is_corrupt(case: str) -> None:
    messages, named = REFUSED[case]
    _, data = _sealed(messages)
    with pytest.raises(SnapshotCorruptError, match=f"resident group 4 .*{named}"):
        decode_snapshot(KEY, data, "snapshot")
    store = InMemorySessionStore()
    store.put_raw(KEY, 1, data)
    with pytest.raises(SnapshotCorruptError, match="never commits"):
        await store.load(KEY, OpContext())
    assert store.raw(KEY) == (1, data)


ACCEPTED: dict[str, tuple[Message, ...]] = {
    "a tool_call_id of 256 characters": _call("c" * 256),
    "a payload with its format": (Message(Role.USER, "hi", payload={"a": 1}, payload_format="x.y:z/v1+j"),),
    "a payload 64 levels deep": (Message(Role.USER, "hi", payload=_deep(64), payload_format="x/v1"),),
    "arguments 64 levels deep": _call(arguments={"a": _deep(63)}),
    "a NUL in content (free text)": (Message(Role.USER, "a\x00b"), Message(Role.ASSISTANT, "ok")),
}


@pytest.mark.parametrize("case", list(ACCEPTED), ids=list(ACCEPTED))
def test_what_append_commits_still_decodes(case: str) -> None:
    check_messages(ACCEPTED[case])  # append commits these
    group = _group(ACCEPTED[case])
    decoded = decode_archived_group(KEY, 0, group.digest, group.canonical_bytes(), "group 0")
    assert decoded == group
    snapshot, data = _sealed(ACCEPTED[case])
    loaded = decode_snapshot(KEY, data, "snapshot")
    assert attrs.astuple(loaded, recurse=False) == attrs.astuple(snapshot, recurse=False)
