"""What the late take-back of an abandoned document index finds is a WARNING and an event on its span.

An index call stuck in a worker thread is abandoned past its deadline; when
it lands, ``agentium.document.late_take_back`` runs the erasure fence's
second read itself and deletes the document if a covering erasure began
meanwhile. A delete that failed ended that span ERROR and nothing else:
``bounded``'s release of a late result swallowed the exception, so there
was no WARNING and no event, unlike ``agentium.memory.late_take_back``. Now
each degraded outcome (the delete failed, the erasures could not be read
again, the store answered no ref of the document) logs a WARNING on
``agentium.engine.recall``, is an event with ``agentium.document.write`` =
``late`` and ``error.type`` only, and ends the span ERROR with its
``error.type``; no document text, name or owner and no error message.

Only the stranded index call gets a short deadline; the fence's reads and
the late delete get 30 s (the fence is built here with its own timeout).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable

import anyio
import pytest
from _session_store_support import FailsAfterTheWrite
from _telemetry_support import SpanEnded, Telemetered
from _telemetry_support import outcome_events as _outcomes
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from test_document_late_index import ANA_DOC, OPERATOR, StuckIndex

from agentium_harness import (
    EraseTarget,
    HarnessRuntime,
    OperationTimeoutError,
    SourceOwner,
    create_harness_runtime,
)
from agentium_harness._engine import bounded
from agentium_harness._engine.document_fence import index_document_fenced
from agentium_harness._engine.erasure_fence import ErasureFence
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._engine.limits import RuntimeLimits
from agentium_harness._observe.spans import using
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, SourceRef, document_source_id

pytestmark = pytest.mark.anyio

GENEROUS = 30.0
TEXT = "the VPN certificate expires on March 3rd"
LATE = "agentium.document.late_take_back"
ALLOWED = {"agentium.document.write", "error.type"}


class LandsLate(StuckIndex):
    """``StuckIndex`` whose late answer and delete a test may spoil (``answer``, ``fail_delete``)."""

    def __init__(self) -> None:
        super().__init__()
        self.answer: object = None
        self.fail_delete = False
        self.delete_asked = threading.Event()
        self.delete_hangs = False

    async def index_document(
        self, owner: SourceOwner, doc_id: str, text: str, ctx: OpContext, *, title: str = ""
    ) -> SourceRef:
        ref = await super().index_document(owner, doc_id, text, ctx, title=title)
        return ref if self.answer is None else self.answer  # type: ignore[return-value]  # a broken store

    async def delete_document(self, owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        if self.fail_delete:
            self.delete_asked.set()
            raise OSError("disk gone: vpn.md")
        if self.delete_hangs:
            self.delete_asked.set()
            await anyio.sleep(GENEROUS)  # a cooperative call that would outlast the take-back's bound
        return await super().delete_document(owner, doc_id, ctx)


def _eraser(store: LandsLate, sessions: InMemorySessionStore) -> HarnessRuntime:
    """Another runtime on the same stores (another process): it cannot wait for the writer's stuck call."""
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        recall=store,
        limits=RuntimeLimits(op_timeout_s=GENEROUS),
    )


async def _lands_late(
    store: LandsLate,
    sessions: InMemorySessionStore,
    caplog: pytest.LogCaptureFixture,
    *,
    erase: bool = True,
    meanwhile: Callable[[], None] | None = None,
) -> tuple[Telemetered, ReadableSpan]:
    """Strand an index of ana's document, erase ana (``erase``), run ``meanwhile``, let it land: the span."""
    ended = SpanEnded(LATE)
    t = Telemetered(ended)
    fence = ErasureFence(sessions, GENEROUS)
    try:
        async with _eraser(store, sessions) as eraser:
            with anyio.fail_after(90):
                with using(t.telemetry().resolve()), pytest.raises(OperationTimeoutError) as info:
                    ticket = Ticket(None, "document index", GENEROUS)
                    await index_document_fenced(fence, ticket, store, ANA_DOC, "vpn.md", TEXT, timeout_s=0.3)
                assert info.value.abandoned  # still in its thread: the fence's second read never ran
                if erase:
                    target = EraseTarget.user("acme", "ana")
                    done = await eraser.erase(target, reason="DSR", attestation=OPERATOR)
                    assert done.tombstone is not None
                if meanwhile is not None:
                    meanwhile()
                with caplog.at_level(logging.WARNING, logger="agentium.engine.recall"):
                    store.release.set()
                    assert await anyio.to_thread.run_sync(store.landed.wait, GENEROUS)
                    assert await anyio.to_thread.run_sync(ended.ended.wait, GENEROUS), (
                        "no late take-back span"
                    )
    finally:
        store.release.set()  # no thread outlives the test blocked
    return t, t.one(LATE)


def _failed(span: ReadableSpan, kind: str) -> None:
    """``span`` ended ERROR with ``error.type`` = ``kind``, its ``exception`` event the type alone."""
    assert span.status.status_code is StatusCode.ERROR, span.status
    assert (span.attributes or {}).get("error.type") == kind
    said = [dict(e.attributes or {}) for e in span.events if e.name == "exception"]
    assert said == [{"exception.type": kind}], said  # no message: content capture is off


def _warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The late take-back's WARNINGs on ``agentium.engine.recall``."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "agentium.engine.recall"
        and r.levelno == logging.WARNING
        and "past its deadline" in r.getMessage()
    ]


def _private(t: Telemetered, warnings: list[str]) -> None:
    """No document text, name or owner, and no error message, on a span, a metric or the WARNINGs.

    Random hex ids are masked first, so a short string is not found in one by chance.
    """
    carried = re.sub(r"[0-9a-f]{16,}", "<id>", " ".join([*t.carried(), *warnings]))
    for text in (TEXT, "vpn.md", "disk gone", "acme", "'ana'"):
        assert text not in carried, text
    for _, _, attributes in t.events("agentium.document."):
        assert set(attributes) <= ALLOWED, attributes


async def test_a_late_take_back_whose_delete_failed_warns_and_is_an_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, sessions = LandsLate(), InMemorySessionStore()

    def spoil_the_delete() -> None:
        store.fail_delete = True  # after the erasure: its own clean-up of the store went through

    t, late = await _lands_late(store, sessions, caplog, meanwhile=spoil_the_delete)
    assert store.delete_asked.is_set()
    assert _outcomes(late) == [
        ("agentium.document.take_back_failed", {"agentium.document.write": "late", "error.type": "OSError"})
    ]
    _failed(late, "OSError")
    warnings = _warned(caplog)
    assert len(warnings) == 1 and "could not be taken back: OSError" in warnings[0], warnings
    _private(t, warnings)


async def test_a_late_take_back_that_could_not_read_the_erasures_warns_and_is_an_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, sessions = LandsLate(), FailsAfterTheWrite()

    def spoil_the_reads() -> None:
        sessions.fail = True

    t, late = await _lands_late(store, sessions, caplog, erase=False, meanwhile=spoil_the_reads)
    sessions.fail = False
    assert _outcomes(late) == [
        (
            "agentium.document.unconfirmed",
            {"agentium.document.write": "late", "error.type": "SessionStoreError"},
        )
    ]
    _failed(late, "SessionStoreError")
    warnings = _warned(caplog)
    assert len(warnings) == 1 and "not confirmed against erasures: SessionStoreError" in warnings[0], warnings
    _private(t, warnings)


async def test_a_late_answer_that_is_no_ref_of_the_document_is_refused_and_the_take_back_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, sessions = LandsLate(), InMemorySessionStore()
    store.answer = SourceRef(document_source_id(ANA_DOC, "other.md"), "r1")
    t, late = await _lands_late(store, sessions, caplog)
    assert _outcomes(late) == [
        (
            "agentium.document.late_answer_refused",
            {"agentium.document.write": "late", "error.type": "ContractViolationError"},
        ),
        ("agentium.document.taken_back", {"agentium.document.write": "late"}),
    ]
    _failed(late, "ContractViolationError")
    # Whatever the store answered, the document it indexed during the erasure was taken back.
    assert document_source_id(ANA_DOC, "vpn.md") not in store._sources
    warnings = _warned(caplog)
    assert len(warnings) == 2 and "no ref of it" in warnings[0] and "was taken back" in warnings[1], warnings
    _private(t, warnings)


async def test_a_late_take_back_that_deleted_the_document_ends_its_span_ok(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The shape the failures above are told apart from: one ``taken_back`` event, no ERROR."""
    store, sessions = LandsLate(), InMemorySessionStore()
    t, late = await _lands_late(store, sessions, caplog)
    assert _outcomes(late) == [("agentium.document.taken_back", {"agentium.document.write": "late"})]
    assert late.status.status_code is StatusCode.UNSET and "error.type" not in (late.attributes or {})
    assert t.child_of("agentium.recall.delete", late), "the take-back's delete is not under its span"
    assert document_source_id(ANA_DOC, "vpn.md") not in store._sources
    _private(t, _warned(caplog))


async def test_a_late_take_back_cut_short_by_its_bound_warns_and_is_an_event(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release of a late result is bounded: a delete still running then is cut short, and said so.

    The bound is shortened for this test alone: the take-back is the call meant to run out of time
    (its delete's own deadline is 30 s).
    """
    monkeypatch.setattr(bounded, "LATE_CLEANUP_S", 2.0)
    store, sessions = LandsLate(), InMemorySessionStore()

    def hang_the_delete() -> None:
        store.delete_hangs = True

    t, late = await _lands_late(store, sessions, caplog, meanwhile=hang_the_delete)
    assert store.delete_asked.is_set()
    assert _outcomes(late) == [
        ("agentium.document.take_back_failed", {"agentium.document.write": "late", "error.type": "cancelled"})
    ]
    assert late.status.status_code is StatusCode.ERROR
    assert (late.attributes or {}).get("error.type") == "cancelled"
    warnings = _warned(caplog)
    assert len(warnings) == 1 and "could not be taken back: cut short" in warnings[0], warnings
    _private(t, warnings)
