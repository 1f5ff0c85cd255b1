"""Step 9 of a turn, when summaries are configured: fold newly archived groups into the task summary.

The frontier rule (R23): the update reads the groups from the summary's
frontier up to the session's archive boundary, at most
``SummaryLimits.max_groups`` of them, and keeps only the contiguous run of
complete, readable, unchanged groups of this session. The first group that
is unavailable, changed, incomplete, foreign or too large stops the
frontier there and becomes an explicit :class:`CoverageGap`; the frontier
never jumps over it, and the next update retries it. Only that run is
offered to the summarizer, and what it answers is checked by the engine:
the frontier it claims, every citation (a group it was given, or one the
previous summary already cited), and the size of the text. A summarizer
that raises, hangs or answers wrongly leaves the previous summary in place.

Deadlines: the group read is a store read, bounded by ``SummaryLimits.timeout_s``;
the summarizer may call a model, so its call is bounded by a model deadline
(:func:`summarize_timeout`): ``SummaryLimits.model_timeout_s`` when set (the
summary's own word), else the runtime's ``model_timeout_s``, else
``SummaryLimits.timeout_s`` as before. A host whose model needs a minute
raises the runtime's model deadline once, and neither its turns nor its
summaries cut that model off; one whose summarizer needs another deadline
than its turns' model sets the summary's; a hung summarizer is still
bounded by the deadline that applies.

Citations prove identity, not content (R5): a citation is a group seq and
digest, and the block the model sees carries the summary text, its coverage
and uncertainty as labeled source data of kind ``summary`` (R4), apart from
raw archive text that recall may include.

The summary follows the session's view (docs/history-api.md): a group out
of the view (before its start, a control group, or retracted whole) is
passed over without being offered; a partly retracted group is offered as
the view shows it (no half tool exchanges), and a citation of it is stored
with the canonical group's digest. A retraction or view reset that takes
away something the summary already covers restarts it (:func:`restarted`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from itertools import islice
from typing import TYPE_CHECKING

import attrs

from .._errors import ArchiveCorruptError, CapabilityError
from .._history import MessageGroup, ViewState
from .._observe import spans as observe
from .._observe.turn import background_diagnostics
from .._ports import OpContext
from .._ports._base import capabilities_of
from .._ports.archive import HistoryArchive
from .._ports.erasure import SeqRange
from .._ports.provider import SourceBlock, SourceKind
from .._ports.recall import RecallStore
from .._ports.sessions import SessionStore
from .._ports.summary import (
    CoverageGap,
    GapReason,
    Summarizer,
    SummaryLimits,
    SummaryState,
    TaskSummary,
    fit_notes,
)
from .._scope import SessionKey, encode_segment
from .._text import clean_text, error_text, one_line, shorten
from .._validators import shown_number
from .adapter_lists import listed, read_on
from .commit import CommitOutcome
from .erased_groups import may_state
from .group_identity import foreign_group
from .history_view import ViewIndex, paired_messages
from .lifecycle import Ticket
from .results import Diagnostic, Severity
from .summary_answer import checked_answer, failed, given_until
from .summary_save import save_summary
from .summary_view import visible_summary

if TYPE_CHECKING:
    from .parts import SummaryRevisions

__all__ = [
    "GroupReader",
    "SummaryUpdate",
    "save_summary",
    "summarize_after_commit",
    "summarize_timeout",
    "summary_block",
    "summary_reader",
    "uncertainty_attribute",
    "update_summary",
]

#: Reads up to ``max_groups`` archived groups of a session from ``start_seq``, ascending.
GroupReader = Callable[[SessionKey, int, int, OpContext], Awaitable[Sequence[MessageGroup]]]

#: Digest characters shown per citation in the model request: enough to tell groups apart, few tokens.
_SHOWN_DIGEST = 19  # "sha256:" and 12 hex digits
#: Longest ``CoverageGap.detail`` (rides in the snapshot, rewritten by every save while the gap stands)
#: and longest archive error text the ``summary_gap`` diagnostic quotes (of any size, never committed).
_MAX_GAP_DETAIL = 300


#: A stored summary citing groups out of the view was restarted (:func:`visible_summary`).
_STALE = Diagnostic(
    "summary_restarted",
    "the stored task summary cited groups no longer in the session's view (a retraction or reset "
    "did not restart it); it starts again, empty, at the view's start",
    Severity.WARNING,
)


def summarize_timeout(limits: SummaryLimits, model_timeout_s: float | None) -> float:
    """The summarizer call's deadline: ``limits.model_timeout_s``, else the runtime's, else ``timeout_s``."""
    if limits.model_timeout_s is not None:
        return limits.model_timeout_s
    return limits.timeout_s if model_timeout_s is None else model_timeout_s


@attrs.frozen(slots=True)
class SummaryUpdate:
    """What one summary update did: the new state (``None`` if nothing changed) and its diagnostics."""

    state: SummaryState | None
    folded: int
    diagnostics: tuple[Diagnostic, ...]


def uncertainty_attribute(notes: Sequence[str]) -> str:
    r"""A summary block's ``uncertainty``: one note per line, each note's own line breaks escaped.

    A note is a summarizer's free text (it may quote a group): joined with
    ``"; "``, one holding ``"; "`` read as two notes, a forged one among
    them. Each note is written on one line (:func:`~agentium_harness._text.one_line`:
    ``\n``, ``\r``, ``\u2028``… and ``\\`` for a backslash, as the
    recall-status notice writes its lines), and the lines are joined with a
    line break, which no note then holds: ``value.split("\n")`` gives the
    notes back, each as written. The renderer writes each line break of an
    attribute as ``&#xA;`` (an opening tag is one line), like every other
    character it escapes.
    """
    return "\n".join(map(one_line, notes))


def summary_block(key: SessionKey, state: SummaryState, view_start: int = 0) -> SourceBlock:
    """The summary as labeled source data: text, coverage, citations, policy and uncertainty.

    The uncertainty notes are one per line (:func:`uncertainty_attribute`).

    After a view reset (``view_start`` above 0) the coverage says the summary
    starts at the view: what came before was cleared and is not summarized.
    """
    summary = state.summary
    erased = set(state.erased_citations or ())
    cited = " ".join(
        f"{c.seq}:erased" if c.seq in erased else f"{c.seq}:{c.digest[:_SHOWN_DIGEST]}"
        for c in summary.citations
    )
    coverage = state.coverage()
    if view_start > 0:
        coverage += f"; history before group {view_start} was cleared from the view and is not summarized"
    attributes = [
        ("coverage", coverage),
        ("policy", f"{summary.policy}@{summary.version}"),
        ("citations", cited),
    ]
    if summary.uncertainty:
        attributes.append(("uncertainty", uncertainty_attribute(summary.uncertainty)))
    return SourceBlock(
        SourceKind.SUMMARY,
        f"summary/{encode_segment(key.session)}",
        summary.text,
        tuple(attributes),
    )


def _past_erased(seq: int, erased: Sequence[SeqRange]) -> int:
    """``seq``, or the first seq after the erased ranges that start at or cover it."""
    for span in erased:
        if span.start <= seq < span.stop:
            seq = span.stop
    return seq


def _next_erased(seq: int, erased: Sequence[SeqRange]) -> int:
    """The start of the first erased range after ``seq`` (a read stops short of it); large if none."""
    return min((span.start for span in erased if span.start > seq), default=seq + 10**12)


def _gap_diagnostic(gap: CoverageGap, said: str | None) -> Diagnostic:
    """The ``summary_gap`` note: the gap's detail, and ``said`` (the archive's text, never committed)."""
    quoted = "" if said is None else f" ({shorten(said, _MAX_GAP_DETAIL)})"
    return Diagnostic(
        "summary_gap",
        f"the summary frontier stopped at group {gap.seq} ({gap.reason.value}): {gap.detail}{quoted}; "
        "the next update retries it",
        Severity.WARNING,
    )


async def _read(
    ticket: Ticket, reader: GroupReader, key: SessionKey, start: int, count: int, timeout_s: float
) -> tuple[list[MessageGroup], CoverageGap | None, str | None]:
    """Read ``count`` groups from ``start``; on a failure, find the first group that cannot be read.

    A gap a failed read ends in names the error by its class: the gap is saved with the snapshot
    (committed), and an archive's error text may name another tenant's rows. That text is returned
    apart, for the ``summary_gap`` diagnostic alone.
    """

    async def batch(ctx: OpContext) -> list[object]:
        async def page(at: int, n: int) -> list[MessageGroup]:
            # At most ``n``, whatever the reader returned: past them lie groups this update must
            # not offer (past ``max_groups``, the archive boundary, or an erased range).
            return list(islice(await reader(key, at, n, ctx), n))

        # A shorter answer is read on (an archive may bound a call's bytes), not taken for a gap.
        return await read_on(page, start, count, "summary group read")

    try:
        got = await ticket.call("summary group read", batch, timeout_s=timeout_s)
        return got, None, None  # type: ignore[return-value]  # its type is checked with the rest (_admissible)
    except Exception as exc:
        # Any failure is narrowed down below, group by group; the batch error is not reported as such.
        del exc
    # The batch failed as a whole: read one group at a time (still bounded by
    # ``count``) so the groups before the bad one can be folded and the gap
    # names the exact seq.
    good: list[MessageGroup] = []
    for seq in range(start, start + count):

        def single(ctx: OpContext, seq: int = seq) -> Awaitable[Sequence[MessageGroup]]:
            return reader(key, seq, 1, ctx)

        try:
            one = await ticket.call("summary group read", single, timeout_s=timeout_s)
            # Its first item, read through its iterator: its own ``__len__``, ``__bool__`` or
            # indexing could raise or lie, outside the call (a non-sequence is a gap, as a failure).
            first = listed(one, 0, "summary group read", "groups")
        except ArchiveCorruptError as exc:
            return good, CoverageGap(seq, GapReason.CHANGED, _read_failed(exc)), error_text(exc)
        except Exception as exc:
            return good, CoverageGap(seq, GapReason.UNAVAILABLE, _read_failed(exc)), error_text(exc)
        if not first:
            return good, CoverageGap(seq, GapReason.UNAVAILABLE, "the archive did not return it"), None
        good.append(first[0])  # type: ignore[arg-type]  # its type is checked with the rest (_admissible)
    return good, None, None


def _read_failed(exc: Exception) -> str:
    """A failed read of one group, in the engine's words: the error by its class, never its text."""
    return f"its read raised {clean_text(type(exc).__name__)} (its text is not committed)"


def _admissible(
    key: SessionKey,
    start: int,
    end: int,
    groups: Sequence[MessageGroup],
    receipts: dict[int, str],
    limits: SummaryLimits,
) -> tuple[list[MessageGroup], CoverageGap | None]:
    """The contiguous run of acceptable groups from ``start``, and the gap that ended it, if any."""
    run: list[MessageGroup] = []
    used = 0
    for offset, group in enumerate(groups):
        expected = start + offset
        # Exactly a MessageGroup: a subclass's own digest (or encoding) could match the receipt
        # whatever its messages say, and rewritten text would be summarized and cited.
        if type(group) is not MessageGroup:
            return run, CoverageGap(expected, GapReason.INCOMPLETE, f"read returned a {type(group).__name__}")
        # ``type(...) is int``: a seq set past the group's validator is not compared by its ``__ne__``.
        if type(group.seq) is not int or group.seq != expected:
            return run, CoverageGap(
                expected, GapReason.INCOMPLETE, f"read returned group {shown_number(group.seq)} instead"
            )
        known = receipts.get(expected)
        foreign = foreign_group(key, group, known)
        if foreign is not None:
            return run, CoverageGap(expected, GapReason.FOREIGN, f"{foreign}; it was not offered")
        if not group.is_complete:
            return run, CoverageGap(expected, GapReason.INCOMPLETE, "the group is not complete")
        if known is not None and known != group.digest:
            return run, CoverageGap(
                expected, GapReason.CHANGED, f"digest {group.digest} differs from the receipt's {known}"
            )
        size = len(group.canonical_bytes())
        if size > limits.max_input_bytes:
            return run, CoverageGap(
                expected,
                GapReason.TOO_LARGE,
                f"{size} bytes, over the update's input budget of {limits.max_input_bytes}",
            )
        if used + size > limits.max_input_bytes:
            return run, None  # the budget is spent: the rest waits for the next update
        used += size
        run.append(group)
    if start + len(run) < end and len(run) == len(groups):
        return run, CoverageGap(start + len(run), GapReason.UNAVAILABLE, "the archive did not return it")
    return run, None


def _offered(
    run: Sequence[MessageGroup], view: ViewState | None
) -> tuple[list[MessageGroup], dict[tuple[int, str], str]]:
    """What the summarizer is given of ``run``: the view's part of each group, and canonical digests.

    Groups out of the view are left out; a partly retracted group is given
    as the view shows it. The map takes the digest of each such copy to the
    canonical group's, so the stored citation names what was committed.
    """
    if view is None:
        return list(run), {}
    index = ViewIndex(view)
    offered: list[MessageGroup] = []
    canonical: dict[tuple[int, str], str] = {}
    for group in run:
        shown = index.shown(group.seq)
        if group.control is not None or shown == 0:
            continue
        if shown is None:
            offered.append(group)
            continue
        messages = paired_messages(group.messages[:shown])
        if not messages:
            continue
        copy = attrs.evolve(group, messages=messages)
        canonical[(copy.seq, copy.digest)] = group.digest
        offered.append(copy)
    return offered, canonical


def _numbered_on(offered: list[MessageGroup], passed: int) -> tuple[list[MessageGroup], int]:
    """The offered groups up to the first one not numbered on from the one before, and where they end.

    Groups out of the view between two offered ones are not offered: a
    summarizer given ``[4, 7]`` folds 4 and stops before 5 (the frontier
    never passes a seq it was not given), and the next update would offer
    it 7 after a frontier of 5, which it cannot fold. So one update offers
    only the run up to such a hole, and ends at the next group the view
    shows (the groups in the hole are passed over with the run); the next
    update starts there.
    """
    for i in range(1, len(offered)):
        if offered[i].seq != offered[i - 1].seq + 1:
            return offered[:i], offered[i].seq
    return offered, passed


async def update_summary(
    ticket: Ticket,
    *,
    summarizer: Summarizer,
    reader: GroupReader,
    key: SessionKey,
    current: SummaryState | None,
    boundary: int,
    receipts: dict[int, str],
    limits: SummaryLimits,
    view: ViewState | None = None,
    erased: Sequence[SeqRange] = (),
    model_timeout_s: float | None = None,
    before_call: Callable[[tuple[int, ...], SummaryState | None], Awaitable[None]] | None = None,
) -> SummaryUpdate:
    """Fold the groups between the frontier and ``boundary`` into the summary, under ``limits``.

    ``receipts`` maps archived seqs to the digests the archive acknowledged
    when they were evicted (kept in the snapshot until the frontier passes
    them); a group read back with another digest is a ``changed`` gap. A
    group with no receipt (archived before summaries were configured, or
    folded again after a retraction restarted the summary: its receipt went
    when the frontier first passed it) is checked by the reader alone, and
    must carry a retained record of this session (:func:`.group_identity.foreign_group`).
    ``view`` (the session's) decides what of each group is offered
    (:func:`_offered`); groups out of it are passed over, and the summarizer
    is given a run numbered on from its previous frontier (:func:`_numbered_on`).
    ``erased`` (the session's erased ranges) are groups an erasure removed:
    the frontier passes them, saying so in the summary's uncertainty, and
    a read never reaches into one.
    ``model_timeout_s`` (the runtime's) bounds the summarizer call when set and
    ``limits.model_timeout_s`` is not (:func:`summarize_timeout`); the group
    read keeps ``limits.timeout_s``. ``before_call`` (the erasure fence:
    :mod:`.turn_fence`) runs just before the summarizer call, given the seqs
    offered and the previous summary when it has text; what it raises fails
    the update.
    Returns the state to save (``None`` when nothing changed).
    """
    original = current
    previous = current.summary if current is not None else None
    first = start = previous.frontier if previous is not None else 0
    past = _past_erased(start, erased)
    if past > start:
        # Erased before they were summarized: they will never be read again, so the frontier
        # passes them, and the summary says what it could not cover.
        base = previous or TaskSummary(text="", frontier=start, policy="none", version="0")
        note = f"groups {start}\u2013{past - 1} were erased before they were summarized"
        previous = attrs.evolve(base, frontier=past, uncertainty=fit_notes((*base.uncertainty, note)))
        # With no summarizer words before it, the note is the engine's alone: no group was given for
        # it (``given_until`` 0), so it is never read as an earlier version's text (``None``).
        given = current.given_until if current is not None and may_state(current.summary) else 0
        current = (
            SummaryState(previous, given_until=given)
            if current is None
            else (attrs.evolve(current, summary=previous, gaps=(), given_until=given))
        )
        start = past
    if start >= boundary:
        return SummaryUpdate(current if current != original else None, start - first, ())
    count = min(boundary - start, limits.max_groups, _next_erased(start, erased) - start)
    groups, read_gap, read_said = await _read(ticket, reader, key, start, count, limits.timeout_s)
    run, gap = _admissible(key, start, start + count, groups, receipts, limits)
    said: str | None = None  # the archive's text for the gap, said to the host, never committed
    if read_gap is not None and len(run) == len(groups):
        # The read itself says why it stopped there (changed, unavailable): that beats a guess.
        gap, said = read_gap, read_said
    diagnostics: list[Diagnostic] = []
    summary = previous
    offered, canonical = _offered(run, view)
    offered, passed = _numbered_on(offered, start + len(run))
    if offered and offered[0].seq > start:
        # The groups before the first offered one are out of the view: passed over, as below. A
        # summarizer folds on from its previous frontier (the built-in ones stop at the first seq
        # they are not given), so that frontier is moved to the first group it is given; left
        # behind them, it would fold nothing, now or in any later update.
        if previous is not None:
            previous = attrs.evolve(previous, frontier=offered[0].seq)
        start = offered[0].seq
    if run and not offered:
        # Nothing of these groups is in the view: the frontier passes them, the text stays.
        empty = TaskSummary(text="", frontier=start, policy="none", version="0")
        summary = attrs.evolve(previous if previous is not None else empty, frontier=passed)
    if offered:
        if before_call is not None:
            try:
                # The groups offered (and the previous summary's words, text or notes: the
                # summarizer is handed both) are history: no erasure may take them.
                await before_call(
                    tuple(g.seq for g in offered),
                    current if previous is not None and may_state(previous) and current is not None else None,
                )
            except Exception as exc:
                return SummaryUpdate(None, 0, (failed(exc, "the update stopped before its summarizer call"),))
        try:
            # A model deadline when the summary or the runtime sets one: the summarizer may call a
            # model, which a store-sized deadline would cut off; past it the call is walked away from.
            answer = await ticket.call(
                "summarize",
                lambda ctx: summarizer.summarize(previous, tuple(offered), ctx),
                timeout_s=summarize_timeout(limits, model_timeout_s),
                store=False,
            )
            # Checked inside the failure handling: an answer that breaks the check itself (an
            # object whose fields raise when read) fails the update, never the committed run.
            checked, notes = checked_answer(answer, previous, offered, start, limits, passed)
        except Exception as exc:
            return SummaryUpdate(None, 0, (failed(exc),))
        diagnostics.extend(notes)
        if checked is None:
            return SummaryUpdate(None, 0, tuple(diagnostics))
        if canonical:
            cited = tuple(
                attrs.evolve(c, digest=canonical.get((c.seq, c.digest), c.digest)) for c in checked.citations
            )
            checked = attrs.evolve(checked, citations=cited)
        if checked.frontier > offered[-1].seq:
            # It folded everything it was given: the groups after the last one are out of the view.
            checked = attrs.evolve(checked, frontier=max(checked.frontier, passed))
        summary = checked
        if checked.frontier < passed:
            gap = None  # it folded fewer than offered: the rest is retried, nothing is known missing
    if summary is None:
        summary = TaskSummary(text="", frontier=start, policy="none", version="0")
    gaps = (
        (attrs.evolve(gap, detail=shorten(gap.detail, _MAX_GAP_DETAIL)),)
        if gap is not None and gap.seq == summary.frontier
        else ()
    )
    diagnostics.extend(_gap_diagnostic(g, said) for g in gaps)
    # Citations of erased groups the summary still carries keep saying so.
    cited_seqs = {c.seq for c in summary.citations}
    still = [s for s in (current.erased_citations or ()) if s in cited_seqs] if current is not None else []
    state = SummaryState(summary, gaps, still, given_until(current, offered, boundary))
    if state == original:
        return SummaryUpdate(None, 0, tuple(diagnostics))
    return SummaryUpdate(state, summary.frontier - first, tuple(diagnostics))


def summary_reader(recall: RecallStore | None, archive: HistoryArchive) -> GroupReader:
    """Where summaries read archived groups: the recall store's canonical reads, else the archive's.

    The caller has already checked that a recall store declares
    ``canonical_archive_reads``; without one the archive must declare
    ``bounded_reads``, or summaries are refused with a :class:`CapabilityError`.
    """
    if recall is not None:
        return recall.seek_groups
    caps = capabilities_of(archive)
    if not getattr(caps, "bounded_reads", False):
        raise CapabilityError(
            f"archive {type(archive).__name__} lacks bounded_reads, which task summaries need to read "
            "archived groups when no recall store is configured"
        )
    return archive.read_groups


def _receipts(outcome: CommitOutcome) -> dict[int, str]:
    """The acknowledged digest of each archived group the frontier reads: the snapshot's, then this commit's.

    The snapshot keeps the digest each group had when the archive
    acknowledged it, even when the summary fell behind for many commits, so
    a group whose stored bytes were rewritten since (with a row digest
    recomputed to match) is a ``changed`` gap, never folded or cited.
    """
    known = {r.seq: r.digest for r in outcome.receipts}
    for receipt in outcome.archived:
        known.setdefault(receipt.seq, receipt.digest)
    return known


async def summarize_after_commit(
    ticket: Ticket,
    *,
    summarizer: Summarizer,
    reader: GroupReader,
    store: SessionStore,
    key: SessionKey,
    current: SummaryState | None,
    outcome: CommitOutcome,
    limits: SummaryLimits,
    view: ViewState | None = None,
    erased: Sequence[SeqRange] = (),
    revisions: SummaryRevisions | None = None,
    model_timeout_s: float | None = None,
    before_call: Callable[[tuple[int, ...], SummaryState | None], Awaitable[None]] | None = None,
) -> tuple[int, SummaryState | None, list[Diagnostic]]:
    """Run one update when the commit archived groups or the frontier lags; save it if it moved.

    Returns the snapshot revision after it, the summary state now stored,
    and the update's diagnostics (gaps, refusals, conflicts). A save is
    recorded in ``revisions`` (see :func:`save_summary`). ``model_timeout_s``:
    the runtime's, for the summarizer call (:func:`update_summary`), and
    ``before_call`` what runs just before it.
    """
    current, stale = visible_summary(current, view, outcome.boundary)
    frontier = current.summary.frontier if current is not None else 0
    if not stale and not outcome.archived_groups and frontier >= outcome.boundary:
        return outcome.revision, current, []
    diagnostics: list[Diagnostic] = []
    with observe.stage("summary", {"agentium.summary.frontier": frontier}) as span:
        try:
            update = await update_summary(
                ticket,
                summarizer=summarizer,
                reader=reader,
                key=key,
                current=current,
                boundary=outcome.boundary,
                receipts=_receipts(outcome),
                limits=limits,
                view=view,
                erased=erased,
                model_timeout_s=model_timeout_s,
                before_call=before_call,
            )
            diagnostics = list(update.diagnostics)
            if stale:
                diagnostics.append(_STALE)
            span.set("agentium.summary.diagnostics", len(diagnostics))
            # A stale summary is saved restarted even when nothing new was folded into it.
            state = update.state if update.state is not None or not stale else current
            if state is None:
                span.set("agentium.summary.moved", False)
                return outcome.revision, current, diagnostics
            saved, notes = await save_summary(
                ticket, store, key, outcome.revision, state, revisions, made_for=outcome
            )
            diagnostics.extend(notes)
            span.set("agentium.summary.moved", saved is not None)
            if saved is None:
                return outcome.revision, current, diagnostics
            span.set("agentium.summary.frontier", state.summary.frontier)
            return saved, state, diagnostics
        finally:
            if limits.background:  # no run carries them now: said as the update ends (docs/summaries.md)
                background_diagnostics(span, diagnostics)
