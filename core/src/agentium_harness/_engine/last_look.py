"""After a run's last model call, before its commit: the run fences' last look, and the commit fence.

The run fences (:mod:`.fact_fence`, :mod:`.document_run_fence`) look before
each later model call; a memory fact forgotten, or a host document deleted,
while the *last* call was under way meets no call after it, and the answer
made while it was gone would be committed as usual. So, once the turn (and
its verification) is done, :func:`commit_run`:

1. for a run carrying memory facts or document excerpts, looks at the
   erasure ledger as before a call, then reads the carried facts back once
   more (:meth:`.turn_fence.TurnFence.last`; a run carrying neither reads
   nothing): an erasure of the run's user or tenant stops it naming the erasure;
2. runs the commit fence (:func:`~.recall_turn.recall_before_commit`), from
   the run's recall usage with the document fence's looks counted
   (:meth:`.document_run_fence.DocumentFence.counted`); its validation of
   every included source is the documents' last look: a carried document
   it calls ``deleted`` or ``forbidden`` stops the run
   (:meth:`.document_run_fence.DocumentFence.at_commit`, no read of its
   own), before the recall policy's decision is acted on;
3. commits: the turn, or only what ran of it when the recall policy stopped it.

A stop here raises the error of a stop before a call
(:class:`~agentium_harness._errors_run.FactForgottenDuringRunError`,
:class:`~agentium_harness._errors_run.DocumentDeletedDuringRunError`, with
``before_commit``): the run's handler commits nothing of it
(:class:`~.effects.EffectsKeeper`), as for a stop between calls. A run
carrying neither facts nor documents pays two attribute reads for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._history import InterruptionCause
from .._ports.sessions import SessionSnapshot, StoredSnapshot
from .._scope import Scope
from .effects import EffectsKeeper
from .lifecycle import Ticket
from .recall_findings import RunFindings
from .recall_turn import RecallOutcome, RecallStep, recall_before_commit, uncommitted_result
from .results import RunResult, RunStatus
from .turn import TurnOutcome, executed
from .turn_commit import interruption

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = ["commit_run"]


async def commit_run(
    runtime: HarnessRuntime,
    ticket: Ticket,
    scope: Scope,
    keeper: EffectsKeeper,
    turn: TurnOutcome,
    step: RecallStep | None,
    stored: StoredSnapshot | None,
    snap: SessionSnapshot,
) -> RunResult:
    """Look once more at what the run carries, run the commit fence, and commit ``turn`` (or what ran)."""
    progress = keeper.progress
    diagnostics = progress.diagnostics
    progress.turn = turn
    diagnostics.extend(turn.diagnostics)
    fence = keeper.trace.fence
    if fence is not None and (fence.facts is not None or fence.documents is not None):
        # The ledger first, then the carried facts (an erasure of the user takes them too: the stop
        # names the erasure, not a forget); the documents' look is the commit fence's validation.
        await fence.last()
    if step is not None and progress.recall is not None and runtime.recall is not None:
        documents = None if fence is None else fence.documents
        before = progress.recall if documents is None else documents.counted(progress.recall)
        progress.recall, stop_run, fence_notes = await recall_before_commit(
            ticket,
            store=runtime.recall,
            scope=scope,
            limits=runtime.recall_limits,
            policy=runtime.recall_policy,
            outcome=before,
            # What the dispatch fence (or a look between calls) said already is not said again.
            findings=RunFindings(progress) if documents is None else documents.findings,
        )
        diagnostics.extend(fence_notes)
        if documents is not None:
            # The validations the commit fence added (it appends its own to recall's invalidated).
            documents.at_commit(progress.recall.invalidated[len(before.invalidated) :])
        if stop_run:
            if executed(turn):
                why = interruption(InterruptionCause.RECALL_STOPPED, _said(before, progress.recall))
                return await keeper.commit(turn, RunStatus.STOPPED, why)
            step = attrs.evolve(step, outcome=progress.recall)
            status = RunStatus.STOPPED
            stopped = uncommitted_result(scope, stored, snap, status, "", step, diagnostics)
            return attrs.evolve(stopped, tool_outcomes=turn.tool_outcomes, usage=turn.usage)
    return await keeper.commit(turn, turn.status)


def _said(before: RecallOutcome, after: RecallOutcome) -> str:
    """Why the commit fence stopped the turn, as its committed interruption says it: the engine's words.

    The lines the commit fence added to the uncertainty (``recall failed: recall validate_current
    failed: RuntimeError``), never the policy's reason: the default policy's quotes every problem
    whole (the store's error text, which may name another tenant's rows), and it is committed with
    what ran, where no other scope's id may end up. The reason stays the host's, in
    ``RunResult.recall.reason`` and the ``recall_stopped`` diagnostic.
    """
    added = after.uncertainty[len(before.uncertainty) :]
    return "; ".join(added) or f"recall {after.status.value} at the commit fence"
