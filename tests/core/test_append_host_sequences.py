"""``append`` given a sequence of the host's own type: read once, bounded, typed (history review).

``append(identity, session_id, messages)`` takes any ``Sequence`` of
messages. A plain list or tuple runs none of the host's code; a sequence of
the host's own type does, in its ``__len__``, ``__iter__`` and
``__getitem__``, and nothing makes those agree. Before the fix the checks
trusted ``len(messages)`` for the ``MAX_APPEND_MESSAGES`` bound and then
iterated as far as the sequence went: one whose ``__len__`` said 1 committed
20,000 messages as one group, one that never ended held the runtime's event
loop in the check for good (every session of the runtime stalled), and one
whose ``__len__``, ``__iter__`` or ``__getitem__`` raised reached the host as
that bare exception. Now the sequence is iterated once, no further than one
message past the bound: past it, or when its iteration raises, the append is
refused with ``InvalidArgumentError`` and nothing is written; otherwise what
its iteration gave is committed (its ``__len__`` decides nothing).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import anyio
import pytest

from agentium_harness import (
    MAX_APPEND_MESSAGES,
    HarnessRuntime,
    InvalidArgumentError,
    Message,
    Role,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")


class Claimed(Sequence[Message]):
    """Says it holds one message; iterating it gives ``count``. ``read``: the messages handed out."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.read = 0

    def __len__(self) -> int:
        return 1

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice) or index >= self.count:
            raise IndexError(index)
        self.read += 1
        return Message(Role.USER, f"m{index}")


class RaisingLen(list[Message]):
    def __len__(self) -> int:
        raise RuntimeError("the host's __len__")


class RaisingIter(list[Message]):
    def __iter__(self) -> Iterator[Message]:
        raise RuntimeError("the host's __iter__")


class RaisingItem(Claimed):
    def __getitem__(self, index: Any) -> Any:
        if index == 1:
            raise RuntimeError("the host's __getitem__")
        return super().__getitem__(index)


def _runtime() -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["(not called)"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )


async def _nothing_written(runtime: HarnessRuntime) -> None:
    page = await runtime.read_history(ANA, "s1", max_groups=10, view=False)
    assert (page.groups, page.next_seq, page.snapshot_revision) == ((), 0, 0)


async def test_a_sequence_longer_than_its_len_is_held_to_max_append_messages() -> None:
    async with _runtime() as runtime:
        with anyio.fail_after(30), pytest.raises(InvalidArgumentError, match="MAX_APPEND_MESSAGES"):
            await runtime.append(ANA, "s1", Claimed(MAX_APPEND_MESSAGES + 1))
        await _nothing_written(runtime)


async def test_a_sequence_is_read_no_further_than_the_bound_so_an_endless_one_ends() -> None:
    async with _runtime() as runtime:
        # An endless one would hold the event loop in the check (fail_after cannot cut code that
        # never awaits): one ten times the bound shows how far the check reads, and ends.
        messages = Claimed(MAX_APPEND_MESSAGES * 10)
        with anyio.fail_after(30), pytest.raises(InvalidArgumentError):
            await runtime.append(ANA, "s1", messages)
        assert messages.read <= MAX_APPEND_MESSAGES + 1
        await _nothing_written(runtime)


@pytest.mark.parametrize(
    "messages",
    [RaisingIter([Message(Role.USER, "m0")]), RaisingItem(3)],
    ids=["__iter__", "__getitem__"],
)
async def test_a_sequence_whose_iteration_raises_is_a_typed_refusal(messages: Any) -> None:
    async with _runtime() as runtime:
        with anyio.fail_after(30), pytest.raises(InvalidArgumentError) as refused:
            await runtime.append(ANA, "s1", messages)
        assert isinstance(refused.value.__cause__, RuntimeError)
        await _nothing_written(runtime)


@pytest.mark.parametrize(
    "messages",
    [Claimed(3), RaisingLen([Message(Role.USER, f"m{i}") for i in range(3)])],
    ids=["within-the-bound", "raising-__len__"],
)
async def test_a_sequence_is_committed_as_its_iteration_gives_it(messages: Any) -> None:
    # What is committed is what iterating it gives, once: its __len__ (raising or not) decides nothing.
    async with _runtime() as runtime:
        with anyio.fail_after(30):
            done = await runtime.append(ANA, "s1", messages)
            page = await runtime.read_history(ANA, "s1", max_groups=10)
        assert done.seq == 0
        assert [m.content for m in page.messages] == ["m0", "m1", "m2"]
