"""The erasure check of recall (was this session id erased whole before?) within every recall bound.

Recall reads the tenant's index of finished erasures when an excerpt of the
run's own session is one the archive does not vouch for
(:mod:`agentium_harness._engine.recall_groups`). That read is held to the
round's latency budget whatever the session store does, a read blocked in a
worker thread included; whether an excerpt is vouched for is decided the
same way for every excerpt the archive's group does not hold (its text no
piece of the group included); and an erasure under way counts as one
finished does.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import anyio
import attrs
import pytest
from _recall_erasure_support import (
    ANA,
    KEY,
    OPERATOR,
    SECRET,
    MissedErasure,
    Recording,
    chatter,
    erase_completely,
    hidden_with_a_note,
    recall_runtime,
)

from agentium_harness import (
    ErasedDuringRunError,
    EraseTarget,
    RecallLimits,
    ResidentLimits,
    RunStatus,
    RuntimeLimits,
    SessionKey,
    current_session_recall_policy,
)
from agentium_harness._history import Message, MessageGroup, Role
from agentium_harness._ports.erasure import EraseReport
from agentium_harness._ports.erasure import EraseTarget as Target
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.plugin_api import ArchiveReceipt, OpContext

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # lets a thread the test left blocked finish


class IndexBlocked(InMemorySessionStore):
    """A real in-memory session store whose reads of the erasure index block in a worker thread.

    Once ``gate`` is given, each such read waits in a thread that no
    cancellation reaches, for up to 25 s (a driver stuck on a socket).
    """

    gate: threading.Event | None = None

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        gate = self.gate
        if gate is not None and (key.session == "index" or key.session.startswith("by-")):
            await anyio.to_thread.run_sync(gate.wait, 25.0)
        return await super().load(key, ctx)


async def test_an_erasure_index_read_blocked_in_a_worker_thread_is_cut_at_the_recall_latency_budget(
    gate: threading.Event,
) -> None:
    """The operation deadline is 28 s, the recall latency budget 1 s: the run stops, no model call.

    The store answers with a group past the session's next seq (an excerpt
    the archive does not vouch for), so the engine asks the erasure index;
    the read never returns. Whether the excerpt is erased text is not known,
    so recall fails (default ``on_failed="stop"``), inside its budget.
    """
    provider, recall, sessions = Recording(), InMemoryRecallStore(), IndexBlocked()
    runtime = recall_runtime(
        provider,
        recall,
        session_store=sessions,
        recall_limits=RecallLimits(max_latency_s=1.0),
        limits=RuntimeLimits(op_timeout_s=28.0, resident=ResidentLimits(max_groups=1)),
    )
    ahead = MessageGroup(7, (Message(Role.USER, SECRET),))
    try:
        with anyio.fail_after(30):
            await runtime.run(ANA, "s1", "Unrelated chatter.")
            receipt = ArchiveReceipt(7, ahead.digest, "ahead")
            await recall.index_groups(KEY, [ahead], [receipt], OpContext.with_timeout(10.0))
            sessions.gate = gate
            # 12 s: far past the 1 s budget and its grace, far below the 25 s the read blocks.
            with anyio.fail_after(12):
                run = await runtime.run(ANA, "s1", "What is my quince account password?")
    finally:
        gate.set()
        with anyio.fail_after(30):
            await runtime.aclose()
    assert run.status is RunStatus.STOPPED
    assert len(provider.requests) == 1  # the first run's: this one made no model call
    failed = [d.message for d in run.diagnostics if d.code == "recall_failed"]
    assert any("recall erasure check not started or cut" in m for m in failed), failed


class StaleText(MissedErasure, InMemoryRecallStore):
    """A real in-memory recall store as a stale replica: it missed the erasure; re-indexing keeps old text.

    Its ``erase`` never reaches it (it reports nothing held, so the erasure
    completes); indexing a group over a row it already has writes the new
    revision but keeps the row's old text (an upsert that updated only
    the metadata). So it answers with the erased group's text under the
    revision of the new session's group at that seq.
    """

    async def index_groups(self, key: SessionKey, groups: Any, receipts: Any, ctx: OpContext) -> Any:
        before = dict(self._sources)
        fresh = await super().index_groups(key, groups, receipts, ctx)
        for sid, old in before.items():
            new = self._sources.get(sid)
            if new is not None and new.revision != old.revision:
                self._sources[sid] = attrs.evolve(new, text=old.text, terms=old.terms)
        return fresh


async def test_an_excerpt_no_piece_of_its_group_is_hidden_when_the_session_was_erased_whole() -> None:
    """Text that is no piece of the archive's group is not vouched for either: after a whole erasure, hidden.

    The secret was group 2 of the erased session; the session id is used
    again and its new group 2 is indexed, the replica keeping the erased
    text under the new revision. The host continues on partial evidence.
    The excerpt is a contract violation (recall is ``partial``), and it
    must not reach the model: nothing vouches that it is not erased text.
    """
    provider, recall = Recording(), StaleText()
    runtime = recall_runtime(
        provider, recall, recall_policy=current_session_recall_policy(on_partial="continue")
    )
    try:
        with anyio.fail_after(30):
            await chatter(runtime, 4, secret_at=2)
            await erase_completely(runtime, EraseTarget.session("acme", "ana", "s1"))
            for i in range(4):
                await runtime.run(ANA, "s1", f"New chatter number {i}.")
            run = await runtime.run(ANA, "s1", "What is my quince account password?")
    finally:
        await runtime.aclose()
    assert run.status is RunStatus.COMPLETED
    hidden_with_a_note(run, provider, "group/acme/ana/s1/2")
    assert any("no piece of the group" in v for v in run.recall.violations)  # type: ignore[union-attr]


class Paused(InMemoryArchive):
    """A real in-memory archive shared by two runtimes (two processes), with two pauses the test drives.

    Armed, the next read waits (``at_read`` set) until ``erased`` is set;
    the next erase erases, sets ``erased`` and waits for ``release``: the
    erasure is then under way, its archive step done, not finished.
    """

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.at_read, self.erased, self.release = anyio.Event(), anyio.Event(), anyio.Event()
        self.blocking = True

    async def read_groups(self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        if self.armed:
            self.armed = False
            self.at_read.set()
            await self.erased.wait()
        return await super().read_groups(key, start_seq, max_groups, ctx)

    async def erase(self, target: Target, ctx: OpContext, **kw: Any) -> EraseReport:
        report = await super().erase(target, ctx, **kw)
        if self.blocking and not kw.get("dry_run", False):
            self.blocking = False
            self.erased.set()
            await self.release.wait()
        return report


class Missed(MissedErasure, InMemoryRecallStore):
    """A real in-memory recall store whose ``erase`` never reaches it (a stale replica)."""


async def test_an_excerpt_of_a_session_an_erasure_is_taking_now_is_hidden() -> None:
    """A run loaded before a session erasure began; the erasure removed its archived groups, not finished yet.

    Another process (a second runtime over the same stores) erases the
    session while the run reads its recalled groups back; the recall store
    missed the erasure. The archive no longer holds the group the secret
    was in, and no finished erasure covers the session yet: the erasure in
    ``pending`` says the excerpt may be erased text, so it is hidden.
    """
    provider, recall, archive, sessions = Recording(), Missed(), Paused(), InMemorySessionStore()
    runtime = recall_runtime(
        provider,
        recall,
        session_store=sessions,
        archive=archive,
        recall_limits=RecallLimits(max_latency_s=25.0),
    )
    other = recall_runtime(Recording(), recall, session_store=sessions, archive=archive)
    outcome: list[object] = []
    done = anyio.Event()

    async def probe() -> None:
        try:
            outcome.append(await runtime.run(ANA, "s1", "What is my quince account password?"))
        except Exception as exc:  # the commit is refused: the erasure is pending
            outcome.append(exc)
        done.set()

    async def erase() -> None:
        await other.erase(
            EraseTarget.session("acme", "ana", "s1"), reason="data-subject request", attestation=OPERATOR
        )

    try:
        with anyio.fail_after(30):
            await chatter(runtime, 4, secret_at=1)
            archive.armed = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(probe)
                await archive.at_read.wait()  # loaded and recalled; reading the groups back
                tg.start_soon(erase)
                await archive.erased.wait()  # the probe's read goes on now, the erasure pending
                await done.wait()
                archive.release.set()
    finally:
        archive.release.set()
        await runtime.aclose()
        await other.aclose()
    # The erasure under way also stops the run before its model call (docs/erasure.md): nothing of
    # the probe reaches the model; recall had already hidden the excerpt (its diagnostic says so).
    assert len(provider.requests) == 4, outcome
    (error,) = outcome
    assert isinstance(error, ErasedDuringRunError), error
    assert error.run_result is not None
    notes = [d.message for d in error.run_result.diagnostics if d.code == "recall_note"]
    assert any("hidden" in n and "group/acme/ana/s1/1" in n for n in notes), notes
