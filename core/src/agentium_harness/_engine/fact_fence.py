"""The forget fence before each later model call of a run: a memory fact forgotten since is not sent again.

A run injects memory facts into its request once (:mod:`.request`), and
every model call of the run — each tool round, a verification revision —
sends that request again. A plain ``forget`` of one of those facts by
another task (over the same manager) or another process (over the same
memory store) is not an erasure: the tenant's erasure ledger does not move
and :class:`~.turn_fence.TurnFence` never looks. This fence does, for the
facts the request carries and nothing else:

- a run whose request carries no memory fact makes none (no read, no cost);
- the first model call follows the memory selection at once (its read is
  the check), so only later calls look — and, once the run's last model
  call answered, :meth:`FactFence.last` looks once more before the commit
  (a forget during that call: no call follows it, and the answer made from
  the fact must not be committed);
- a later call reads each carried fact's revisions back (one bounded
  ``history`` read per fact, at most
  :data:`~agentium_harness._ports.memory.MAX_FACT_REVISIONS` revisions; the
  reads of one look share one ``op_timeout_s``: a slow store holds the run
  one deadline before a call, not one per fact).
  A fact whose latest revision is a tombstone, or that the store no longer
  has (erased), stops the run. A store that does not declare ``history``
  is not read: only forgets through the run's own manager are seen then
  (its ``forgotten_ids``), said in docs/erasure.md.
  A read that fails (or passes its deadline) fails the run before the
  call with the store's typed error (a fresh one of its class and message,
  caused by the store's: the object a store raised is never marked, as it
  may raise it again in another run): the fact is never sent unchecked.
  The tool calls that ran are committed without the answer
  (``step_failed``), the detail in the engine's words (the error by its
  class, which read of the look failed), never the store's text, which
  may name another tenant's facts; the error raised keeps it whole.

Stopping raises :class:`~agentium_harness._errors_run.FactForgottenDuringRunError`
(an :class:`ErasedDuringRunError`; ``before_commit`` after the last call)
before the call, or the commit, with a WARNING (no
content, no fact id) and the span event ``agentium.run.erased_during_run``:
the run commits nothing, as for an erasure (its replies and tool calls were
made from the fact and may restate it; docs/erasure.md says why the run is
stopped rather than the fact dropped from later requests).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from .._errors import AgentiumError
from .._errors_memory import MemoryFactNotFoundError, MemoryStoreError
from .._errors_run import STOPPED_BEFORE, STOPPED_BEFORE_LOG, FactForgottenDuringRunError
from .._observe.spans import current_span_event
from .._ports._base import OpContext
from .._ports.memory import FactStatus, MemoryScope, MemoryStore, StoredFact
from .._ports.provider import SourceBlock, SourceKind
from .._text import error_text
from .lifecycle import Ticket
from .memory.answers import checked_history
from .memory.sources import MEMORY_SOURCE_PREFIX
from .memory.sources_write import names_facts
from .results import CommitState

if TYPE_CHECKING:
    from .memory.manager import MemoryManager

__all__ = ["FactFence", "carried_facts"]

_log = logging.getLogger("agentium.engine")


def carried_facts(blocks: Sequence[SourceBlock]) -> tuple[str, ...]:
    """The ids of the memory facts among a request's source ``blocks`` (their ids: ``memory/<id>``)."""
    return tuple(
        block.source_id[len(MEMORY_SOURCE_PREFIX) :]
        for block in blocks
        if block.kind is SourceKind.MEMORY and block.source_id.startswith(MEMORY_SOURCE_PREFIX)
    )


class FactFence:
    """One run's look, before each later model call, at the memory facts its request carries."""

    __slots__ = ("calls", "fact_ids", "manager", "scope")

    def __init__(self, manager: MemoryManager, scope: MemoryScope, fact_ids: tuple[str, ...]) -> None:
        #: The run's memory manager (its store is read; its ``forgotten_ids`` without ``history``).
        self.manager = manager
        #: The run's memory scope: it owns every fact injected (``MemoryScope.sees`` implies ``owns``).
        self.scope = scope
        #: The ids of the facts the request carries, in its order.
        self.fact_ids = fact_ids
        #: Model calls checked so far: the first is not read (the selection just read the store).
        self.calls = 0

    async def check(self, ticket: Ticket, what: str = "run") -> None:
        """Raise :class:`FactForgottenDuringRunError` if a carried fact was forgotten since the selection."""
        self.calls += 1
        if self.calls == 1 or not self.fact_ids:
            return
        await self._look(ticket, what, False)

    async def last(self, ticket: Ticket, what: str = "run") -> None:
        """After the run's last model call, before its commit: the same look, whatever the calls before.

        A forget during that call is seen by no :meth:`check` (no call follows); the answer made from the
        fact would be committed.
        """
        if self.fact_ids:
            await self._look(ticket, what, True)

    async def _look(self, ticket: Ticket, what: str, before_commit: bool) -> None:
        manager, scope = self.manager, self.scope
        if not manager.capabilities.history:
            forgotten = manager.forgotten_ids
            for fact_id in self.fact_ids:
                if fact_id in forgotten:
                    raise _forgotten(fact_id, what, before_commit)
            return
        store = manager.store
        # One look is one operation: its reads share one op_timeout_s, not one each (up to
        # max_injected_facts of them, one after another, would hold the run that many deadlines).
        deadline = time.monotonic() + ticket.op_timeout_s
        for at, fact_id in enumerate(self.fact_ids, start=1):
            left = max(0.0, deadline - time.monotonic())
            try:
                raw = await ticket.call(
                    "memory forget fence", partial(_history, store, scope, fact_id), timeout_s=left
                )
                revisions = checked_history(raw, scope, fact_id, "memory forget fence")
            except MemoryFactNotFoundError:
                raise _forgotten(fact_id, what, before_commit) from None  # erased since: gone as well
            except AgentiumError as exc:
                # Never the store's own object: Ticket.call raised a fresh one of its class and message
                # (.store_errors), the engine's to mark; a store may raise one object again, in another
                # run (another tenant's) that would take the marks for its own.
                raise _unread(exc, exc, at, len(self.fact_ids), what, before_commit) from exc.__cause__
            except Exception as exc:  # a store's foreign exception reaches the host typed
                error = MemoryStoreError(
                    f"memory forget fence: the store's history read failed: {error_text(exc)}; the {what} "
                    f"stopped before {STOPPED_BEFORE[before_commit]}"
                )
                raise _unread(error, exc, at, len(self.fact_ids), what, before_commit) from exc
            if not revisions or revisions[-1].status is FactStatus.FORGOTTEN:
                raise _forgotten(fact_id, what, before_commit)


async def _history(
    store: MemoryStore, scope: MemoryScope, fact_id: str, ctx: OpContext
) -> Sequence[StoredFact]:
    return await store.history(scope, fact_id, ctx)


def _unread(
    error: AgentiumError, cause: BaseException, at: int, of: int, what: str, before_commit: bool
) -> AgentiumError:
    """``error`` (the look's failure, raised whole to the host) with the words it is committed in.

    What ran is committed without the answer (``step_failed``), and its
    ``retained.interruption.detail`` says why in the engine's words: the
    failure by its class (``cause``'s, the store's own exception), and which
    read of the look it was, never the store's text, which may name
    another tenant's facts (as a recall store's error is committed:
    :func:`.turn_commit.committed_text`).
    """
    error.committed_detail = (
        f"{type(error).__name__}: memory forget fence: the store's history read of carried fact {at} of "
        f"{of} failed ({type(cause).__name__}); the {what} stopped before {STOPPED_BEFORE[before_commit]}"
    )
    return error


def _forgotten(fact_id: str, what: str, before_commit: bool) -> FactForgottenDuringRunError:
    """The stop for carried fact ``fact_id`` forgotten since the run's selection: a WARNING, a span event.

    ``before_commit``: seen after the run's last model call (it was forgotten during it), not before one.
    """
    _log.warning(
        "%s stopped before %s: a memory fact its request carries was forgotten after the run "
        "injected it; nothing was sent again or committed",
        what,
        STOPPED_BEFORE_LOG[before_commit],
        extra={"agentium_operation": what, "agentium_commit_state": "not_committed"},
    )
    current_span_event("agentium.run.erased_during_run", {"agentium.erasure.state": "forgotten"})
    sent = "so what was made from it was not committed" if before_commit else "so the fact was not sent again"
    named = f"memory fact {fact_id!r}" if names_facts() else "a memory fact"  # its fact_id names it
    error = FactForgottenDuringRunError(
        f"{named}, which the {what}'s request carries, was forgotten after the {what} "
        f"injected it; the {what} stopped before {STOPPED_BEFORE[before_commit]}, {sent}; "
        "nothing was committed (what ran was made from it)",
        fact_id,
    )
    error.before_commit = before_commit
    error.commit_state = CommitState.NOT_COMMITTED
    return error
