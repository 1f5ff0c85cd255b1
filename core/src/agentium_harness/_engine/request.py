"""Step 4 of a turn: the source data of the model request, assembled whole under its budgets.

In the request's order: the task summary (with its citations and coverage),
the recalled evidence, the memory blocks, then the host's own sources, each
block whole or omitted (recorded as ``source_omitted``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._observe import spans as observe
from .._ports.provider import SourceBlock
from .._ports.sessions import SessionSnapshot
from .._ports.summary import SummaryState
from .._scope import Scope
from .history_view import memory_hidden
from .lifecycle import Ticket
from .memory.sources import harness_memory_blocks
from .results import Diagnostic, Severity
from .sources import SourceAssembly, assemble_sources
from .summary import summary_block
from .summary_view import visible_summary

if TYPE_CHECKING:
    from .recall_turn import RecallStep
    from .runtime import HarnessRuntime

__all__ = ["RequestSources", "assemble_request"]


@attrs.frozen(slots=True)
class RequestSources:
    """The sources of a turn's request: ``blocks`` in order, and what they were built from."""

    blocks: tuple[SourceBlock, ...]
    #: The session's summary state when summaries are configured (``None`` otherwise).
    summary: SummaryState | None
    #: The summary as it went into the request (``None`` when it had no text yet).
    in_request: SummaryState | None
    #: The host sources' assembly (what was included and omitted).
    assembly: SourceAssembly


async def assemble_request(
    runtime: HarnessRuntime,
    ticket: Ticket,
    scope: Scope,
    snap: SessionSnapshot,
    offered: tuple[SourceBlock, ...],
    step: RecallStep | None,
    user_input: str,
    diagnostics: list[Diagnostic],
) -> RequestSources:
    """Assemble the request's source data; omissions and memory notes go to ``diagnostics``."""
    with observe.stage("request") as span:
        summary = snap.summary if runtime.summarizer is not None else None
        # A summary citing groups out of the view may state them: withheld (the update restarts it).
        shown, stale = visible_summary(summary, snap.view, snap.boundary)
        if stale:
            diagnostics.append(
                Diagnostic(
                    "summary_withheld",
                    "the task summary cites (or may state) groups no longer in the session's view and was "
                    "left out of the request; the next summary update starts it again",
                    Severity.WARNING,
                )
            )
        in_request = shown if shown is not None and shown.summary.text else None
        # After a view reset the summary's coverage says what came before was cleared.
        view_start = snap.view.start if snap.view is not None else 0
        summary_sources = (
            (summary_block(scope.session_key, in_request, view_start),) if in_request is not None else ()
        )
        assembly = assemble_sources(offered, runtime.limits.source_tokens)
        for source_id in assembly.omitted:
            diagnostics.append(
                Diagnostic(
                    "source_omitted",
                    f"source {source_id!r} did not fit the source budget whole and was omitted",
                    Severity.WARNING,
                )
            )
        memory_sources: tuple[SourceBlock, ...] = ()
        if runtime.memory is not None:
            memory = runtime.memory
            memory_sources, memory_notes = await harness_memory_blocks(
                memory,
                ticket,
                scope,
                user_input,
                runtime.parts.claims,
                # A fact drawn from a group the view hides stays out, as that group's recall does.
                hidden=memory_hidden(scope.session_key, snap.view),
            )
            diagnostics.extend(memory_notes)
        recalled = step.blocks if step is not None else ()
        blocks = (*summary_sources, *recalled, *memory_sources, *assembly.included)
        span.set("agentium.request.blocks", len(blocks))
        span.set("agentium.sources.omitted", len(assembly.omitted))
        return RequestSources(blocks, summary, in_request, assembly)
