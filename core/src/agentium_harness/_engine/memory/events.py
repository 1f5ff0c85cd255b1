"""The memory manager's lifecycle events: broadcast through ``agentium_memory_event``, failures isolated.

Each stored write (remember, correct, forget) and each drain is told to the
host's hooks (the plugin registry) in a bounded broadcast
(:func:`~.._engine.hooks.broadcast`); a hook that raises or times out does
not fail the call: it goes in the acknowledgment's (or the drain's)
``notes``, is a WARNING on ``agentium.engine.hooks``, and an
``agentium.diagnostic`` event on the span current while the hooks run (the
write's own span, which covers its broadcast; a drain's
``agentium.memory.drained``), as the runtime's hook failures are on a turn's.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..._observe import spans as observe
from ..._observe.logs import log_diagnostics
from ..._observe.settings import Resolved, Telemetry
from ..._ports.memory import AckStatus, MemoryAck, MemoryEvent, MemoryEventKind, MemoryScope
from ..hooks import HookBroadcaster, broadcast
from ..results import Diagnostic
from .work import DrainResult

__all__ = ["announce_write", "announce_drained", "log_hook_failures"]

#: The lifecycle hook every memory event is broadcast through.
HOOK = "agentium_memory_event"


async def announce_write(
    hooks: HookBroadcaster | None,
    kind: MemoryEventKind,
    ack: MemoryAck,
    scope: MemoryScope | None,
    timeout_s: float,
    telemetry: Resolved | None,
) -> MemoryAck:
    """Broadcast a stored write (bounded by ``timeout_s``): ``ack``, any hook failures in its ``notes``."""
    if hooks is None or ack.status is not AckStatus.STORED:
        return ack
    event = MemoryEvent(kind, scope, ack.fact_id, ack.revision)
    notes = await broadcast(hooks, HOOK, timeout_s, event=event)
    if not notes:
        return ack
    log_hook_failures(notes, telemetry)
    return attrs.evolve(ack, notes=ack.notes + tuple(d.message for d in notes))


async def announce_drained(
    hooks: HookBroadcaster | None, result: DrainResult, timeout_s: float, telemetry: Resolved | None
) -> DrainResult:
    """Broadcast the ``drained`` event (bounded by ``timeout_s``); hook failures go in ``notes``.

    ``telemetry``: the manager's own, where its span goes (``None``: a turn's, or the global providers).
    """
    if hooks is None:
        return result
    event = MemoryEvent(MemoryEventKind.DRAINED, None, detail=result.describe())
    # A span of its own: the drain's (``agentium.drain``) has ended, and a runtime's shutdown has none.
    with observe.using(telemetry), observe.internal_span("agentium.memory.drained"):
        notes = await broadcast(hooks, HOOK, timeout_s, event=event)
        log_hook_failures(notes, telemetry)
    return attrs.evolve(result, notes=tuple(d.message for d in notes)) if notes else result


def log_hook_failures(notes: Sequence[Diagnostic], telemetry: Resolved | None) -> None:
    """A hook that failed or timed out is a degraded outcome: a WARNING on ``agentium.engine.hooks``.

    Its text (it may quote the event) only with content capture, as for a run's diagnostics; the
    same for its ``agentium.diagnostic`` event on the span current (code and severity), counted in
    ``agentium.diagnostics``.
    """
    # Called where the manager's call records (its ``observe.using`` block): the settings under way
    # there, the calling runtime's inside its operation; else the manager's own, else the defaults.
    active = observe.live()
    chosen = active.settings if active is not None else telemetry
    capture = (chosen if chosen is not None else Telemetry().resolve()).capture_content
    log_diagnostics(notes, {}, capture_content=capture)
    for note in notes:
        counted = {"agentium.diagnostic.code": note.code, "agentium.diagnostic.severity": note.severity.value}
        said = {"agentium.diagnostic.message": note.message} if capture else {}
        observe.current_span_event("agentium.diagnostic", {**counted, **said})
        observe.record("diagnostics", 1, counted)
