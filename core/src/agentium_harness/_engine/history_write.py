"""Writing history without a model: ``append``, ``retract`` and ``reset_view``.

Each is one admitted operation on the session (like a run: one at a time,
refused while closing), loads and checks the snapshot like a run, and
commits one group through the one commit path
(:func:`.turn_commit.commit_group`): archive what is over the resident
bound, check every receipt, save with compare-and-set, index the archived
groups for recall, update the summary. ``append`` commits the host's
messages as a group; ``retract`` and ``reset_view`` commit a control group
and move the view (:mod:`.history_view`) in the same save. Nothing is ever
deleted.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from .._errors import (
    ArchiveCorruptError,
    LegacySnapshotError,
    RetractionLimitError,
    RetractionRefusedError,
    SessionConflictError,
    SessionDivergedError,
)
from .._history import (
    ControlKind,
    HistoryControl,
    Message,
    MessageGroup,
    MessageRef,
    RetainedRecord,
    ViewState,
    appended_group,
    detached_message,
    new_write_id,
)
from .._ports.summary import SummaryState, text_reach
from .._scope import Scope
from . import history_checks
from .history_checks import check_group_size
from .history_read import fetch_groups, same_snapshot
from .history_records import AppendResult, ResetResult, RetractResult
from .history_view import ViewIndex, after_reset, after_retraction
from .lifecycle import Ticket
from .load import load_session
from .progress import RunProgress
from .read_fence import refuse_if_erased_since_read
from .results import CommitState, Diagnostic, Severity
from .summary_view import restarted
from .turn_commit import GroupCommit, commit_group, settle_earlier

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = ["append_group", "reset_session_view", "retract_messages"]

#: Groups read per archive round trip while looking for the messages a retraction takes.
_RETRACT_CHUNK = 256


async def _load(
    runtime: HarnessRuntime,
    ticket: Ticket,
    progress: RunProgress,
    scope: Scope,
    *,
    stored_scope: bool,
    expected_revision: int | None = None,
) -> None:
    """Load the session into ``progress`` as a run does; refuse a diverged one or a stale revision.

    ``stored_scope`` (retract, reset) acts on the session in the scope it was
    stored with, which must belong to the caller's identity; otherwise the
    scope must match exactly, as for a run.
    """
    key = scope.session_key
    progress.diagnostics.extend(await settle_earlier(runtime, key))
    if stored_scope:
        stored, snap = await load_session(ticket, runtime.session_store, key, None, attest_legacy=False)
        if stored is not None and snap.memory_scope is None:
            raise LegacySnapshotError(
                f"session {key.session!r} is a legacy snapshot without a memory scope; migrate it first "
                "(runtime.migrate_legacy_session); nothing was written"
            )
        if snap.memory_scope is not None:
            scope = snap.memory_scope
    else:
        stored, snap = await load_session(ticket, runtime.session_store, key, scope, attest_legacy=False)
    if snap.divergence is not None:
        raise SessionDivergedError(
            f"session {key.session!r} is diverged from its archive at seq(s) "
            f"{list(snap.divergence.seqs)[:5]}; reconcile it first (agentium session reconcile, "
            "or runtime.reconcile_session); nothing was written"
        )
    current = stored.revision if stored is not None else 0
    if (
        expected_revision is not None
        and expected_revision != current
        and not runtime.parts.summary_revisions.only_summaries_since(
            key, expected_revision, current, stored.snapshot.digest if stored is not None else None
        )
    ):
        raise SessionConflictError(
            f"session {key.session!r} is at revision {current}, not the expected {expected_revision}; "
            "read it again and retry; nothing was committed"
        )
    progress.scope, progress.stored, progress.snap = scope, stored, snap


def _summary(runtime: HarnessRuntime, progress: RunProgress) -> SummaryState | None:
    """The stored summary when summaries are configured (what a run hands the commit)."""
    assert progress.snap is not None
    return progress.snap.summary if runtime.summarizer is not None else None


async def append_group(
    runtime: HarnessRuntime,
    ticket: Ticket,
    progress: RunProgress,
    scope: Scope,
    messages: tuple[Message, ...],
    expected_revision: int | None,
    *,
    encoded: bytes | None = None,
    after_read: tuple[int | None] | None = None,
) -> AppendResult:
    """Commit ``messages`` (checked, a complete group) as the session's next group.

    ``encoded`` is the canonical JSON of the messages' list when the check
    had it (:func:`.history_checks.check_messages_encoded`): the group's
    encoding is built around it. ``after_read`` is the fence point of the
    read the messages were made from (:mod:`.read_fence`): an erasure of the
    session since refuses the append.
    """
    await _load(runtime, ticket, progress, scope, stored_scope=False, expected_revision=expected_revision)
    if after_read is not None:
        # The load just made moved the ticket's fence point; the read came before it.
        await refuse_if_erased_since_read(ticket, runtime.session_store, scope.session_key, after_read)
    assert progress.snap is not None
    group = appended_group(progress.snap.next_seq, messages, scope, encoded, new_write_id())
    check_group_size(group)
    done = await commit_group(
        runtime, ticket, progress, scope=scope, group=group, summary=_summary(runtime, progress)
    )
    return AppendResult(
        seq=group.seq,
        snapshot_revision=done.revision,
        boundary=done.outcome.boundary,
        resident_groups=len(done.outcome.resident),
        eviction=done.outcome.eviction,
        commit_state=CommitState.COMMITTED,
        archived=done.outcome.archived,
        diagnostics=tuple(progress.diagnostics),
    )


async def _last_visible(
    runtime: HarnessRuntime, ticket: Ticket, progress: RunProgress, count: int
) -> list[tuple[MessageRef, Message]]:
    """Up to ``count`` of the view's last messages, newest first, read back as committed."""
    assert progress.snap is not None and progress.scope is not None
    snap, key = progress.snap, progress.scope.session_key
    candidates = ViewIndex(snap.view).visible_desc(snap.next_seq)
    if snap.erased:
        # Groups an erasure removed (retention, a forgotten fact's sources) are not history any
        # more: the view is what read_history shows, and their rows are gone.
        erased = snap.erased
        candidates = (c for c in candidates if not any(c[0] in span for span in erased))
    found: list[tuple[MessageRef, Message]] = []
    while len(found) < count:
        # Every visible group shows at least one message: no more groups than messages are needed.
        batch = list(itertools.islice(candidates, min(count - len(found), _RETRACT_CHUNK)))
        if not batch:
            break
        groups = await fetch_groups(ticket, runtime.archive, key, snap, [seq for seq, _ in batch])
        for seq, shown in batch:
            group = groups[seq]
            if group.control is not None:
                continue
            n = len(group.messages) if shown is None else min(shown, len(group.messages))
            for i in range(n - 1, -1, -1):
                found.append((MessageRef(seq, i), group.messages[i]))
                if len(found) == count:
                    return found
    return found


async def _refuse_if_moved(runtime: HarnessRuntime, ticket: Ticket, progress: RunProgress) -> None:
    """Refuse as a conflict a session that moved on while its archived history read as missing or damaged.

    Another process's erasure (of the session, or retention's) may remove
    archived rows the loaded snapshot still names. That is refused as what it
    is: :class:`ErasureInProgressError` while it runs (the load says so), a
    :class:`SessionConflictError` once the snapshot moved on. Otherwise it
    returns, and the caller raises the damage.
    """
    assert progress.scope is not None
    key = progress.scope.session_key
    again, _ = await load_session(ticket, runtime.session_store, key, None, attest_legacy=False)
    if not same_snapshot(progress.stored, again):
        raise SessionConflictError(
            f"session {key.session!r} changed while its archived history was read (an erasure?); "
            "read it again and retry; nothing was committed"
        )


async def _commit_control(
    runtime: HarnessRuntime,
    ticket: Ticket,
    progress: RunProgress,
    control: HistoryControl,
    view: ViewState,
    restart: SummaryState | None,
) -> tuple[MessageGroup, GroupCommit]:
    """Commit ``control`` as a control group, saving ``view`` (and a restarted summary) with it."""
    assert progress.snap is not None and progress.scope is not None
    scope = progress.scope
    group = MessageGroup(
        seq=progress.snap.next_seq,
        messages=(),
        retained=RetainedRecord(scope, write_id=new_write_id()),
        control=control,
    )
    if restart is not None:
        progress.diagnostics.append(
            Diagnostic(
                "summary_restarted",
                f"the task summary covered what the {control.kind.value} took out of the view; it starts "
                f"again, empty, at group {restart.summary.frontier}",
                Severity.WARNING,
            )
        )
    done = await commit_group(
        runtime,
        ticket,
        progress,
        scope=scope,
        group=group,
        summary=_summary(runtime, progress),
        view=view,
        restarted_summary=restart,
    )
    return group, done


def _check_spans(scope: Scope, before: ViewState | None, after: ViewState) -> None:
    """Refuse a retraction that would add a span past :data:`~.history_checks.MAX_RETRACTION_SPANS`.

    The view state rides in the snapshot, so each span not joined to the one
    before it grows every later save: bounded here, before anything is
    written. Only a retraction that adds a span is refused: one joined to the
    span before it (or taking spans into a new one) is made even on a view
    over the limit (a snapshot written before it), so no view is stuck.
    """
    limit = history_checks.MAX_RETRACTION_SPANS  # read at the call: a test lowers it
    held = len(before.spans) if before is not None else 0
    if len(after.spans) > limit and len(after.spans) > held:
        raise RetractionLimitError(
            f"the view of session {scope.session!r} holds {held} retracted span(s) and this retraction "
            f"would add one, past the limit of {limit} (MAX_RETRACTION_SPANS); start the view afresh "
            "with reset_view (nothing is deleted) and retract there; nothing was written",
            spans=held,
            limit=limit,
        )


async def retract_messages(
    runtime: HarnessRuntime,
    ticket: Ticket,
    progress: RunProgress,
    scope: Scope,
    count: int,
    reason: str,
    *,
    stored_scope: bool,
    expected_revision: int | None = None,
) -> RetractResult:
    """Take the view's last ``count`` messages out of it with a control group (nothing is deleted)."""
    await _load(
        runtime, ticket, progress, scope, stored_scope=stored_scope, expected_revision=expected_revision
    )
    assert progress.snap is not None
    snap = progress.snap
    try:
        found = await _last_visible(runtime, ticket, progress, count)
    except ArchiveCorruptError:
        await _refuse_if_moved(runtime, ticket, progress)
        raise
    if len(found) < count:
        raise RetractionRefusedError(
            f"the view of session {scope.session!r} holds {len(found)} message(s); retract(count={count}) "
            "would reach past its start; nothing was written",
            available=len(found),
        )
    found.reverse()
    refs = tuple(ref for ref, _ in found)
    view = after_retraction(snap.view, refs, snap.next_seq)
    _check_spans(scope, snap.view, view)
    # The stored summary, whether or not this runtime summarizes: another runtime on the same
    # store (one with a summarizer) would otherwise send text stating what was just retracted.
    summary = snap.summary
    restart = None
    # What its text may state, not only what it covers: a summarizer may answer a frontier below a
    # group it was given and still state it (``SummaryState.given_until``).
    if summary is not None and refs[0].seq < text_reach(summary, snap.boundary):
        restart = restarted(summary, view.start)
    group, done = await _commit_control(
        runtime, ticket, progress, HistoryControl(ControlKind.RETRACT, reason, refs), view, restart
    )
    return RetractResult(
        seq=group.seq,
        retracted=refs,
        messages=tuple(detached_message(m) for _, m in found),
        view_start=view.start,
        view_retracted=view.retracted,
        snapshot_revision=done.revision,
        boundary=done.outcome.boundary,
        eviction=done.outcome.eviction,
        commit_state=CommitState.COMMITTED,
        archived=done.outcome.archived,
        diagnostics=tuple(progress.diagnostics),
    )


async def reset_session_view(
    runtime: HarnessRuntime,
    ticket: Ticket,
    progress: RunProgress,
    scope: Scope,
    reason: str,
    *,
    stored_scope: bool,
    expected_revision: int | None = None,
) -> ResetResult:
    """Start the view after a new control group: everything before it leaves the view (nothing is deleted)."""
    await _load(
        runtime, ticket, progress, scope, stored_scope=stored_scope, expected_revision=expected_revision
    )
    assert progress.snap is not None
    snap = progress.snap
    view = after_reset(snap.next_seq)
    summary = snap.summary  # whether or not this runtime summarizes (see retract_messages)
    restart = None
    old = summary.summary if summary is not None else None
    # Uncertainty notes count as text: the summarizer writes them too, and they may state what
    # the reset clears (a summary with no text yet can hold them, and later ones carry them on).
    if summary is not None and old is not None and (old.text or old.citations or old.uncertainty):
        restart = restarted(summary, old.frontier)
    group, done = await _commit_control(
        runtime, ticket, progress, HistoryControl(ControlKind.RESET_VIEW, reason), view, restart
    )
    return ResetResult(
        seq=group.seq,
        view_start=view.start,
        snapshot_revision=done.revision,
        boundary=done.outcome.boundary,
        eviction=done.outcome.eviction,
        commit_state=CommitState.COMMITTED,
        archived=done.outcome.archived,
        diagnostics=tuple(progress.diagnostics),
    )
