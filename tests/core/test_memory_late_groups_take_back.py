"""A fact write abandoned past its deadline that lands after a groups erasure of its sources is taken back.

The late take-back (``memory_fence.late_take_back``) used to judge the fact
by the fact rule alone (``EraseTarget.covers_fact``): a groups erasure
(``forget(..., erase_sources=True)``, retention) takes no fact, so a fact
derived from groups erased while its write was stuck in a worker thread
survived, citing the erased group. An extraction's own check after its
writes never sees such a fact (its write timed out). Now the late check
also counts an erasure of a group the fact cites, begun since the write's
first read; a fact citing another group stays.

Another process (a runtime on a thread and loop of its own, on the same
SQLite file) runs the forget: it cannot wait for the writer's call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

from agentium_harness import (
    ErasureState,
    GroupRef,
    HarnessRuntime,
    MemoryFact,
    MemoryLimits,
    MemoryManager,
    MemoryScope,
    OperationTimeoutError,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    Telemetry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import MemoryAck, OpContext
from agentium_harness.testing import SpanRecorder

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
IDENTITY = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-1")
KEY = SessionKey("acme", "ana", "s1")
GENEROUS = 30.0
SHORT = 0.3


class HeldStore(SQLiteMemoryStore):
    """A SQLite memory store whose next ``remember``, once ``hold`` is set, waits in a thread until released.

    The thread ignores cancellation: past the manager's deadline the call is
    abandoned, and its write lands when ``release`` is set.
    """

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.hold = False
        self.entered, self.release, self.ended = threading.Event(), threading.Event(), threading.Event()

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        if not self.hold:
            return await super().remember(fact, ctx)
        self.hold = False

        async def land() -> MemoryAck:
            # On trio the thread's calls run in the abandoned call's task, cancelled at its deadline:
            # shielded, the write lands as a store's thread would finish it.
            with anyio.CancelScope(shield=True):
                return await SQLiteMemoryStore.remember(self, fact, OpContext.with_timeout(GENEROUS))

        def blocked() -> MemoryAck:
            self.entered.set()
            try:
                self.release.wait(60.0)
                return anyio.from_thread.run(land)
            finally:
                self.ended.set()

        return await anyio.to_thread.run_sync(blocked)


def _runtime(db: Path, memory: Any, **options: Any) -> HarnessRuntime:
    config = SQLiteConfig(path=str(db))
    archive, sessions = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=sessions,
        memory=memory,
        owned=(archive, sessions),
        **options,
    )


def _in_other_process(db: Path, call: Callable[[HarnessRuntime], Awaitable[Any]]) -> Any:
    """``call`` on another process's runtime, to completion, on a thread and loop of its own."""
    results: list[Any] = []

    async def other() -> None:
        config = SQLiteConfig(path=str(db))
        archive, sessions, store = (
            SQLiteArchive(config),
            SQLiteSessionStore(config),
            SQLiteMemoryStore(config),
        )
        async with create_harness_runtime(
            provider=ScriptedProvider(replies=["noted"], cycle=True),
            archive=archive,
            session_store=sessions,
            memory=store,
            owned=(archive, sessions, store),
        ) as runtime:
            results.append(await call(runtime))

    thread = threading.Thread(target=anyio.run, args=(other,))
    thread.start()
    thread.join(GENEROUS)
    assert not thread.is_alive()
    return results[0]


def _late_spans(recorder: SpanRecorder) -> list[Any]:
    return [s for s in recorder.finished if s.name == "agentium.memory.late_take_back"]


@pytest.mark.parametrize("cites", [0, 1])
async def test_a_late_fact_citing_a_group_erased_since_its_write_began_is_taken_back(
    cites: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The write of a fact citing group ``cites`` is stuck past its deadline; a forget erases group 0.

    ``cites=0``: the fact lands citing the erased group and is taken back
    (WARNING, span event). ``cites=1``: the group it cites was not erased; it stays.
    """
    db, recorder = tmp_path / "agentium.db", SpanRecorder()
    store = HeldStore(SQLiteConfig(path=str(db)))
    generous = MemoryLimits(op_timeout_s=GENEROUS, drain_timeout_s=GENEROUS, model_timeout_s=GENEROUS)
    manager = MemoryManager(
        store, limits=generous, owns_store=True, telemetry=Telemetry(tracer_provider=recorder.provider)
    )
    runtime = _runtime(db, manager, limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)))
    try:
        with anyio.fail_after(GENEROUS):
            await runtime.run(IDENTITY, "s1", "My vault code is 4471. Remember the vault code.")
            await runtime.run(IDENTITY, "s1", "The weather is fine today.")
            await runtime.run(IDENTITY, "s1", "Tell me about the weather again.")
            archive = SQLiteArchive(SQLiteConfig(path=str(db)))
            groups = list(await archive.read_groups(KEY, 0, 2, OpContext()))
            await archive.aclose()
            first = await manager.remember(
                MemoryFact(ANA, "ana's vault code is 4471", provenance=[GroupRef("s1", 0, groups[0].digest)])
            )
            assert first.fact_id is not None

            # The host writes a fact derived from group ``cites``; the store call is stuck past its deadline.
            manager.limits = MemoryLimits(
                op_timeout_s=SHORT, drain_timeout_s=GENEROUS, model_timeout_s=GENEROUS
            )
            store.hold = True
            derived = MemoryFact(
                ANA, "ana keeps her vault code 4471", provenance=[GroupRef("s1", cites, groups[cites].digest)]
            )
            with pytest.raises(OperationTimeoutError) as timed_out:
                await manager.remember(derived)
            assert timed_out.value.abandoned
            manager.limits = generous

            # Meanwhile another process forgets the first fact and erases its source, group 0, to completion.
            async def forget(other: HarnessRuntime) -> Any:
                return await other.forget(
                    ANA, first.fact_id or "", erase_sources=True, reason="dsr", attestation=OPERATOR
                )

            forgotten = _in_other_process(db, forget)
            assert [e.record.state for e in forgotten.erasures] == [ErasureState.COMPLETE]

            # The stuck write lands now; the late check runs on the writer's loop.
            with caplog.at_level(logging.WARNING, "agentium.engine.memory"):
                store.release.set()
                assert await anyio.to_thread.run_sync(store.ended.wait, GENEROUS)
                while not _late_spans(recorder):  # noqa: ASYNC110 - a span has no event; fail_after bounds it
                    await anyio.sleep(0.01)
            [late] = _late_spans(recorder)
            events = [e.name for e in late.events]
            listed = await manager.list(ANA)
            if cites == 0:
                cited = [(ref.session, ref.seq) for f in listed for ref in f.fact.provenance]
                assert listed == (), f"the late fact survived, citing erased groups {cited}"
                assert "agentium.memory.taken_back" in events
                assert any("was taken back" in r.getMessage() for r in caplog.records)
            else:
                assert [f.text for f in listed] == ["ana keeps her vault code 4471"]
                assert "agentium.memory.taken_back" not in events
                assert not any("taken back" in r.getMessage() for r in caplog.records)
            assert not [r for r in caplog.records if "4471" in r.getMessage()]  # no content in the log
    finally:
        store.release.set()
        await runtime.aclose()
        await manager.aclose()
