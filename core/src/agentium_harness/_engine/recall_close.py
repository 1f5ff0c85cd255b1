"""Closing a recall session on every path, within its own bound and its caller's deadline (R11).

:func:`close` closes the session a recall round opened, shielded from the
round's cancellation and bounded by :data:`CLOSE_TIMEOUT_S`; when its caller's
deadline leaves less, the caller waits only what it leaves and the close runs
on detached (:class:`_Detached`). :func:`close_late` closes a session whose
``open`` landed after the round gave up on it. Every close that fails or
overruns is a WARNING on ``agentium.engine.recall`` and the event
``agentium.recall.close_failed`` (``error.type`` only): on the recall span it
ran under while its caller waits, on an ``agentium.recall.late_close`` span of
its own once nobody does.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel

from .._observe.spans import current_span_event, error_type, internal_span
from .._text import error_text
from .bounded import ABANDON_GRACE_S, SETTLE_ITERATIONS, Overrun, bounded, spawn
from .late_calls import LateCalls
from .loops import ThreadSafeEvent
from .recall_round import Round

__all__ = [
    "CLOSE_ABANDONED",
    "CLOSE_FAILED",
    "CLOSE_OVERRAN",
    "CLOSE_TIMEOUT_S",
    "LATE_CLOSE_SPAN",
    "close",
    "close_late",
]

_log = logging.getLogger("agentium.engine.recall")

#: How long closing a recall session may take; it runs shielded after a cancellation (its caller
#: waits no longer than its own deadline leaves: :func:`close`).
CLOSE_TIMEOUT_S = 0.1
#: How a note on a close that overran, or failed, begins: its kind. What follows varies from one
#: round to the next (the seconds its caller's deadline left, the store's error text).
CLOSE_OVERRAN, CLOSE_FAILED = "recall session close did not finish", "recall session close failed"
#: How a note on a close abandoned begins (it overran and did not stop when cancelled): a kind of its
#: own, not an overrun's, so a look that says it after one that overran is not taken for a repeat.
CLOSE_ABANDONED = "recall session close was abandoned"
#: The span of a close nobody waits for any more (its caller's span may have ended), when it fails.
LATE_CLOSE_SPAN = "agentium.recall.late_close"


async def close_late(session: object) -> None:
    """Close a session whose ``open`` returned after the run gave up on it: a failure is said, not raised.

    Nobody is left to tell (``bounded``'s release of a late result drops
    what escapes it), so a close that fails, or is cut short by the
    release's bound (:data:`~.bounded.LATE_CLEANUP_S`), is a WARNING on
    ``agentium.engine.recall`` and the event ``agentium.recall.close_failed``
    (``error.type`` only) on an ``agentium.recall.late_close`` span of its
    own (the open's ended when it was abandoned), which ends ERROR.
    """
    closer = getattr(session, "close", None)
    if closer is None:
        return
    with internal_span(LATE_CLOSE_SPAN, {"agentium.operation": "recall close"}) as span:
        try:
            await closer()
        except anyio.get_cancelled_exc_class() as exc:
            _log.warning("a recall session opened past its deadline was not closed: cut short")
            current_span_event("agentium.recall.close_failed", {"error.type": error_type(exc)})
            raise  # the span ends failed ``cancelled``
        except Exception as exc:
            # The class name escaped (``error_type``), as every record quoting one: it is the adapter's.
            _log.warning("a recall session opened past its deadline could not be closed: %s", error_type(exc))
            current_span_event("agentium.recall.close_failed", {"error.type": error_type(exc)})
            span.fail(error_type(exc), exc)


def _time_left(until: float) -> float:
    """What the caller's deadline ``until`` (``inf``: none) leaves now, never below zero."""
    return math.inf if until == math.inf else max(0.0, until - anyio.current_time())


class _Detached:
    """A recall session's close its caller may stop waiting for: it runs on, within its own bound.

    Cancelled at the caller's deadline, a close that awaits anything (a pooled
    connection given back) would be cut at its first await and what the session
    acquired left held; detached, it gets its :data:`CLOSE_TIMEOUT_S` (and the
    abandon grace) whoever waits for it. A close that fails or overruns after
    its caller left (or is cut short there, its loop ending: ``cancelled``) is
    a WARNING on ``agentium.engine.recall`` (its class, or ``timeout``: no
    content), there being no turn left to note it on, and the
    event ``agentium.recall.close_failed`` on an ``agentium.recall.late_close``
    span of its own (its caller's recall span may have ended), which ends
    ERROR, as a late-opened session's close does (:func:`close_late`).
    """

    __slots__ = ("closer", "ended", "failure", "finished", "left")

    def __init__(self, closer: Callable[[], Awaitable[None]]) -> None:
        self.closer = closer
        self.ended = anyio.Event()
        #: ``ended`` for any loop or thread: what the runtime's ``aclose()`` waits for (``LateCalls.trail``).
        self.finished = ThreadSafeEvent()
        self.failure: Exception | None = None
        self.left = False  # the caller stopped waiting: this close reports its own failure

    async def run(self) -> None:
        cut: BaseException | None = None
        try:
            await bounded(self.closer, CLOSE_TIMEOUT_S)  # a close blocked in a worker thread is abandoned
        except Exception as exc:  # Overrun too: said by the caller if it still waits, else below
            self.failure = exc
        except BaseException as exc:  # cancelled: its loop ended under it (asyncio.run returning)
            cut = exc
            raise
        finally:
            self.ended.set()  # no await from here on: ``left`` cannot change
            try:
                said = self.failure if self.failure is not None else cut
                if self.left and said is not None:  # cut short too: the session was not closed
                    self._said_late(said)
            finally:
                self.finished.set()  # after the report: an aclose() waiting for it returns with it said

    @staticmethod
    def _said_late(failure: BaseException) -> None:
        kind = "timeout" if isinstance(failure, Overrun) else error_type(failure)
        _log.warning("a recall session close left to finish past its caller's deadline failed: %s", kind)
        # Under the telemetry of the round that left it (its context was copied when it was spawned).
        with internal_span(LATE_CLOSE_SPAN, {"agentium.operation": "recall close"}) as span:
            span.event("agentium.recall.close_failed", {"error.type": kind})
            span.fail(kind, failure)


async def close(
    session: object, state: Round, until: float = math.inf, late: LateCalls | None = None
) -> None:
    """Close the recall session on every path, shielded from the run's cancellation and bounded.

    A close that fails, or does not finish within :data:`CLOSE_TIMEOUT_S`,
    is a ``recall_note`` on the turn (its text may quote the store's error),
    a WARNING on ``agentium.engine.recall`` and the event
    ``agentium.recall.close_failed`` on the recall span it ran under
    (``error.type`` only: the close's class name, or ``timeout``), as a
    late-opened session's close is (:func:`close_late`).

    ``until`` is the caller's effective deadline as the round began (``inf``:
    none), taken then because one that passed since reads as ``-inf`` (a
    cancelled scope). The close is shielded, so that deadline (the look after a
    cancelled model call, the keep's commit: their shares of ``close_timeout_s``)
    would not cut it: when it leaves less than the close's bound and grace, the
    caller waits only what it leaves, and the close runs on detached within its
    own bound (:class:`_Detached`), neither holding the caller past its deadline
    nor cut short by it. ``late`` (the operation's ``Ticket.late``) is told of it, so the
    runtime's ``aclose()`` waits for it before closing the adapters: it does not outlive the runtime.
    """
    closer = getattr(session, "close", None)
    if closer is None:
        return
    left = _time_left(until)
    if left < CLOSE_TIMEOUT_S + ABANDON_GRACE_S:
        await _close_detached(closer, state, left, late)
        return
    with anyio.CancelScope(shield=True):
        try:
            await bounded(closer, CLOSE_TIMEOUT_S)  # a close blocked in a worker thread is abandoned
        except Exception as exc:
            _said(state, exc)


async def _close_detached(
    closer: Callable[[], Awaitable[None]], state: Round, left: float, late: LateCalls | None
) -> None:
    """:func:`close` when its caller's deadline leaves only ``left`` seconds: waited for that long."""
    closing = _Detached(closer)
    if late is not None:
        # Its own bound (run: bounded, CLOSE_TIMEOUT_S and the grace to unwind), one more grace for
        # its task to be scheduled: past that it will not end, and aclose() waits no longer.
        late.trail(closing.finished, CLOSE_TIMEOUT_S + 2 * ABANDON_GRACE_S)
    spawn(closing.run)
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(left):
            await closing.ended.wait()
        # A few loop iterations, no time: a close that needs no wait ends in them (the caller's
        # deadline may have passed before the close's task ran at all).
        for _ in range(SETTLE_ITERATIONS):
            if closing.ended.is_set():
                break
            await anyio.lowlevel.cancel_shielded_checkpoint()
    if closing.ended.is_set():
        if closing.failure is not None:
            _said(state, closing.failure)
        return
    closing.left = True
    state.notes.append(
        f"{CLOSE_OVERRAN} within {left:.3g}s (its caller's deadline); "
        f"left to finish within {CLOSE_TIMEOUT_S}s"
    )
    _log.warning(
        "a recall session close did not finish within %.3gs (its caller's deadline); left to finish "
        "within %ss",
        left,
        CLOSE_TIMEOUT_S,
    )
    current_span_event("agentium.recall.close_failed", {"error.type": "timeout"})


def _said(state: Round, exc: Exception) -> None:
    """A close that failed or overran (:class:`Overrun`): a ``recall_note``, a WARNING, a span event."""
    if isinstance(exc, Overrun):
        gone = "; abandoned (it did not stop when cancelled)" if exc.abandoned else ""
        if exc.abandoned:
            state.notes.append(
                f"{CLOSE_ABANDONED}: it did not finish within {CLOSE_TIMEOUT_S}s nor stop when cancelled"
            )
        else:
            state.notes.append(f"{CLOSE_OVERRAN} within {CLOSE_TIMEOUT_S}s")
        _log.warning("a recall session close did not finish within %ss%s", CLOSE_TIMEOUT_S, gone)
        current_span_event("agentium.recall.close_failed", {"error.type": "timeout"})
        return
    state.notes.append(f"{CLOSE_FAILED}: {error_text(exc)}")
    _log.warning("a recall session could not be closed: %s", error_type(exc))
    current_span_event("agentium.recall.close_failed", {"error.type": error_type(exc)})
