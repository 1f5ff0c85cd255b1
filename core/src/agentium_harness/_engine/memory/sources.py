"""Memory in model requests: selected facts as labeled source blocks under a token budget (R38).

One stage for the harness turn and the :class:`~agentium_harness._engine.memory.agent.Agent`:
:func:`memory_blocks` asks the selection (the manager's, or the default over
a bare store) for facts, keeps only those that may be injected, renders each
as a ``SourceBlock(kind=SourceKind.MEMORY)`` and assembles them with the
same :func:`~agentium_harness._engine.sources.assemble_sources` as recall:
whole blocks in rank order, the rendered wrapper counted against the
budget, a block that does not fit omitted whole and reported. A failing
store or selection never fails the run: the stage reports it and injects
nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import attrs

from ..._errors import InvalidArgumentError, OperationTimeoutError
from ..._observe import spans as observe
from ..._observe.logs import log_diagnostics, one_line
from ..._observe.turn import diagnostic_events
from ..._ports._base import OpContext
from ..._ports.memory import MemoryScope, MemoryStore, StoredFact, check_at, check_limit, iso_utc
from ..._ports.provider import SourceBlock, SourceKind
from ..._scope import Scope
from ..._text import error_text
from ..._validators import exact_int, shown_number
from ..bounded import Overrun, bounded
from ..lifecycle import Ticket, abandonment
from ..results import Diagnostic, Severity
from ..sources import assemble_sources
from .selection import (
    MemorySelection,
    SelectionRequest,
    candidate_bound,
    checked_selection,
    recent_and_relevant,
)

if TYPE_CHECKING:
    # Only for the annotation: the manager imports this stage through the Agent.
    from .claims import HarnessClaims
    from .manager import MemoryManager

__all__ = [
    "MEMORY_SOURCE_PREFIX",
    "MemoryOmitted",
    "agent_memory_blocks",
    "harness_memory_blocks",
    "memory_block",
    "memory_blocks",
    "memory_diagnostics",
]

#: Source ids of memory blocks are ``memory/<fact id>``.
MEMORY_SOURCE_PREFIX = "memory/"


@attrs.frozen(slots=True)
class MemoryOmitted:
    """What the memory stage left out, and why.

    - ``over_budget``: fact ids selected but left out whole: their block did not fit the budget.
    - ``refused``: ``(fact id, why)`` for facts the selection returned that may not be injected.
    - ``problems``: a store or selection failure (nothing was injected then).
    """

    over_budget: tuple[str, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        """True if anything was left out or went wrong."""
        return bool(self.over_budget or self.refused or self.problems)


def memory_block(fact: StoredFact, rank: int) -> SourceBlock:
    """One fact as labeled source data: id, revision, validity, provenance and rank as attributes."""
    valid_until = fact.fact.valid_until
    provenance = ",".join(ref.label() for ref in fact.fact.provenance) or "none"
    return SourceBlock(
        SourceKind.MEMORY,
        MEMORY_SOURCE_PREFIX + fact.fact_id,
        fact.text,
        (
            ("revision", str(fact.revision)),
            ("valid-until", "open" if valid_until is None else iso_utc(valid_until)),
            ("provenance", provenance),
            ("rank", str(rank)),
        ),
    )


async def memory_blocks(
    source: MemoryManager | MemoryStore,
    selection: MemorySelection | None,
    scope: MemoryScope,
    query: str,
    budget_tokens: int,
    op: OpContext,
    *,
    limit: int | None = None,
    at: datetime | None = None,
) -> tuple[tuple[SourceBlock, ...], MemoryOmitted]:
    """The memory blocks for a request in ``scope``, within ``budget_tokens`` (wrappers included).

    ``source`` is a :class:`MemoryManager` (its selection, limits and
    forgotten set apply; ``selection`` overrides its selection when given)
    or a bare :class:`MemoryStore` (``selection`` or the default). ``op``
    bounds the selection call: past its deadline the call is cancelled, or
    abandoned if it does not stop (a store blocked in a worker thread), and
    reported in ``problems``. Returns the included blocks in rank order and
    what was omitted. An argument of the wrong type (a naive ``at`` included)
    is :class:`InvalidArgumentError`.
    """
    return await _memory_blocks(source, selection, scope, query, budget_tokens, op, limit=limit, at=at)


async def _select(chosen: MemorySelection, request: SelectionRequest, ticket: Ticket | None) -> object:
    """Run the selection under ``request.ctx``'s deadline; a call past it is walked away from (R10)."""
    op = request.ctx
    left = op.time_left()
    if left is None:
        return await chosen(request)  # an unbounded context: the caller bounds the call
    try:
        return await bounded(
            lambda: chosen(request), left, on_deadline=lambda: op.signal.cancel("deadline passed")
        )
    except Overrun as over:
        text = f"memory select did not finish within {left:.3g}s and was cancelled"
        if over.abandoned:
            text = abandonment("memory select", round(left, 3))
            if ticket is not None:
                ticket.abandoned.append(text)
        raise OperationTimeoutError(text, "memory select", left, abandoned=over.abandoned) from None


async def _memory_blocks(
    source: MemoryManager | MemoryStore,
    selection: MemorySelection | None,
    scope: MemoryScope,
    query: str,
    budget_tokens: int,
    op: OpContext,
    *,
    limit: int | None = None,
    at: datetime | None = None,
    ticket: Ticket | None = None,
    hidden: Callable[[str, int], bool] | None = None,
) -> tuple[tuple[SourceBlock, ...], MemoryOmitted]:
    budget = exact_int(budget_tokens)  # an int subclass as its number: its own comparisons are not trusted
    if budget is None or budget < 0:
        raise InvalidArgumentError(f"budget_tokens must be an int >= 0, got {shown_number(budget_tokens)}")
    budget_tokens = budget
    _check_arguments(source, selection, scope, query, op)
    checked = check_at(at)  # a naive ``at`` would be a bare TypeError comparing it with a fact's window
    when = checked if checked is not None else datetime.now(UTC)
    forgotten: frozenset[str] = frozenset()
    if not isinstance(source, MemoryStore):  # a MemoryManager
        store = source.store
        chosen = selection or source.selection
        bound = check_limit(limit if limit is not None else source.limits.max_injected_facts)
        forgotten = source.forgotten_ids
    else:
        store = source
        chosen = selection or recent_and_relevant
        bound = check_limit(limit if limit is not None else 8)
    if budget_tokens == 0:
        return (), MemoryOmitted()
    # Refused facts must not take the places of eligible ones ranked below them: the selection
    # is asked for more candidates than places, a bounded number (docs/memory.md).
    candidates = candidate_bound(bound)
    try:
        op.raise_if_expired("memory select")
        request = SelectionRequest(store, scope, query, bound, when, op, candidates)
        raw = await _select(chosen, request, ticket)
    except Exception as exc:
        return (), MemoryOmitted(problems=(f"memory selection failed: {error_text(exc)}",))
    kept, refused = checked_selection(raw, scope, bound, when, forgotten, hidden, candidates=candidates)
    blocks = [memory_block(fact, rank) for rank, fact in enumerate(kept, start=1)]
    assembly = assemble_sources(blocks, budget_tokens)
    over = tuple(sid[len(MEMORY_SOURCE_PREFIX) :] for sid in assembly.omitted)
    return assembly.included, MemoryOmitted(over_budget=over, refused=tuple(refused))


def _check_arguments(source: object, selection: object, scope: object, query: object, op: object) -> None:
    """``memory_blocks`` is public: each argument of the wrong type is :class:`InvalidArgumentError`."""
    from .manager import MemoryManager  # the manager imports this module (through the Agent)

    if not isinstance(source, MemoryManager | MemoryStore):
        raise InvalidArgumentError(
            f"source must be a MemoryManager or a MemoryStore, got {type(source).__name__}"
        )
    if selection is not None and not callable(selection):
        raise InvalidArgumentError(f"selection must be callable (or None), got {type(selection).__name__}")
    if not isinstance(scope, MemoryScope):
        raise InvalidArgumentError(f"scope must be a MemoryScope, got {type(scope).__name__}")
    if not isinstance(query, str):
        raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
    if not isinstance(op, OpContext):
        raise InvalidArgumentError(f"op must be an OpContext, got {type(op).__name__}")


def memory_diagnostics(omitted: MemoryOmitted) -> list[Diagnostic]:
    """What a run reports about its memory blocks: omissions, refusals and failures (warnings)."""
    notes: list[Diagnostic] = []
    if omitted.over_budget:
        notes.append(
            Diagnostic(
                "memory_omitted",
                f"{len(omitted.over_budget)} memory fact(s) left out whole: they did not fit the memory "
                "token budget (" + ", ".join(omitted.over_budget) + ")",
                Severity.WARNING,
            )
        )
    for fact_id, why in omitted.refused:
        notes.append(
            Diagnostic("memory_refused", f"memory fact {fact_id} not injected: {why}", Severity.WARNING)
        )
    for problem in omitted.problems:
        notes.append(Diagnostic("memory_failed", problem, Severity.WARNING))
    return notes


async def agent_memory_blocks(
    manager: MemoryManager, scope: MemoryScope, text: str, op: OpContext
) -> tuple[tuple[SourceBlock, ...], MemoryOmitted]:
    """The memory blocks of an :class:`~.agent.Agent` run, observed as a harness run's are.

    A ``search_memory`` span under the manager's telemetry, and what was
    left out (a failed selection above all) logged on ``agentium.engine.memory``
    as WARNINGs and added to that span as ``agentium.diagnostic`` events,
    their text only with content capture.
    """
    from .manager import telemetry_of  # the manager imports this module (through the Agent)

    settings = telemetry_of(manager)
    store = one_line(type(manager.store).__name__)  # the adapter's to choose, in a span: escaped
    with observe.using(settings, manager):
        with observe.operation("search_memory", "search_memory", **{"gen_ai.memory.store.id": store}) as span:
            blocks, omitted = await memory_blocks(
                manager, None, scope, text, manager.limits.injection_tokens, op
            )
            span.set("gen_ai.memory.record.count", len(blocks))
            span.set("agentium.memory.omitted", len(omitted.over_budget) + len(omitted.refused))
            span.content("gen_ai.memory.query.text", text)
            if omitted.problems:
                span.fail("memory_selection_failed")
            # What was left out is an event on the span as well as a WARNING, as a harness run's
            # diagnostics are on its turn's span (code and severity; the text only with content capture).
            notes = memory_diagnostics(omitted)
            if notes:
                diagnostic_events(span, observe.current_instruments(), settings, notes)
    log_diagnostics(notes, {}, capture_content=settings.capture_content)
    return blocks, omitted


async def harness_memory_blocks(
    manager: MemoryManager,
    ticket: Ticket,
    scope: Scope,
    user_input: str,
    claims: HarnessClaims,
    hidden: Callable[[str, int], bool] | None = None,
) -> tuple[tuple[SourceBlock, ...], list[Diagnostic]]:
    """The memory blocks of a harness run in ``scope``, with what was left out as diagnostics.

    ``hidden(session, seq)`` says which groups the run's session view hides
    (:func:`~agentium_harness._engine.history_view.memory_hidden`): a fact
    drawn from one of them is refused (``memory_refused``).
    """
    # The harness owns this session's canonical history: an agent extracting from it too is refused.
    # The runtime holds the claim (once per session, bounded, released when it closes).
    claims.claim(manager, scope.session_key)
    # The run's own deadline bounds the selection too: a store slower than either does not hold the run.
    timeout_s = min(manager.limits.op_timeout_s, ticket.op_timeout_s)
    store = one_line(type(manager.store).__name__)  # the adapter's to choose, in a span: escaped
    with observe.operation(
        "search_memory", "search_memory", metric_stage="memory", **{"gen_ai.memory.store.id": store}
    ) as span:
        blocks, omitted = await _memory_blocks(
            manager,
            None,
            MemoryScope.of_session(scope),
            user_input,
            manager.limits.injection_tokens,
            ticket.context(timeout_s),
            ticket=ticket,
            hidden=hidden,
        )
        span.set("gen_ai.memory.record.count", len(blocks))
        span.set("agentium.memory.omitted", len(omitted.over_budget) + len(omitted.refused))
        span.content("gen_ai.memory.query.text", user_input)
        if omitted.problems:
            span.fail("memory_selection_failed")
    return blocks, memory_diagnostics(omitted)
