"""A memory write's span says how the write ended: failed with its error type, and abandoned when it was.

The ``create_memory`` / ``update_memory`` / ``delete_memory`` span covers the
whole write (its erasure fence, owner check, store call and hooks'
broadcast: ``memory_fence.write_span``), so the store call inside opens no
span of its own. Two things the store call's own span used to say were lost
with that (docs/observability.md):

- a store refusing a ``remember`` (``MemoryRejectedError``, which
  ``remember_with_result`` turns into a ``rejected`` acknowledgment) left
  the span unset, as if the write had succeeded: it is failed with
  ``error.type`` ``MemoryRejectedError``, from a host's call and from a
  turn's extraction alike;
- a store call abandoned past its deadline (blocked in a worker thread)
  no longer carried ``agentium.call.abandoned``, as every other adapter
  call that did not stop does: the write's span carries it again (a
  listing's ``search_memory`` too, opened the same way), and only for its
  own store call: an abandoned owner check is marked on its own span.

Neither says anything of the fact or the refusal's reason. Only the call
meant to time out gets a short deadline; every other call 30 s.
"""

from __future__ import annotations

import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
import attrs
import pytest
from _telemetry_support import Telemetered
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from agentium_harness import (
    Agent,
    EraseTarget,
    ErasureInProgressError,
    HarnessRuntime,
    MemoryFact,
    MemoryLimits,
    MemoryManager,
    MemoryRejectedError,
    MemoryScope,
    OperationTimeoutError,
    OperatorAttestation,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._ports.memory import AckStatus, GroupRef, MemoryAck, StoredFact
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import EraseReport, OpContext

pytestmark = pytest.mark.anyio

SCOPE = MemoryScope("acme", "alice")
GENEROUS = 30.0
SHORT = 0.3
SECRET = "pin is 4321"
REASON = "no pins: 8765"
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), "request 42")


class Store(InMemoryMemoryStore):
    """An in-memory store the test steers: refuse the next write, or hold one in a thread."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = False
        #: The next call of this name blocks in a thread that ignores cancellation until ``release``.
        self.hold: str | None = None
        #: Run once after the next ``history`` read (the owner check): the test shortens the deadline.
        self.after_history: Callable[[], None] | None = None
        self.entered = threading.Event()
        self.release = threading.Event()
        self.ended = threading.Event()

    async def _held(self, name: str) -> None:
        if self.hold != name:
            return
        self.hold = None

        def blocked() -> None:
            self.entered.set()
            try:
                self.release.wait(60.0)
            finally:
                self.ended.set()

        await anyio.to_thread.run_sync(blocked)  # not cancellable: the engine abandons it

    async def _write(self, name: str, write: Callable[[], Awaitable[MemoryAck]]) -> MemoryAck:
        if self.refuse:
            self.refuse = False
            raise MemoryRejectedError(REASON)
        await self._held(name)
        return await write()

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        return await self._write("remember", lambda: super(Store, self).remember(fact, ctx))

    async def correct(
        self, scope: MemoryScope, fact_id: str, replacement: MemoryFact, ctx: OpContext
    ) -> MemoryAck:
        return await self._write(
            "correct", lambda: super(Store, self).correct(scope, fact_id, replacement, ctx)
        )

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        return await self._write("forget", lambda: super(Store, self).forget(scope, fact_id, ctx))

    async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> list[StoredFact]:
        await self._held("list")
        return list(await super().list_facts(scope, limit, ctx))

    async def history(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> list[StoredFact]:
        await self._held("history")
        revisions = list(await super().history(scope, fact_id, ctx))
        step, self.after_history = self.after_history, None
        if step is not None:
            step()
        return revisions


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    made = Store()
    try:
        yield made
    finally:
        made.release.set()  # no thread outlives the test blocked
        if made.entered.is_set():
            await anyio.to_thread.run_sync(made.ended.wait, GENEROUS)


def _runtime(store: Store, t: Telemetered) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=store,
        limits=RuntimeLimits(op_timeout_s=GENEROUS),
        telemetry=t.telemetry(),
    )


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _failed(span: ReadableSpan, kind: str) -> None:
    assert span.status.status_code is StatusCode.ERROR, (span.name, span.status)
    assert _attributes(span)["error.type"] == kind
    assert [dict(e.attributes or {}) for e in span.events if e.name == "exception"] == [
        {"exception.type": kind}
    ]


def _ok(span: ReadableSpan) -> None:
    assert span.status.status_code is not StatusCode.ERROR, (span.name, span.status)
    assert "error.type" not in _attributes(span) and "agentium.call.abandoned" not in _attributes(span)


def _private(t: Telemetered) -> None:
    """Neither the fact nor the refusal's reason on any span or metric (random hex ids masked first)."""
    carried = re.sub(r"[0-9a-f]{16,}", "<id>", " ".join(t.carried()))
    for text in ("4321", "8765", "no pins"):
        assert text not in carried


async def test_a_remember_the_store_refuses_fails_its_create_memory_span(store: Store) -> None:
    """A host's call on ``runtime.memory``: ``remember`` raises, ``remember_with_result`` answers rejected."""
    t = Telemetered()
    async with _runtime(store, t) as runtime:
        memory = runtime.memory
        assert memory is not None
        store.refuse = True
        with pytest.raises(MemoryRejectedError):
            await memory.remember(MemoryFact(SCOPE, SECRET))
        [refused] = t.named("create_memory")
        _failed(refused, "MemoryRejectedError")
        store.refuse = True
        ack = await memory.remember_with_result(MemoryFact(SCOPE, SECRET))
        assert ack.status is AckStatus.REJECTED and ack.reason == REASON
        [_, rejected] = t.named("create_memory")
        _failed(rejected, "MemoryRejectedError")
        stored = await memory.remember(MemoryFact(SCOPE, SECRET))
        assert stored.status is AckStatus.STORED
    [*_, kept] = t.named("create_memory")
    _ok(kept)
    failures = [
        dict(p.attributes).get("error.type")
        for p in t.metrics()["gen_ai.client.operation.duration"]
        if dict(p.attributes)["gen_ai.operation.name"] == "create_memory"
    ]
    assert sorted(failures, key=str) == ["MemoryRejectedError", None]
    _private(t)


class _Proposes:
    """An extractor proposing one fact of what the user said."""

    async def extract(self, scope: MemoryScope, messages: object, ctx: OpContext) -> list[MemoryFact]:
        return [MemoryFact(scope, SECRET)]


async def test_a_turns_extracted_fact_the_store_refuses_fails_its_create_memory_span(store: Store) -> None:
    """An ``Agent``'s turn extracts a fact and the store refuses it: skipped, and its span says so."""
    t = Telemetered()
    limits = MemoryLimits(op_timeout_s=GENEROUS, drain_timeout_s=GENEROUS, model_timeout_s=GENEROUS)
    manager = MemoryManager(store, extractor=_Proposes(), limits=limits, telemetry=t.telemetry())
    agent = Agent(ScriptedProvider(replies=["noted"], cycle=True), manager, SCOPE, op_timeout_s=GENEROUS)
    store.refuse = True
    with anyio.fail_after(90):
        reply = await agent.run(f"my {SECRET}")
        assert reply.extraction is not None
        await agent.close()
    assert agent.last_drain is not None and agent.last_drain.completed == (reply.extraction,)
    assert await store.list_facts(SCOPE, 10, OpContext.with_timeout(GENEROUS)) == []
    _failed(t.one("create_memory"), "MemoryRejectedError")
    _private(t)


async def _abandon(store: Store, memory: MemoryManager, operation: str) -> OperationTimeoutError:
    """``operation`` on a fact, its store call held past a short deadline (only that call's)."""
    target = await memory.remember(MemoryFact(SCOPE, "likes tea"))
    assert target.fact_id is not None
    generous = memory.limits

    def shorten() -> None:
        memory.limits = attrs.evolve(generous, op_timeout_s=SHORT)

    store.hold = operation
    with pytest.raises(OperationTimeoutError) as raised:
        if operation == "remember":
            shorten()  # a remember has no owner check: its store call is the manager's only call
            await memory.remember(MemoryFact(SCOPE, SECRET))
        elif operation == "list":
            shorten()  # a listing's one call
            await memory.list(SCOPE)
        elif operation == "correct":
            store.after_history = shorten  # the owner check ran under the generous deadline
            await memory.correct(SCOPE, target.fact_id, MemoryFact(SCOPE, SECRET))
        else:
            store.after_history = shorten
            await memory.forget(SCOPE, target.fact_id)
    memory.limits = generous
    assert raised.value.abandoned and store.entered.is_set() and not store.ended.is_set()
    return raised.value


@pytest.mark.parametrize(
    ("operation", "span_name"),
    [
        ("remember", "create_memory"),
        ("correct", "update_memory"),
        ("forget", "delete_memory"),
        ("list", "search_memory"),
    ],
)
async def test_a_write_whose_store_call_was_abandoned_says_so_on_its_span(
    store: Store, operation: str, span_name: str
) -> None:
    """A host's call on ``runtime.memory``: the store call blocks in a thread past its deadline."""
    t = Telemetered()
    async with _runtime(store, t) as runtime:
        memory = runtime.memory
        assert memory is not None
        with anyio.fail_after(90):
            await _abandon(store, memory, operation)
        store.release.set()
        assert await anyio.to_thread.run_sync(store.ended.wait, GENEROUS)
    *before, abandoned = t.named(span_name)
    _failed(abandoned, "OperationTimeoutError")
    assert _attributes(abandoned)["agentium.call.abandoned"] is True
    assert _attributes(abandoned)["agentium.operation"] == f"memory {operation}"
    for span in before:  # the remember the test wrote first (a list: none)
        _ok(span)
    for check in t.named(f"agentium.memory.{operation}.owner.check"):
        _ok(check)  # the owner check ran to its end: not it was abandoned
    assert [s.name for s in t.spans if "agentium.call.abandoned" in _attributes(s)] == [span_name]
    _private(t)


async def test_a_write_that_timed_out_but_stopped_is_not_marked_abandoned(store: Store) -> None:
    """A store call cancelled at its deadline that stops: failed, but nothing was left running."""
    t = Telemetered()
    manager = MemoryManager(store, limits=MemoryLimits(op_timeout_s=GENEROUS), telemetry=t.telemetry())
    target = await manager.remember(MemoryFact(SCOPE, "likes tea"))
    assert target.fact_id is not None

    async def sleeps(*_: object) -> MemoryAck:
        await anyio.sleep(GENEROUS * 3)  # cancellable: it stops at the deadline
        raise AssertionError("unreachable")

    store.correct = sleeps  # type: ignore[method-assign]
    store.after_history = lambda: setattr(manager, "limits", MemoryLimits(op_timeout_s=SHORT))
    with anyio.fail_after(90), pytest.raises(OperationTimeoutError) as raised:
        await manager.correct(SCOPE, target.fact_id, MemoryFact(SCOPE, SECRET))
    assert not raised.value.abandoned
    span = t.one("update_memory")
    _failed(span, "OperationTimeoutError")
    assert "agentium.call.abandoned" not in _attributes(span)
    _private(t)


async def test_an_abandoned_owner_check_is_marked_on_its_own_span_not_the_forgets(store: Store) -> None:
    """A forget's owner check (a ``history`` read) blocks past its deadline: its store call never ran."""
    t = Telemetered()
    manager = MemoryManager(store, limits=MemoryLimits(op_timeout_s=GENEROUS), telemetry=t.telemetry())
    target = await manager.remember(MemoryFact(SCOPE, SECRET))
    assert target.fact_id is not None
    store.hold = "history"
    manager.limits = MemoryLimits(op_timeout_s=SHORT)  # the owner check is the call meant to time out
    with anyio.fail_after(90), pytest.raises(OperationTimeoutError) as raised:
        await manager.forget(SCOPE, target.fact_id)
    assert raised.value.abandoned and raised.value.operation == "memory forget owner check"
    store.release.set()
    assert await anyio.to_thread.run_sync(store.ended.wait, GENEROUS)
    check = t.one("agentium.memory.forget.owner.check")
    _failed(check, "OperationTimeoutError")
    assert _attributes(check)["agentium.call.abandoned"] is True
    forget = t.one("delete_memory")  # around the owner check: failed by it, but its store call never ran
    _failed(forget, "OperationTimeoutError")
    assert "agentium.call.abandoned" not in _attributes(forget)
    _private(t)


class _HeldErase(InMemoryMemoryStore):
    """The operator's memory store: its erase waits for the test, so the erasure stays pending."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = anyio.Event()
        self.gate = anyio.Event()

    async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
        self.entered.set()
        await self.gate.wait()
        return await super().erase(target, ctx, **options)


@pytest.mark.parametrize(
    ("operation", "span_name"), [("remember", "create_memory"), ("correct", "update_memory")]
)
async def test_a_write_the_erasure_fence_refuses_before_the_store_call_fails_its_span(
    store: Store, operation: str, span_name: str
) -> None:
    """Session sB is being erased (another process's erasure, held): a write citing it is refused first."""
    t, sessions, held = Telemetered(), InMemorySessionStore(), _HeldErase()
    writer = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        memory=store,
        limits=RuntimeLimits(op_timeout_s=GENEROUS),
        telemetry=t.telemetry(),
    )
    operator = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        memory=held,
        limits=RuntimeLimits(op_timeout_s=GENEROUS),
    )
    cites_b = MemoryFact(SCOPE, SECRET, provenance=[GroupRef("sB", 0, "sha256:" + "a" * 64)])
    async with writer, operator, anyio.create_task_group() as tg:
        memory = writer.memory
        assert memory is not None
        target = await memory.remember(MemoryFact(SCOPE, "likes tea"))
        assert target.fact_id is not None
        session_b = EraseTarget.session("acme", "alice", "sB")
        tg.start_soon(lambda: operator.erase(session_b, reason="DSR", attestation=OPERATOR))
        with anyio.fail_after(90):
            await held.entered.wait()
            with pytest.raises(ErasureInProgressError, match="nothing was written"):
                if operation == "remember":
                    await memory.remember(cites_b)
                else:
                    await memory.correct(SCOPE, target.fact_id, cites_b)
            held.gate.set()
    _failed(t.named(span_name)[-1], "ErasureInProgressError")
    _private(t)
