"""What the memory erasure fence finds is a span event on the write's own span, also for a host's call.

Every degraded outcome logs a WARNING and becomes a span event, with no
content (docs/observability.md). The fence's outcomes (a fact taken back,
a take-back that failed, a write not confirmed against erasures) were
WARNINGs only; and a host calling ``runtime.memory.remember`` outside a
turn had its ``create_memory`` span around the store call alone, ended
before the fence's second read: an event had no span to land on. The
write's span now covers its fence, and each outcome is an event on it
(a late write's, on ``agentium.memory.late_take_back``), carrying only
``agentium.memory.write`` and ``error.type``.

Scenarios from tests/core/test_memory_fence_take_back.py and
tests/core/test_memory_erasure_fence.py. Only the stranded call gets a
short deadline; every other call 30 s.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import anyio
import pytest
from _session_store_support import FailsAfterTheWrite
from _telemetry_support import SpanEnded, Telemetered
from _telemetry_support import outcome_events as _outcomes
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from test_memory_fence_take_back import (
    GENEROUS,
    OPERATOR,
    SCOPE,
    SESSION_B,
    Proposes,
    StallsOneLoad,
    StallsTheTakeBack,
    Store,
    _ref,
    _strand_a_correct,
)

from agentium_harness import (
    ErasureInProgressError,
    HarnessRuntime,
    MemoryDrainError,
    MemoryFact,
    MemoryLimits,
    MemoryManager,
    MemoryScope,
    RuntimeLimits,
    create_harness_runtime,
)
from agentium_harness._engine import bounded
from agentium_harness._engine.memory_fence import fence_memory
from agentium_harness._history import Message, Role
from agentium_harness._ports.memory import MemoryAck
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ALLOWED = {"agentium.memory.write", "error.type"}


def _runtime(facts: Store, sessions: InMemorySessionStore, t: Telemetered | None = None) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        memory=facts,
        limits=RuntimeLimits(op_timeout_s=GENEROUS),
        telemetry=None if t is None else t.telemetry(),
    )


def _events(t: Telemetered, prefix: str = "agentium.memory.") -> list[tuple[str, str, dict[str, Any]]]:
    return t.events(prefix)


def _private(t: Telemetered, *texts: str) -> None:
    """No fact text on any span or metric, and the events carry only their outcome attributes.

    Random hex ids (a fact id is ``m-`` and 32 of them) are masked first: one
    in about a thousand holds "4321" or "1234" by chance, which is no leak.
    """
    carried = re.sub(r"[0-9a-f]{16,}", "<id>", " ".join(t.carried()))
    for text in texts:
        assert text not in carried
    for _, _, attributes in _events(t):
        assert set(attributes) <= ALLOWED, attributes


async def _erase_b(operator: HarnessRuntime) -> None:
    assert (await operator.erase(SESSION_B, reason="DSR", attestation=OPERATOR)).tombstone


async def _remember_while_b_is_erased(
    store: Store, sessions: InMemorySessionStore, t: Telemetered, match: str
) -> None:
    """A host call remembers a fact from sB, erased before ``store`` answers: the write raises ``match``."""
    async with _runtime(store, sessions, t) as writer, _runtime(Store(), sessions) as operator:
        memory = writer.memory
        assert memory is not None
        store.before_write = lambda: _erase_b(operator)
        with anyio.fail_after(60), pytest.raises(ErasureInProgressError, match=match):
            await memory.remember(MemoryFact(SCOPE, "pin is 4321", provenance=[_ref("sB")]))


async def test_a_fact_taken_back_by_a_host_call_is_an_event_on_its_create_memory_span() -> None:
    """Outside a turn: session sB erased between the write's first fence read and the store's answer."""
    t, store, sessions = Telemetered(), Store(), InMemorySessionStore()
    await _remember_while_b_is_erased(store, sessions, t, "was not kept")
    assert store.forgot
    write = t.one("create_memory")  # one span for the write: the store call opens none of its own
    assert [e.name for e in write.events if e.name.startswith("agentium.")] == ["agentium.memory.taken_back"]
    assert _events(t) == [
        ("create_memory", "agentium.memory.taken_back", {"agentium.memory.write": "answered"})
    ]
    assert write.attributes is not None and write.attributes["error.type"] == "ErasureInProgressError"
    assert t.child_of("delete_memory", write), "the take-back's forget is not under the write's span"
    _private(t, "4321")


class FailsToForget(Store):
    """``Store`` whose ``forget`` fails (the fence's take-back cannot forget the fact)."""

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        self.forgot.append(fact_id)
        raise OSError("disk gone: pin is 4321")


async def test_a_take_back_that_failed_is_an_event_with_its_error_type() -> None:
    t, store, sessions = Telemetered(), FailsToForget(), InMemorySessionStore()
    await _remember_while_b_is_erased(store, sessions, t, "taking it back failed")
    assert _events(t) == [
        (
            "create_memory",
            "agentium.memory.take_back_failed",
            {"agentium.memory.write": "answered", "error.type": "MemoryStoreError"},
        )
    ]
    _private(t, "4321", "disk gone")


async def test_a_write_not_confirmed_against_erasures_is_an_event_on_a_managers_own_span(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A manager of the host's own (its ``Telemetry``): the second read fails, the write stands."""
    t, store, sessions = Telemetered(), Store(), FailsAfterTheWrite()
    manager = MemoryManager(store, telemetry=t.telemetry())
    fence_memory(manager, sessions, GENEROUS)

    async def fail_from_now() -> None:
        sessions.fail = True

    store.before_write = fail_from_now
    with caplog.at_level(logging.WARNING, logger="agentium.engine.memory"):
        ack = await manager.remember(MemoryFact(SCOPE, "pin is 4321"))
    assert ack.status == "stored" and "not confirmed against erasures" in caplog.text
    assert _events(t) == [
        (
            "create_memory",
            "agentium.memory.unconfirmed",
            {"agentium.memory.write": "answered", "error.type": "SessionStoreError"},
        )
    ]
    _private(t, "4321")


async def test_a_fact_taken_back_after_its_write_was_cancelled_is_an_event_on_the_write_span() -> None:
    """A drain cancels the extraction's write between the store's answer and the take-back's forget."""
    t, sessions = Telemetered(), StallsOneLoad()
    store = StallsTheTakeBack("forget", sessions)
    limits = MemoryLimits(op_timeout_s=GENEROUS, drain_timeout_s=GENEROUS, model_timeout_s=GENEROUS)
    memory = MemoryManager(store, extractor=Proposes(), limits=limits, telemetry=t.telemetry())
    writer = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        memory=memory,
        limits=RuntimeLimits(op_timeout_s=GENEROUS),
    )
    try:
        async with _runtime(Store(), sessions) as operator:
            store.before_write = lambda: _erase_b(operator)
            with anyio.fail_after(90):
                memory.extract_in_background(
                    SCOPE, (Message(Role.USER, "my pin is 4321"),), "ex 1", sources=[_ref("sB")]
                )
                await store.stalled.wait()
                with pytest.raises(MemoryDrainError):
                    await memory.drain(0, grace_s=GENEROUS)
    finally:
        await writer.aclose()
    assert store.forgot
    assert ("create_memory", "agentium.memory.taken_back", {"agentium.memory.write": "cancelled"}) in _events(
        t
    )
    _private(t, "4321")


def _failed(span: ReadableSpan, kind: str) -> None:
    """``span`` ended ERROR with ``error.type`` = ``kind``, its ``exception`` event the type alone."""
    assert span.status.status_code is StatusCode.ERROR, span.status
    assert (span.attributes or {}).get("error.type") == kind
    said = [dict(e.attributes or {}) for e in span.events if e.name == "exception"]
    assert said == [{"exception.type": kind}], said  # no message: content capture is off


async def test_a_late_write_taken_back_is_an_event_on_a_late_take_back_span() -> None:
    """A correct abandoned past its deadline lands after session sB was erased: the late check's span."""
    ended = SpanEnded("agentium.memory.late_take_back")
    t, sessions, facts = Telemetered(ended), InMemorySessionStore(), Store()
    try:
        async with _runtime(facts, sessions, t) as writer, _runtime(Store(), sessions) as operator:
            memory = writer.memory
            assert memory is not None
            target = await memory.remember(MemoryFact(SCOPE, "pin is 1234", provenance=[_ref("sA")]))
            with anyio.fail_after(90):
                await _strand_a_correct(writer, facts, target.fact_id)
                await _erase_b(operator)
                facts.release.set()
                assert await anyio.to_thread.run_sync(facts.ended.wait, GENEROUS)
                assert await anyio.to_thread.run_sync(ended.ended.wait, GENEROUS), "no late take-back span"
    finally:
        facts.release.set()  # no thread outlives the test blocked
    late = t.one("agentium.memory.late_take_back")
    assert [(e.name, dict(e.attributes or {})) for e in late.events] == [
        ("agentium.memory.taken_back", {"agentium.memory.write": "late"})
    ]
    assert late.status.status_code is StatusCode.UNSET and "error.type" not in (late.attributes or {})
    assert facts.forgot and t.child_of("delete_memory", late)
    _private(t, "4321", "1234")


async def test_a_late_answer_that_is_no_acknowledgment_is_an_event_on_the_late_span() -> None:
    """The stranded correct's late answer names another fact than the one corrected: refused, an event."""
    ended = SpanEnded("agentium.memory.late_take_back")
    t, sessions, facts = Telemetered(ended), InMemorySessionStore(), Store()
    try:
        async with _runtime(facts, sessions, t) as writer, _runtime(Store(), sessions) as operator:
            memory = writer.memory
            assert memory is not None
            target = await memory.remember(MemoryFact(SCOPE, "pin is 1234", provenance=[_ref("sA")]))
            other = await memory.remember(MemoryFact(SCOPE, "likes tea", provenance=[_ref("sA")]))
            with anyio.fail_after(90):
                await _strand_a_correct(writer, facts, target.fact_id)
                await _erase_b(operator)
                facts.answer_id = other.fact_id
                facts.release.set()
                assert await anyio.to_thread.run_sync(facts.ended.wait, GENEROUS)
                assert await anyio.to_thread.run_sync(ended.ended.wait, GENEROUS), "no late take-back span"
    finally:
        facts.release.set()
    late = t.one("agentium.memory.late_take_back")
    assert _outcomes(late) == [
        (
            "agentium.memory.late_answer_refused",
            {"agentium.memory.write": "late", "error.type": "ContractViolationError"},
        )
    ]
    _failed(late, "ContractViolationError")
    assert not facts.forgot
    _private(t, "4321", "1234", "tea")


async def test_a_late_take_back_whose_forget_failed_ends_its_span_in_error() -> None:
    """The stranded correct lands after sB was erased and the take-back's forget fails: an ERROR span.

    As ``agentium.document.late_take_back`` ends when its delete fails: the
    fact was not taken back, and ``error.type`` says what failed (the
    forget's typed error), with no content on the span.
    """
    ended = SpanEnded("agentium.memory.late_take_back")
    t, sessions, facts = Telemetered(ended), InMemorySessionStore(), FailsToForget()
    try:
        async with _runtime(facts, sessions, t) as writer, _runtime(Store(), sessions) as operator:
            memory = writer.memory
            assert memory is not None
            target = await memory.remember(MemoryFact(SCOPE, "pin is 1234", provenance=[_ref("sA")]))
            with anyio.fail_after(90):
                await _strand_a_correct(writer, facts, target.fact_id)
                await _erase_b(operator)
                facts.release.set()
                assert await anyio.to_thread.run_sync(facts.ended.wait, GENEROUS)
                assert await anyio.to_thread.run_sync(ended.ended.wait, GENEROUS), "no late take-back span"
    finally:
        facts.release.set()
    late = t.one("agentium.memory.late_take_back")
    assert _outcomes(late) == [
        (
            "agentium.memory.take_back_failed",
            {"agentium.memory.write": "late", "error.type": "MemoryStoreError"},
        )
    ]
    _failed(late, "MemoryStoreError")
    assert facts.forgot == [target.fact_id] and t.child_of("delete_memory", late)
    _private(t, "4321", "1234", "disk gone")


class HangsToForget(Store):
    """``Store`` whose ``forget`` runs (cooperatively) past the late take-back's bound."""

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        self.forgot.append(fact_id)
        await anyio.sleep(GENEROUS)
        return await super().forget(scope, fact_id, ctx)


async def test_a_late_take_back_cut_short_by_its_bound_warns_and_is_an_event(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release of a late result is bounded: a forget still running then is cut short, and said so.

    ``bounded``'s release swallowed the cancellation: the span ended ``cancelled`` with no event and
    no WARNING. The bound is shortened for this test alone (the take-back is meant to run out of
    time; the forget's own deadline is 30 s).
    """
    monkeypatch.setattr(bounded, "LATE_CLEANUP_S", 2.0)
    ended = SpanEnded("agentium.memory.late_take_back")
    t, sessions, facts = Telemetered(ended), InMemorySessionStore(), HangsToForget()
    try:
        async with _runtime(facts, sessions, t) as writer, _runtime(Store(), sessions) as operator:
            memory = writer.memory
            assert memory is not None
            target = await memory.remember(MemoryFact(SCOPE, "pin is 1234", provenance=[_ref("sA")]))
            with anyio.fail_after(90):
                await _strand_a_correct(writer, facts, target.fact_id)
                await _erase_b(operator)
                with caplog.at_level(logging.WARNING, logger="agentium.engine.memory"):
                    facts.release.set()
                    assert await anyio.to_thread.run_sync(facts.ended.wait, GENEROUS)
                    took_back = await anyio.to_thread.run_sync(ended.ended.wait, GENEROUS)
                    assert took_back, "no late take-back span"
    finally:
        facts.release.set()
    late = t.one("agentium.memory.late_take_back")
    assert _outcomes(late) == [
        ("agentium.memory.take_back_failed", {"agentium.memory.write": "late", "error.type": "cancelled"})
    ]
    assert late.status.status_code is StatusCode.ERROR
    assert (late.attributes or {}).get("error.type") == "cancelled"
    assert facts.forgot == [target.fact_id]
    said = [r.getMessage() for r in caplog.records if "past its deadline" in r.getMessage()]
    assert said == ["a fact written past its deadline could not be taken back: cut short"], said
    _private(t, "4321", "1234")
