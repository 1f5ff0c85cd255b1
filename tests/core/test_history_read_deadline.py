"""``read_history`` returns by its deadline whichever of its adapter calls blocks.

A page is one load (the erasure fence and the snapshot) and the archive
reads it decides; they run under one operation deadline (issue 22, item 4:
one bounded call for them all). An archive or a store blocked in a worker
thread must still fail the read by ``op_timeout_s`` with
``OperationTimeoutError`` (abandoned), and the runtime must stay usable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _short_deadline import short_only_for

from agentium_harness import (
    Message,
    OperationTimeoutError,
    ResidentLimits,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import MessageGroup, OpContext, SessionKey

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
TIMEOUT_S = 0.3
SLACK_S = 20.0


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # never leave a worker thread blocked


class BlockingArchive(InMemoryArchive):
    """Reads block in a worker thread (one that ignores cancellation) while ``blocked``."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate
        self.blocked = False

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        if self.blocked:
            await anyio.to_thread.run_sync(self.gate.wait)
        return await super().read_groups(key, start_seq, max_groups, ctx)


class BlockingStore(InMemorySessionStore):
    """Loads of the session block in a worker thread while ``blocked``."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate
        self.blocked = False

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        if self.blocked and key.session == "s1":
            await anyio.to_thread.run_sync(self.gate.wait)
        return await super().load(key, ctx)


@pytest.mark.parametrize("blocking", ["archive", "store"])
async def test_a_blocked_adapter_fails_the_read_by_its_deadline(
    gate: threading.Event, blocking: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the blocked read runs under TIMEOUT_S: the appends before it and the read after it are to
    # succeed, on a machine that may stall longer than that (they get 30 s).
    kept = short_only_for(monkeypatch, "history read")
    archive, store = BlockingArchive(gate), BlockingStore(gate)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["x"]),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(op_timeout_s=TIMEOUT_S, resident=ResidentLimits(max_groups=1)),
    )
    for n in range(3):
        await rt.append(ANA, "s1", [Message(Role.USER, f"q{n}"), Message(Role.ASSISTANT, f"a{n}")])
    (archive if blocking == "archive" else store).blocked = True
    started = time.monotonic()
    with pytest.raises(OperationTimeoutError) as info:
        await rt.read_history(ANA, "s1", max_groups=3)  # groups 0 and 1 are archived
    assert time.monotonic() - started < TIMEOUT_S + SLACK_S
    assert info.value.abandoned and info.value.operation == "history read"
    assert kept.kept == [("history read", TIMEOUT_S)]
    kept.operations.clear()
    # The runtime still serves other reads (the newest group is resident).
    archive.blocked = store.blocked = False
    gate.set()
    page = await rt.read_history(ANA, "s1", max_groups=3)
    assert [g.seq for g in page.groups] == [0, 1, 2]
    await rt.aclose()
