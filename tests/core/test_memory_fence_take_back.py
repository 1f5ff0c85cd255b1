"""The memory fence takes back only the fact the refused write itself wrote, and also when it lands late.

The fence forgets a fact written while an erasure took its scope
(docs/erasure.md, step 3). What it forgets must be what the write stored:
a store answering ``duplicate`` wrote nothing (the fact it names is an
older one, whose provenance the erasure may not cover), and a late
``correct`` acknowledging another fact than the one asked about does not
make that other fact the erasure's. A write that lands after its manager
closed is still checked: the erasure that relied on the check has no one
else to take the fact back.

Two runtimes sharing one session store stand for two processes: the
operator's erasure cannot wait for the writer's calls. Only the stranded
call gets a short deadline; every other call 30 s.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import attrs
import pytest

from agentium_harness import (
    EraseTarget,
    ErasureInProgressError,
    HarnessRuntime,
    MemoryDrainError,
    MemoryFact,
    MemoryFactNotFoundError,
    MemoryLimits,
    MemoryManager,
    MemoryScope,
    OperationCancelledError,
    OperationTimeoutError,
    OperatorAttestation,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._history import Message, Role
from agentium_harness._ports.memory import FactStatus, GroupRef, MemoryAck
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import EraseReport, OpContext

pytestmark = pytest.mark.anyio

SCOPE = MemoryScope("acme", "alice")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), "request 42")
SESSION_B = EraseTarget.session("acme", "alice", "sB")
GENEROUS = 30.0
SHORT = 0.3


def _ref(session: str) -> GroupRef:
    return GroupRef(session, 0, "sha256:" + "a" * 64)


def fresh() -> OpContext:
    return OpContext.with_timeout(GENEROUS)


class Store(InMemoryMemoryStore):
    """A memory store the test can step into: before a write, or holding one in a thread."""

    def __init__(self) -> None:
        super().__init__()
        #: Awaited inside the next ``remember`` or ``correct`` before the store writes (then cleared).
        self.before_write: Callable[[], Awaitable[object]] | None = None
        #: When set, the next ``correct`` blocks in a thread that ignores cancellation until released.
        self.hold_correct = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.ended = threading.Event()
        #: A late ``correct``'s acknowledgment names this fact instead (a broken store), when set.
        self.answer_id: str | None = None
        self.forgot: list[str] = []
        self.forgetting = anyio.Event()

    async def _step_in(self) -> None:
        step, self.before_write = self.before_write, None
        if step is not None:
            await step()

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        await self._step_in()
        return await super().remember(fact, ctx)

    async def correct(
        self, scope: MemoryScope, fact_id: str, replacement: MemoryFact, ctx: OpContext
    ) -> MemoryAck:
        await self._step_in()
        if not self.hold_correct:
            return await super().correct(scope, fact_id, replacement, ctx)
        self.hold_correct = False

        def blocked() -> MemoryAck:
            self.entered.set()
            try:
                self.release.wait(60.0)
                ack = anyio.from_thread.run(
                    lambda: InMemoryMemoryStore.correct(self, scope, fact_id, replacement, fresh())
                )
                return ack if self.answer_id is None else attrs.evolve(ack, fact_id=self.answer_id)
            finally:
                self.ended.set()

        return await anyio.to_thread.run_sync(blocked)

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        self.forgot.append(fact_id)
        self.forgetting.set()
        return await super().forget(scope, fact_id, ctx)


def _runtime(store: Store, sessions: InMemorySessionStore) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        memory=store,
        limits=RuntimeLimits(op_timeout_s=GENEROUS),
    )


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    made = Store()
    try:
        yield made
    finally:
        made.release.set()  # no thread outlives the test blocked
        if made.entered.is_set():
            await anyio.to_thread.run_sync(made.ended.wait, GENEROUS)


async def _current(store: Store, fact_id: str) -> str:
    (*_, latest) = await store.history(SCOPE, fact_id, fresh())
    return latest.fact.text if latest.status is FactStatus.CURRENT else f"<{latest.status}>"


class HeldErase(Store):
    """A store whose ``erase`` waits for ``gate``: an erasure stays pending before its memory step."""

    def __init__(self) -> None:
        super().__init__()
        self.erasing, self.gate = anyio.Event(), anyio.Event()

    async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
        self.erasing.set()
        await self.gate.wait()
        return await super().erase(target, ctx, **options)


async def test_a_duplicate_answer_during_an_erasure_forgets_nothing_the_erasure_removes_itself() -> None:
    """``duplicate``: the write stored nothing; the fact it names is the pending erasure's to remove.

    A duplicate cites no group the fact does not (its new groups would be a
    revision: the next test), so a covering erasure covers the fact too.
    Answered while that erasure is pending, before its memory step, the
    write is refused and nothing is forgotten; the erasure then removes it.
    """
    store, sessions = HeldErase(), InMemorySessionStore()
    async with _runtime(store, sessions) as writer, _runtime(store, sessions) as operator:
        memory = writer.memory
        assert memory is not None
        kept = await memory.remember(MemoryFact(SCOPE, "likes tea", provenance=[_ref("sA"), _ref("sB")]))
        results: list[object] = []
        async with anyio.create_task_group() as tg:

            async def erase_b() -> None:
                results.append(await operator.erase(SESSION_B, reason="DSR", attestation=OPERATOR))

            async def start_erasing_b() -> None:
                # Session sB's erasure begins between the write's first fence read and the store's answer.
                tg.start_soon(erase_b)
                await store.erasing.wait()

            store.before_write = start_erasing_b
            with anyio.fail_after(60), pytest.raises(ErasureInProgressError, match="nothing was written"):
                await memory.correct(
                    SCOPE, kept.fact_id, MemoryFact(SCOPE, "likes tea", provenance=[_ref("sB")])
                )
            assert store.forgot == [], "the take-back forgot a fact the store answered duplicate for"
            assert await _current(store, kept.fact_id) == "likes tea"
            store.gate.set()
        [result] = results
        assert getattr(result, "tombstone", None) is not None
        with pytest.raises(MemoryFactNotFoundError):
            await store.history(SCOPE, kept.fact_id, fresh())


async def test_a_duplicate_adding_a_session_erased_meanwhile_is_taken_back_with_its_fact(
    store: Store,
) -> None:
    """A duplicate citing sB is the fact's next revision citing sA and sB: sB's erasure takes the fact.

    The duplicate's groups are kept (docs/memory.md), so the fact now names
    sB, as an erasure of sB that came after the write would have found it.
    """
    sessions = InMemorySessionStore()
    async with _runtime(store, sessions) as writer, _runtime(store, sessions) as operator:
        memory = writer.memory
        assert memory is not None
        kept = await memory.remember(MemoryFact(SCOPE, "likes tea", provenance=[_ref("sA")]))

        async def erase_b() -> None:
            assert (await operator.erase(SESSION_B, reason="DSR", attestation=OPERATOR)).tombstone

        store.before_write = erase_b
        with (
            anyio.fail_after(60),
            pytest.raises(ErasureInProgressError, match="was forgotten: it was not kept"),
        ):
            await memory.remember(MemoryFact(SCOPE, "likes tea", provenance=[_ref("sB")]))
        assert store.forgot == [kept.fact_id]
        assert await _current(store, kept.fact_id) == "<forgotten>"


async def _strand_a_correct(writer: HarnessRuntime, store: Store, fact_id: str) -> None:
    memory = writer.memory
    assert memory is not None
    generous = memory.limits
    memory.limits = attrs.evolve(generous, op_timeout_s=SHORT)
    store.hold_correct = True
    with pytest.raises(OperationTimeoutError) as raised:
        await memory.correct(SCOPE, fact_id, MemoryFact(SCOPE, "pin is 4321", provenance=[_ref("sB")]))
    memory.limits = generous
    assert raised.value.abandoned and store.entered.is_set() and not store.ended.is_set()


class _Said(logging.Handler):
    """Set once the memory fence logged (the landed call's take-back says what it did)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.said.set()


async def test_a_late_correct_acknowledging_another_fact_takes_back_no_other_fact(
    store: Store,
) -> None:
    said, log = _Said(), logging.getLogger("agentium.engine.memory")
    log.addHandler(said)
    sessions = InMemorySessionStore()
    async with _runtime(store, sessions) as writer, _runtime(store, sessions) as operator:
        memory = writer.memory
        assert memory is not None
        target = await memory.remember(MemoryFact(SCOPE, "pin is 1234", provenance=[_ref("sA")]))
        other = await memory.remember(MemoryFact(SCOPE, "likes tea", provenance=[_ref("sA")]))
        with anyio.fail_after(90):
            await _strand_a_correct(writer, store, target.fact_id)
            assert (await operator.erase(SESSION_B, reason="DSR", attestation=OPERATOR)).tombstone
            store.answer_id = other.fact_id  # the late ack names a fact the correction did not touch
            store.release.set()
            assert await anyio.to_thread.run_sync(store.ended.wait, GENEROUS)
            try:
                assert await anyio.to_thread.run_sync(said.said.wait, GENEROUS), "no take-back ran"
            finally:
                log.removeHandler(said)
        assert other.fact_id not in store.forgot, "the take-back forgot a fact the erasure does not cover"
        assert await _current(store, other.fact_id) == "likes tea"


async def test_a_late_correct_landing_after_its_manager_closed_is_still_taken_back(store: Store) -> None:
    sessions = InMemorySessionStore()
    writer = _runtime(store, sessions)
    async with _runtime(store, sessions) as operator:
        memory = writer.memory
        assert memory is not None
        target = await memory.remember(MemoryFact(SCOPE, "pin is 1234", provenance=[_ref("sA")]))
        with anyio.fail_after(90):
            await _strand_a_correct(writer, store, target.fact_id)
            assert (await operator.erase(SESSION_B, reason="DSR", attestation=OPERATOR)).tombstone
            await writer.aclose()  # the host is done with the writer; its store call is not
            assert memory.closed
            store.release.set()
            assert await anyio.to_thread.run_sync(store.ended.wait, GENEROUS)
            with anyio.move_on_after(GENEROUS):
                await store.forgetting.wait()
        revisions = await store.history(SCOPE, target.fact_id, fresh())
        assert all("4321" not in r.fact.text for r in revisions), "the erased session's fact outlived it"


class Honours(Store):
    """``Store`` honouring ``ctx.signal`` as the port asks, and holding the next ``remember`` in a thread."""

    hold_remember = False

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        if not self.hold_remember:
            return await super().remember(fact, ctx)
        self.hold_remember = False

        def blocked() -> MemoryAck:
            self.entered.set()
            try:
                self.release.wait(60.0)  # ignores the cancellation: abandoned, it lands late
                return anyio.from_thread.run(lambda: InMemoryMemoryStore.remember(self, fact, fresh()))
            finally:
                self.ended.set()

        return await anyio.to_thread.run_sync(blocked)

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        if ctx.signal.cancelled:  # the port: a cancelled call stops, writing nothing
            raise OperationCancelledError(f"memory forget stopped: {ctx.signal.reason}", ctx.signal.reason)
        return await super().forget(scope, fact_id, ctx)


class Proposes:
    """An extractor proposing one fact from the session an operator is about to erase."""

    async def extract(self, scope: MemoryScope, messages: object, ctx: OpContext) -> list[MemoryFact]:
        return [MemoryFact(scope, "pin is 4321", provenance=[_ref("sB")])]


async def test_a_late_write_of_drained_work_is_still_taken_back() -> None:
    """The drain's cancel signal of the work is not the take-back's: that runs after it, on purpose."""
    store = Honours()
    store.hold_remember = True
    sessions = InMemorySessionStore()
    limits = MemoryLimits(op_timeout_s=GENEROUS, drain_timeout_s=GENEROUS, model_timeout_s=GENEROUS)
    memory = MemoryManager(store, extractor=Proposes(), limits=limits)
    writer = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        memory=memory,
        limits=RuntimeLimits(op_timeout_s=GENEROUS),
    )
    said, log = _Said(), logging.getLogger("agentium.engine.memory")
    log.addHandler(said)
    try:
        async with _runtime(Store(), sessions) as operator:
            with anyio.fail_after(90):
                memory.extract_in_background(
                    SCOPE, (Message(Role.USER, "my pin is 4321"),), "ex 1", sources=[_ref("sB")]
                )
                assert await anyio.to_thread.run_sync(store.entered.wait, GENEROUS)
                assert (await operator.erase(SESSION_B, reason="DSR", attestation=OPERATOR)).tombstone
                with pytest.raises(MemoryDrainError):
                    await memory.drain(0.2, grace_s=SHORT)  # cancels the work: its write is abandoned
                store.release.set()  # the write lands after all, into the erased session's scope
                assert await anyio.to_thread.run_sync(store.ended.wait, GENEROUS)
                assert await anyio.to_thread.run_sync(said.said.wait, GENEROUS), "no take-back ran"
        facts = await store.list_facts(SCOPE, 100, fresh())
        assert store.forgot and all("4321" not in f.fact.text for f in facts), "the erased fact outlived it"
    finally:
        log.removeHandler(said)
        store.release.set()
        await writer.aclose()


class StallsTheTakeBack(Store):
    """``Store`` whose fence, once it answered a ``remember``, stalls until cancelled: at ``where``.

    ``forget``: the first ``forget`` (the fence's take-back) waits, before the store forgot anything;
    ``second read``: the fence's next read of the erasures under way (in ``sessions``) waits.
    """

    def __init__(self, where: str, sessions: StallsOneLoad) -> None:
        super().__init__()
        self.where = where
        self.sessions = sessions
        self.stalled = sessions.stalled if where == "second read" else anyio.Event()

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        ack = await super().remember(fact, ctx)
        self.sessions.stall_next = self.where == "second read"  # the next read is the fence's second
        return ack

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        if self.where == "forget" and not self.stalled.is_set():
            self.stalled.set()
            await anyio.sleep_forever()  # the drain's cancel arrives here, before the store forgot anything
        if ctx.signal.cancelled:  # the port: a cancelled call stops, writing nothing
            raise OperationCancelledError(f"memory forget stopped: {ctx.signal.reason}", ctx.signal.reason)
        return await super().forget(scope, fact_id, ctx)


class StallsOneLoad(InMemorySessionStore):
    """A session store whose next load, once asked (``stall_next``), waits until it is cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.stall_next = False
        self.stalled = anyio.Event()

    async def load(self, key: Any, ctx: OpContext) -> Any:
        if self.stall_next:
            self.stall_next = False
            self.stalled.set()
            await anyio.sleep_forever()
        return await super().load(key, ctx)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.parametrize("where", ["second read", "forget"])
async def test_a_drain_cancelling_the_work_between_the_answer_and_the_take_back_does_not_strand_the_fact(
    where: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The store answered ``stored`` into an erased session's scope; the drain cancels before the forget."""
    sessions = StallsOneLoad()
    store = StallsTheTakeBack(where, sessions)
    limits = MemoryLimits(op_timeout_s=GENEROUS, drain_timeout_s=GENEROUS, model_timeout_s=GENEROUS)
    memory = MemoryManager(store, extractor=Proposes(), limits=limits)
    writer = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        memory=memory,
        limits=RuntimeLimits(op_timeout_s=GENEROUS),
    )
    try:
        async with _runtime(Store(), sessions) as operator:

            async def erase_b() -> None:
                # Session sB is erased between the write's first fence read and the store's answer.
                assert (await operator.erase(SESSION_B, reason="DSR", attestation=OPERATOR)).tombstone

            store.before_write = erase_b
            with caplog.at_level(logging.WARNING, logger="agentium.engine.memory"), anyio.fail_after(90):
                memory.extract_in_background(
                    SCOPE, (Message(Role.USER, "my pin is 4321"),), "ex 1", sources=[_ref("sB")]
                )
                await store.stalled.wait()  # the store answered; the fence is at ``where``
                with pytest.raises(MemoryDrainError) as drained:
                    await memory.drain(0, grace_s=GENEROUS)  # cancels the work item at once
        assert drained.value.result.cancelled and not drained.value.result.still_running
        facts = await store.list_facts(SCOPE, 100, fresh())
        assert store.forgot and all("4321" not in f.fact.text for f in facts), "the erased fact outlived it"
        [written] = set(store.forgot)
        revisions = await store.history(SCOPE, written, fresh())
        assert revisions[-1].status is FactStatus.FORGOTTEN and all(
            "4321" not in r.fact.text for r in revisions
        )
        said = [r.getMessage() for r in caplog.records if r.name == "agentium.engine.memory"]
        assert any("was taken back" in m for m in said), said
        assert all("4321" not in m for m in said)
    finally:
        await writer.aclose()
