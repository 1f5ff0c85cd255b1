"""``forget`` that reaches recall: a forgotten fact's sources are found, reported, and erased on request.

A memory fact remembers the message groups it came from (its provenance).
Forgetting the fact removes its text from memory, but the groups it came
from still hold that text: in the archive and the recall index (a later
recall in the session could surface it), in the session's resident history,
in a task summary covering them. ``runtime.forget`` therefore:

1. reads the fact's provenance over all its revisions (before forgetting
   removes it), then forgets the fact through the memory manager. A history
   that may be truncated (a fact written before ``MAX_FACT_REVISIONS``, or a
   store ignoring it) is refused with :class:`MemoryRejectedError` before
   anything changes: forgetting would clear sources the read could not see
   (and so is a fact past the one bounded listing of a store without history);
2. looks up each source group (before forgetting, so a failed read changes
   nothing) and says where its text still is (:class:`SourceHolder`):
   archived, resident, covered by the summary, already gone (erased
   earlier), or never held here (``not_held``: an :class:`Agent`'s own
   conversation, which Agentium does not archive, cites groups no session
   stores). Only a stored group whose digest equals the cited digest is a
   source: a reference whose digest matches no stored group is reported
   ``not_held`` with a note (and a WARNING log, seqs and the hashed session
   only), and never erased. A
   group erased earlier (retention keeps the summary's text) is gone, but a
   summary still covering it holds text written from it: that is reported
   (and emptied below) unless the summary cites the seq with another digest.
   Covering is what the text may state: every group below the frontier,
   and every group a summarizer was given for it (it may answer a frontier
   below them: ``SummaryState.given_until``; a state saved without it, any
   archived group);
3. with ``erase_sources=True`` (an operator erasure: reason and attestation
   required), erases the archived ones from the archive and the recall
   index as a groups erasure (a tombstone per session), and empties a task
   summary that covered them (its frontier is past them, cited or not, or
   a summarizer was given them for it: its text may state the fact). A resident group
   cannot be erased without erasing its session: it is reported as still
   holding the text.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from .._errors import AgentiumError, InvalidArgumentError
from .._errors_memory import MemoryRejectedError
from .._history import MessageGroup
from .._observe.logs import one_line
from .._observe.spans import current_span_event
from .._observe.turn import settings_of
from .._ports.erasure import EraseLevel, EraseTarget, ErasureKind, SeqRange
from .._ports.memory import MAX_LOOKUP_LIMIT, FactStatus, GroupRef, MemoryAck, MemoryScope
from .._ports.sessions import SessionSnapshot, StoredSnapshot
from .._ports.summary import text_reach
from .._scope import SessionKey, validate_id
from .erased_groups import may_state, merge_ranges
from .erasure import ErasureResult, OperatorAttestation, check_request, load_record
from .erasure_index import finished_covering
from .erasure_ledger import pending_records
from .forget_outcomes import ForgetProgress, forget_outcomes
from .history_read import fetch_groups, read_settled
from .load import load_session
from .memory.manager import counted_listing
from .results import CommitState
from .unexpected import WriteProgress

if TYPE_CHECKING:
    from .lifecycle import Ticket
    from .runtime import HarnessRuntime

__all__ = ["ForgetResult", "SourceHolder", "SourcePlace", "SourceState", "forget_fact"]

_log = logging.getLogger("agentium.engine.memory")


class SourcePlace(enum.StrEnum):
    """Where a forgotten fact's source group keeps its text."""

    #: In the archive, and in the recall index that follows it: recall in its session can surface it.
    ARCHIVED = "archived"
    #: In the session's resident history: in every request of that session until it is archived.
    RESIDENT = "resident"
    #: Covered by the session's task summary (cited, below its frontier, or given to its summarizer),
    #: whose text may state the fact.
    SUMMARY = "summary"
    #: Not stored any more, erased earlier: one of its session's erased groups, or a group no stored
    #: group matches that an erasure on record removed (its target's groups, or the seqs its
    #: tombstone lists for the session; the session gone, or used again since: its new groups are
    #: not the fact's, never erased for it).
    GONE = "gone"
    #: Never held by Agentium: no stored group of its session matches the citation and no erasure
    #: removed one — an :class:`~agentium_harness.Agent`'s own conversation (Agentium does not
    #: archive it), a group never written, or a stored group with another digest at that seq.
    NOT_HELD = "not_held"


class SourceState(enum.StrEnum):
    """Whether the text is still there after the call."""

    #: Agentium still holds the text there (:attr:`ForgetResult.still_held`).
    HOLDS_TEXT = "holds_text"
    #: Agentium holds no text there: erased by this call (place ``archived`` or ``summary``) or
    #: before it (place ``gone``).
    ERASED = "erased"
    #: Agentium never held it (place ``not_held``): nothing was erased, by this call or before it;
    #: whatever keeps the text outside Agentium (the host's own conversation store) is the host's to erase.
    NOT_HELD = "not_held"


@attrs.frozen(slots=True)
class SourceHolder:
    """One place a forgotten fact's source group (``session``, ``seq``) keeps its text, and its state now."""

    session: SessionKey
    seq: int
    place: SourcePlace = attrs.field(converter=SourcePlace)
    state: SourceState = attrs.field(converter=SourceState)


@attrs.frozen(slots=True)
class ForgetResult:
    """What ``runtime.forget`` did: the memory store's acknowledgment, the sources, the erasures.

    ``sources`` says, for every group the fact came from, where its text
    is and whether it is still there; ``erasures`` holds the groups
    erasures ``erase_sources=True`` ran (their records are tombstones).
    """

    ack: MemoryAck
    sources: tuple[SourceHolder, ...] = ()
    erasures: tuple[ErasureResult, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def still_held(self) -> tuple[SourceHolder, ...]:
        """The places that still hold a source's text (offer the host to erase them)."""
        return tuple(h for h in self.sources if h.state is SourceState.HOLDS_TEXT)


def _refs_by_session(refs: Sequence[GroupRef]) -> dict[str, list[tuple[int, str]]]:
    """The cited ``(seq, digest)`` pairs per session, each once, in citation order."""
    by_session: dict[str, list[tuple[int, str]]] = {}
    for ref in refs:
        cited = by_session.setdefault(ref.session, [])
        if (ref.seq, ref.digest) not in cited:
            cited.append((ref.seq, ref.digest))
    return by_session


def _named(runtime: HarnessRuntime, fact_id: str, unnamed: str = "a fact") -> str:
    """``fact <id>`` with content capture on, else ``unnamed``: an id is content (as in ``memory_refused``).

    For a WARNING and for an error's text alike: hosts log error texts.
    """
    return f"fact {one_line(fact_id)}" if settings_of(runtime).capture_content else unnamed


#: How many times runtime.forget looks for a fact's sources again when a correction raced it.
_ATTEMPTS = 3


async def _provenance(
    runtime: HarnessRuntime, scope: MemoryScope, fact_id: str
) -> tuple[list[GroupRef], str, object]:
    """Every group the fact's revisions cite, a note when the store cannot tell, and what was read.

    The last is the fact's latest revision and status as read: a correction (a new revision)
    since then is told by reading again and comparing.
    """
    memory = runtime.memory
    assert memory is not None
    caps = memory.capabilities
    if caps.history:
        revisions = await memory.history(scope, fact_id)
        if len(revisions) >= MAX_LOOKUP_LIMIT and revisions[-1].status is not FactStatus.FORGOTTEN:
            # A fact within MAX_FACT_REVISIONS reads whole, tombstone included; this one was
            # written before the cap (or by a store ignoring it): later revisions may cite
            # sources this read cannot see, and forgetting would clear them for good.
            named = _named(runtime, fact_id)
            _log.warning("runtime.forget refused: the history of %s may be truncated", named)
            raise MemoryRejectedError(
                f"the history of {_named(runtime, fact_id, 'the fact')} holds at least {len(revisions)} "
                "revisions, more than one read returns, so its sources cannot all be found; nothing was "
                "changed. Forget it with runtime.memory.forget and erase the sessions it came from (where "
                "the store refuses that too, erase the fact's user)"
            )
        seen: object = (revisions[-1].revision, revisions[-1].status) if revisions else None
        return [ref for revision in revisions for ref in revision.fact.provenance], "", seen
    if caps.listing:
        # Whether the store's answer was full counts what it returned, before the engine dropped
        # repeats and tombstones from it.
        listed, answered = await counted_listing(memory, scope, MAX_LOOKUP_LIMIT)
        current = [f for f in listed if f.fact_id == fact_id]
        if not current and answered >= MAX_LOOKUP_LIMIT:
            # One bounded read of the newest current facts, and this one is not among them: its
            # sources cannot be seen, and forgetting would remove the provenance for good (as for
            # a truncated history above). A shorter listing without it: the fact is not current,
            # and the store's forget answers for it (not found, or already forgotten).
            _log.warning("runtime.forget refused: %s is past the store's listing", _named(runtime, fact_id))
            raise MemoryRejectedError(
                f"{_named(runtime, fact_id, 'the fact')} is not among the {len(listed)} newest facts the "
                "memory store lists, and the store declares no history, so its sources cannot be found; "
                "nothing was changed. Forget it with runtime.memory.forget and erase the sessions it came "
                "from (where the store refuses that too, erase the fact's user)"
            )
        seen = tuple((f.revision, f.fact.provenance) for f in current)
        return [ref for fact in current for ref in fact.fact.provenance], "", seen
    return [], "the memory store declares neither history nor listing: the fact's sources are unknown", None


@attrs.frozen(slots=True)
class _Places:
    """Where a session's cited groups are: the holders, the archived seqs (erasable), the mismatches.

    ``summarized``: cited groups erased earlier (retention keeps the summary's text) that the
    summary still covers; an erasure of them empties the summary (the groups themselves are gone).
    """

    holders: list[SourceHolder]
    archived: list[int]
    mismatched: list[int]
    summarized: list[int] = attrs.field(factory=list)
    #: Cited groups no stored group of the session is (and no erasure removed): never held here.
    not_held: list[int] = attrs.field(factory=list)


async def _erased_seqs(
    ticket: Ticket, runtime: HarnessRuntime, key: SessionKey, seqs: Sequence[int]
) -> set[int]:
    """Which of ``seqs`` an erasure on record removed from session ``key`` (done, or under way).

    An erasure of some of the session's groups (retention, another fact's sources) removed the
    seqs of its target. One of the whole session, or of its user or tenant, counts under way for
    every seq (its inventory may not be saved yet); finished, for the seqs its tombstone lists
    for this session (:attr:`~agentium_harness.ErasedGroups.ranges`), or every seq when the
    tombstone cannot say (it left sessions out, or only its header is there): a user's or
    tenant's erasure covers every session id of theirs but removed only the sessions it lists,
    and one never stored (an Agent's conversation) is not among them.

    The pending ledger is read first: an erasure is indexed as finished and only then leaves it,
    so one completing between the two reads is in the second. Read the other way round, it could
    be in neither, and the groups it erased read as never held.
    """
    found: set[int] = set()
    for head in await pending_records(ticket, runtime.session_store, key.tenant):
        found.update(seq for seq in seqs if head.target.covers_group(key, seq))
    for head in await finished_covering(ticket, runtime.session_store, key):
        if not head.target.covers_session(key):
            found.update(seq for seq in seqs if head.target.covers_group(key, seq))
            continue
        record = await load_record(ticket, runtime.session_store, head)
        listed = [g for g in record.sessions if g.session == key]
        if record is head or (record.omitted_sessions and not listed):
            return set(seqs)
        found.update(seq for seq in seqs for g in listed if any(seq in r for r in g.ranges))
    return found


async def _places(
    runtime: HarnessRuntime, key: SessionKey, cited: Sequence[tuple[int, str]], *, fence: bool
) -> _Places:
    """Where each group of session ``key`` the fact cites is, counting only a group whose digest matches.

    A provenance reference is data the host (or an extractor) wrote: its
    ``seq`` alone must not decide what is reported or erased. The stored
    group at each cited seq is read — resident ones from the snapshot,
    archived ones from the archive, inside the same admission ticket — and
    only one whose digest equals a cited digest is the fact's source. A
    mismatch is reported ``not_held`` (the fact's source is not held there)
    and is never erased; the summary counts for a seq only if its group
    matches. A cited seq with no stored group is ``gone`` only when an
    erasure removed it (one of the snapshot's erased groups, or a session
    absent with an erasure of it on record); otherwise Agentium never held
    it (an Agent's own conversation): ``not_held``, never ``gone``.
    """
    async with runtime.parts.admission.admit_shared(key, "forget sources") as ticket:
        # With erase_sources, a session an erasure is still pending on is refused (typed) as the
        # erasure would be: its archive and snapshot may disagree until that erasure completes.
        stored, snap = await load_session(
            ticket, runtime.session_store, key, None, attest_legacy=False, fence=fence
        )

        async def read(stored: StoredSnapshot | None, snap: SessionSnapshot) -> dict[int, MessageGroup]:
            erased = snap.erased or ()
            live = sorted(
                {
                    seq
                    for seq, _ in cited
                    if stored is not None and seq < snap.next_seq and not any(seq in r for r in erased)
                }
            )
            return await fetch_groups(ticket, runtime.archive, key, snap, live) if live else {}

        # Another runtime's (process's) erasure of the session, or of its groups (retention, another
        # fact's sources), may remove rows this snapshot still names: as for read_history, the session
        # is loaded again, fenced, so an erasure still under way refuses the call
        # (ErasureInProgressError); only an unchanged snapshot is damage.
        stored, snap, groups = await read_settled(
            stored,
            snap,
            lambda: load_session(ticket, runtime.session_store, key, None, attest_legacy=False, fence=True),
            read,
        )
        # A cited group no stored group matches: erased with its whole session (a tombstone, or an
        # erasure under way) — the session since gone, or used again, its new groups others —, or
        # never written here (an Agent's conversation is its own, not archived by Agentium). Only
        # the first is "gone": reporting the second erased would claim an erasure nobody ran.
        unmatched = sorted(
            {seq for seq, digest in cited if groups.get(seq) is None or groups[seq].digest != digest}
            - {seq for seq, digest in cited if seq in groups and groups[seq].digest == digest}
        )
        erased_whole = await _erased_seqs(ticket, runtime, key, unmatched) if unmatched else set()
    digests: dict[int, set[str]] = {}
    for seq, digest in cited:
        digests.setdefault(seq, set()).add(digest)
    places = _Places([], [], [])
    # The summary's text was written from every group it was given, below its frontier or past it
    # (it folded fewer than given): it may state one it does not cite (a summarizer need not cite),
    # so what it may state is what counts.
    citations = snap.summary.summary.citations if snap.summary is not None else ()
    cited_by_summary = {c.seq for c in citations}
    reach = text_reach(snap.summary, snap.boundary) if snap.summary is not None else 0
    summary_text = snap.summary is not None and may_state(snap.summary.summary)
    erased = snap.erased or ()
    for seq in dict.fromkeys(seq for seq, _ in cited):
        group = groups.get(seq)
        if group is None and seq not in erased_whole and not any(seq in r for r in erased):
            # Never stored in this session (absent, or the seq past its groups) and no erasure took it.
            places.holders.append(SourceHolder(key, seq, SourcePlace.NOT_HELD, SourceState.NOT_HELD))
            places.not_held.append(seq)
            continue
        if group is not None and group.digest not in digests[seq] and seq in erased_whole:
            # Another group at that seq, of the session used again after its erasure: the one cited
            # was held and erased with the session (gone); the new one is not the fact's, never erased.
            places.holders.append(SourceHolder(key, seq, SourcePlace.GONE, SourceState.ERASED))
            continue
        if group is None:
            places.holders.append(SourceHolder(key, seq, SourcePlace.GONE, SourceState.ERASED))
            # Erased earlier by retention, which keeps the summary's text: written from the group
            # while it existed, it may state the fact still. No group is left to compare digests
            # with, so the summary's own citation decides: one of that seq with another digest says
            # the summary was made from another group; none (a summarizer need not cite) does not.
            confirmed = all(c.digest in digests[seq] for c in citations if c.seq == seq)
            if summary_text and seq < reach and confirmed and any(seq in r for r in erased):
                places.holders.append(SourceHolder(key, seq, SourcePlace.SUMMARY, SourceState.HOLDS_TEXT))
                places.summarized.append(seq)
            continue
        if group.digest not in digests[seq]:
            places.holders.append(SourceHolder(key, seq, SourcePlace.NOT_HELD, SourceState.NOT_HELD))
            places.mismatched.append(seq)
            continue
        if seq >= snap.boundary:
            places.holders.append(SourceHolder(key, seq, SourcePlace.RESIDENT, SourceState.HOLDS_TEXT))
        else:
            places.holders.append(SourceHolder(key, seq, SourcePlace.ARCHIVED, SourceState.HOLDS_TEXT))
            places.archived.append(seq)
        if (seq in cited_by_summary or seq < reach) and summary_text:
            places.holders.append(SourceHolder(key, seq, SourcePlace.SUMMARY, SourceState.HOLDS_TEXT))
    if places.mismatched:
        # Seqs and the hashed session only: the fact's text, the groups' content and raw ids stay out.
        session = settings_of(runtime).ident(key.tenant, key.user, key.session)
        _log.warning(
            "runtime.forget: the provenance of a fact cites groups %s of session %s with a digest the stored "
            "group does not have; they are not treated as its sources",
            places.mismatched,
            one_line(session),  # raw with hash_ids=False: an id may hold U+2028
            extra={"agentium_session": session},
        )
        # On the agentium.forget span: how many groups only (seqs and session are on the WARNING).
        current_span_event(
            "agentium.forget.provenance_mismatch", {"agentium.forget.groups": len(places.mismatched)}
        )
    return places


async def _sources(
    runtime: HarnessRuntime,
    scope: MemoryScope,
    refs: Sequence[GroupRef],
    checked: tuple[str, OperatorAttestation] | None,
    progress: WriteProgress | None = None,
) -> tuple[list[SourceHolder], list[ErasureResult], list[str], int]:
    """Where each cited group's text is, erasing the archived ones when ``checked`` (one pass).

    And how many of the ``NOT_HELD`` holders are groups cited by another digest (already a
    WARNING and an event of their own: :func:`_places`). ``progress`` (the forget's) turns
    ``unknown`` once an erasure began writing.
    """
    from .erasure_api import run_erasure  # the API module imports this one

    # Where the sources are is read before anything is erased or forgotten: a read that fails (an
    # archive that cannot be read) then changes nothing, and the provenance is still there to retry.
    found = {
        session: await _places(
            runtime, SessionKey(scope.tenant, scope.user, session), cited, fence=checked is not None
        )
        for session, cited in _refs_by_session(refs).items()
    }
    notes: list[str] = []
    holders: list[SourceHolder] = []
    erasures: list[ErasureResult] = []
    mismatched = 0
    for session, place in found.items():
        mismatched += len(place.mismatched)
        key = SessionKey(scope.tenant, scope.user, session)
        places, archived = place.holders, place.archived
        if place.mismatched:
            seqs = ", ".join(map(str, place.mismatched))
            notes.append(
                f"the fact cites group(s) {seqs} of session {session!r} with a "
                "digest the stored group does not have: not its source, reported as not held and not erased"
            )
        if place.not_held:
            seqs = ", ".join(map(str, place.not_held))
            notes.append(
                f"group(s) {seqs} of session {session!r} the fact cites were never held by Agentium (an "
                "Agent's own conversation is not archived by Agentium): nothing of them was erased here; "
                "erase them wherever the host keeps that conversation"
            )
        # Groups erased earlier that the summary still covers are erased again with the others: the
        # archive and recall index hold nothing of them, and the marking (a forget erasure) empties
        # the summary, so the forgotten text reaches no later request through it.
        erasable = [*archived, *place.summarized]
        if checked is not None and erasable:
            ranges = merge_ranges([SeqRange(seq, seq + 1) for seq in erasable])
            target = EraseTarget.groups_of(key, ranges)
            assert target.level is EraseLevel.GROUPS
            erasure = WriteProgress()
            try:
                result = await run_erasure(
                    runtime, target, checked[0], checked[1], ErasureKind.FORGET, progress=erasure
                )
            finally:
                # Changed only once an erasure began writing: the lookups before it, and an erasure
                # refused before it wrote, change nothing ("unknown" said the fact may be forgotten).
                if progress is not None and erasure.commit_state is not CommitState.NOT_COMMITTED:
                    progress.saving()
            erasures.append(result)
            gone = set(erasable)
            places = [
                attrs.evolve(h, state=SourceState.ERASED)
                if h.place in (SourcePlace.ARCHIVED, SourcePlace.SUMMARY) and h.seq in gone
                else h
                for h in places
            ]
        holders.extend(places)
    return holders, erasures, notes, mismatched


def _said_by_the_call(exc: AgentiumError, progress: WriteProgress) -> None:
    """Mark ``exc`` with the forget's state once one of its sources' erasures began writing."""
    from .erasure_api import said_by_the_call  # the API module imports this one

    said_by_the_call(exc, progress.commit_state, forget_outcomes(progress))


def _corrected_throughout(runtime: HarnessRuntime, fact_id: str, erased: bool) -> MemoryRejectedError:
    """The refusal of a fact corrected at every look at its sources: not forgotten, its erasures standing.

    Its state is the call's: ``not_committed`` when none of its sources was erased, else ``unknown``
    (as any error once a source's erasure began writing, docs/erasure.md), the erasures done standing
    and the fact, known not forgotten, said so (not "may be forgotten", the state's usual words).
    """
    said = f"{_named(runtime, fact_id, 'the fact')} was corrected {_ATTEMPTS} times while its sources were "
    if erased:
        said += (
            "looked up and erased; it was not forgotten, and the erasures of its sources that completed "
            "stand (erasure_status lists them) (commit_state unknown)"
        )
    else:
        said += "looked up; it was not forgotten and nothing was erased (commit_state not_committed)"
    error = MemoryRejectedError(f"{said}. Call forget again once it stops changing")
    if erased:  # the error's own "; nothing was written" is untrue of a call whose erasures stand
        error.args = (str(error.args[0]).removesuffix("; nothing was written"),)
    error.commit_state = CommitState.UNKNOWN if erased else CommitState.NOT_COMMITTED
    return error


async def forget_fact(
    runtime: HarnessRuntime,
    scope: object,
    fact_id: object,
    *,
    erase_sources: bool,
    reason: object,
    attestation: object,
    progress: WriteProgress | None = None,
) -> ForgetResult:
    """See :meth:`~.erasure_api.ErasureOperations.forget`; ``progress`` follows what it changed."""
    memory = runtime.memory
    if memory is None:
        raise InvalidArgumentError("the runtime has no memory; configure [memory] to forget facts")
    if not isinstance(scope, MemoryScope):
        raise InvalidArgumentError(
            f"scope must be a MemoryScope, got {type(scope).__name__}; nothing was changed"
        )
    checked_id = validate_id(fact_id, "fact id")
    if not isinstance(erase_sources, bool):
        raise InvalidArgumentError(f"erase_sources must be a bool, got {type(erase_sources).__name__}")
    checked: tuple[str, OperatorAttestation] | None = None
    if erase_sources:
        # Everything an erasure needs is checked before the fact is forgotten.
        placeholder = EraseTarget.user(scope.tenant, scope.user)
        _, why, who = check_request(placeholder, reason, attestation)
        checked = (why, who)
    holders: list[SourceHolder] = []
    erasures: list[ErasureResult] = []
    notes: list[str] = []
    mismatched = 0
    corrected = False
    refs, note, seen = await _provenance(runtime, scope, checked_id)
    try:
        for _ in range(_ATTEMPTS):
            holders, done, notes, mismatched = await _sources(runtime, scope, refs, checked, progress)
            erasures.extend(done)
            # A correction meanwhile (the lookups and erasures await) wrote a revision whose sources
            # this pass did not see, and forgetting would empty its provenance for good: look again.
            refs, note, now = await _provenance(runtime, scope, checked_id)
            if now == seen:
                break
            seen = now
        else:
            corrected = True
    except AgentiumError as exc:
        # A typed error (a store's, or a later session's erasure's) went out as it stood: once a
        # source's erasure began writing, nothing in it said so ("nothing was committed", its
        # tombstone standing). It now carries the call's state, as apply_retention's do.
        if progress is not None and progress.commit_state is not CommitState.NOT_COMMITTED:
            _said_by_the_call(exc, progress)
        raise
    if corrected:
        raise _corrected_throughout(runtime, checked_id, bool(erasures))
    notes = ([note] if note else []) + notes
    if note:
        # A degraded outcome the result's notes alone told: no source can be found (nor erased).
        _log.warning(
            "runtime.forget: the memory store declares neither history nor listing, so the fact's "
            "sources are unknown%s",
            "; none of them was erased" if erase_sources else "",
        )
        current_span_event(
            "agentium.forget.sources_unknown", {"agentium.forget.erase_sources": erase_sources}
        )
    # Forgotten only once the sources' erasures are done: forgetting empties the provenance, so
    # a fact forgotten first and then refused an erasure (a run holding the session, a pending
    # erasure) could never have its sources found again. Refused now, nothing is forgotten and
    # the call can be repeated (groups erased by then are reported gone).
    erased = progress is not None and progress.commit_state is not CommitState.NOT_COMMITTED
    if isinstance(progress, ForgetProgress):
        progress.forgetting = True  # from here an error cannot tell whether the fact was forgotten
    if progress is not None:
        progress.saving()
    try:
        ack = await memory.forget(scope, checked_id)
    except AgentiumError as exc:
        # The store's refusal ("nothing was changed") is the call's only once nothing was erased.
        if erased and progress is not None:
            if exc.commit_state is CommitState.COMMITTED:
                progress.committed()  # the manager's forget stood (its error came after): forgotten
            elif exc.commit_state is CommitState.NOT_COMMITTED and isinstance(progress, ForgetProgress):
                progress.unwritten = True  # its store's write never began: the fact is not forgotten
            _said_by_the_call(exc, progress)
        raise
    if progress is not None:
        progress.committed()
    if any(h.place is SourcePlace.RESIDENT for h in holders):
        notes.append(
            "a source group is still resident: it is in every request of its session until it is archived; "
            "erase the session to remove it (the forgotten fact no longer names its sources)"
        )
    if checked is not None:
        _sources_left(holders, mismatched)
    return ForgetResult(ack, tuple(holders), tuple(erasures), tuple(notes))


def _sources_left(holders: Sequence[SourceHolder], mismatched: int) -> None:
    """Sources a forget asked to erase them could not erase: a WARNING and a span event, counts only.

    The ``mismatched`` groups cited by another digest (``NOT_HELD`` too) are left out: they were
    held, and are a WARNING and an event of their own (one degraded outcome, one WARNING).
    """
    resident = sum(1 for h in holders if h.place is SourcePlace.RESIDENT)
    not_held = sum(1 for h in holders if h.place is SourcePlace.NOT_HELD) - mismatched
    if resident or not_held:
        _log.warning(
            "runtime.forget: %d source group(s) not erased: %d still resident, %d never held by Agentium",
            resident + not_held,
            resident,
            not_held,
        )
        left = {"agentium.forget.resident": resident, "agentium.forget.not_held": not_held}
        current_span_event("agentium.forget.sources_left", left)
