"""The erasure fence before each model call of a run: no history erased since the load reaches the model.

A run loads its session (resident history, summary) once, fenced (:mod:`.load`),
then calls the model once per step — a tool round each, a verification
revision more. Another process (or another runtime over the same session
store) may begin erasing the session, its user or its tenant in between,
and may even finish before the next call. The commit fence
(:mod:`.commit_fence`) keeps the run from writing, but the model would still
be handed the erased text. So before each call :meth:`TurnFence.check`
looks again:

- the tenant's pending erasures are read (one small read; the built-in
  SQLite store answers it from what it knows unchanged, without a read or a
  bounded call, when nothing was committed to the file since): one covering
  the session under way stops the run;
- only when the ledger's revision moved since the last look: the session's
  snapshot (free on the SQLite known path) — still at the revision the
  content is from (``revision``), it was not erased since (an erasure
  removes it, and a store never hands out a revision twice for a key), as
  the commit fence judges it; else the tenant's finished erasures of the
  whole session are read (a few small reads:
  :func:`.commit_fence.erased_whole_since`): one that joined the ledger
  after the run's load stops the run — one whose join record is absent (an
  earlier version's) or damaged may have joined at any time and stops it
  too, which is why the snapshot is looked at first. The revision then seen
  is kept, so each later call of the run looks again only if the ledger
  moves again.

Stopping raises :class:`~agentium_harness._errors_run.ErasedDuringRunError`
before the call, with a WARNING (no content) and a span event
``agentium.run.erased_during_run``; the run commits nothing
(:class:`~.effects.EffectsKeeper` keeps no tool round of it either: it was
made from the erased history). Nothing here writes or syncs anything.

A summary update after a run's commit looks the same way before its
summarizer call (the groups it offers are the session's history), from the
run's load (``since``): stopped, it saves nothing (a ``summary_failed``
diagnostic says why). A memory extraction looks the same way before its
extractor call, through its manager's own fences (every session store the
manager was given to, for the fact it would write: :mod:`.extraction_fence`).

An erasure of archived groups only (retention, a forgotten fact's
sources) leaves the resident history and the snapshot's content alone, yet
recall may have put excerpts of those groups into the run's request, which
every model call sends again; and the run's resident history becomes
archived groups too once another writer (a run of another process on the
same session) commits past it. One under way stops the run (as above).
One that began and finished between two calls has marked the groups it
took in the session's snapshot (``SessionSnapshot.erased``) before it left
the ledger, and the snapshot is read anyway when the ledger moved: a group
the request sends (``resident``: the load's groups whose messages it
carries) or whose excerpt it carries (``recalled``: :func:`recalled_groups`)
in those ranges stops the run the same way (:class:`ErasedDuringRunError`
with no ``erasure_id``: the snapshot says the group went, not which
erasure took it). Nothing else is read: no archived group (recall reads
them within a byte budget of its own; a group may be 32 MiB), so an
archive that cannot read one back, or fails to, changes nothing here.
A forget erasure also empties a task summary covering the groups it took
(it may state the fact): when the request carries the summary (``summary``)
and the snapshot now holds it emptied, the run stops the same way; so
it does when a summary update wrote it again before the check (another
text, with a group the sent summary's text may state erased: since the
load, ``erased``, or before it, which a forget erases again). Retention
keeps a summary's text by design; with such an update in the same window
the snapshot cannot tell it from a forget, and only then is the kind of the
erasures joined since the load read from the index (:mod:`.summary_fence`):
retention lets the run go on, a forget of a group the summary covers stops it.

Recalled host documents need nothing more for erasures: a run sees only
documents owned by its tenant, its user or its session, and every erasure
taking one of those covers the run's session (the checks above). A host's
``delete_document`` is no erasure: :mod:`.document_run_fence` looks for it
(``documents``), as :mod:`.fact_fence` looks for a plain ``forget`` of a
memory fact the request carries (``facts``). What it does not cover: a
call already under way when the erasure begins (the provider has the
request; that is the provider's copy, docs/erasure.md).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Final

from .._errors import ErasureInProgressError
from .._errors_run import (
    STOPPED_BEFORE,
    STOPPED_BEFORE_LOG,
    DocumentDeletedDuringRunError,
    ErasedDuringRunError,
    FactForgottenDuringRunError,
)
from .._observe.spans import current_span_event
from .._ports.erasure import ErasureRecord, SeqRange
from .._ports.recall import SourceRef
from .._ports.recall_sources import group_source_id
from .._ports.sessions import SessionSnapshot, SessionStore, StoredSnapshot
from .._ports.summary import SummaryState
from .._scope import SessionKey
from .._validators import exact_int
from .commit_fence import erased_whole_since
from .document_run_fence import DocumentFence
from .erasure_ledger import ledger_of, pending_key
from .fact_fence import FactFence
from .lifecycle import Ticket, covers
from .load import known_fence_and_session
from .results import CommitState, Diagnostic, Severity
from .summary_fence import FORGOTTEN, forgotten_since, summary_gone

__all__ = ["ERASED_DURING_RUN", "TurnFence", "erased_during_run", "recalled_groups"]

_log = logging.getLogger("agentium.engine")

#: The diagnostic code of a run stopped by the fence (and the suffix of its span event).
ERASED_DURING_RUN = "erased_during_run"

#: A group seq in a source id: canonical decimal, as ``str(int)`` writes it.
_SEQ: Final = re.compile(r"0|[1-9][0-9]*")


def recalled_groups(key: SessionKey, boundary: int, refs: Sequence[SourceRef]) -> tuple[int, ...]:
    """The seq of each archived group of ``key`` (below ``boundary``) among ``refs``, recall's.

    Ids of another session, of documents, or that no group has, are not
    among them (an id counts only if :func:`group_source_id` builds it again).
    """
    found: list[int] = []
    for ref in refs:
        head, _, seq = ref.source_id.rpartition("/")
        if head.startswith("group/") and _SEQ.fullmatch(seq):
            number = int(seq)
            if number < boundary and group_source_id(key, number) == ref.source_id:
                found.append(number)
    return tuple(found)


class TurnFence:
    """One run's look at the erasure ledger before each model call, from the point its load saw."""

    __slots__ = (
        "documents",
        "erased",
        "facts",
        "first",
        "groups_erasure",
        "recalled",
        "resident",
        "revision",
        "seen",
        "store",
        "summary",
        "ticket",
        "what",
    )

    def __init__(
        self,
        ticket: Ticket,
        store: SessionStore,
        *,
        since: tuple[int | None] | None = None,
        revision: int | None = None,
        what: str = "run",
        recalled: tuple[int, ...] | Callable[[], tuple[int, ...]] = (),
        resident: tuple[int, ...] | Callable[[], tuple[int, ...]] = (),
        summary: SummaryState | None = None,
        erased: Sequence[SeqRange] | None = None,
        facts: FactFence | None = None,
        documents: DocumentFence | None = None,
    ) -> None:
        self.ticket = ticket
        #: The host documents whose excerpts the request carries (``None``: none): a delete stops the run.
        self.documents = documents
        #: The memory facts the request carries (``None``: none): a forget since stops the run too.
        self.facts = facts
        #: The task summary the request carries (``None``: none); a forget erasure may empty it.
        self.summary = summary
        #: The session's erased ranges where the content sent is from (the load's): ranges beyond
        #: them were erased since.
        self.erased: Sequence[SeqRange] = erased or ()
        #: The seqs of the resident groups (as the load found them) whose messages the request sends,
        #: or what works them out: called only once the ledger moved (every run makes a fence).
        self.resident = resident
        #: The seq of each archived group of the session whose excerpt the request carries
        #: (:func:`recalled_groups`), or what works them out: called only once the ledger moved.
        self.recalled = recalled
        #: The session's revision holding what is sent (the load's; a summary update's: its commit's),
        #: ``None`` when it was absent: found there again, no erasure took the session since.
        self.revision = revision
        self.store = store
        self.what = what
        #: The ledger revision of the run's fenced load (``None`` inside: absent then); the run's
        #: content is from then. ``first is None`` as a whole: no fenced load, nothing to check.
        #: ``since``: that of another ticket's load (a background summary update's run).
        self.first: tuple[int | None] | None = ticket.fence_seen if since is None else since
        #: The revision last looked at with no covering erasure joined since ``first``.
        self.seen = self.first
        #: The id of the erasure of archived groups of the session a look found under way (``""``: none):
        #: what tells its stop from another :class:`ErasureInProgressError` (:mod:`.effects`).
        self.groups_erasure = ""

    async def check_offered(self, seqs: tuple[int, ...], summary: SummaryState | None) -> None:
        """:meth:`check` before a summarizer call offering groups ``seqs`` (and ``summary``, the previous).

        The groups were read from the archive after the commit: another
        process's groups erasure may take them before the call, as it may a
        run's resident history; a forget erasure may empty the previous summary.
        """
        self.resident, self.summary = seqs, summary
        await self.check()

    async def check(self) -> None:
        """Raise :class:`ErasedDuringRunError` if an erasure of the session began since the run's load.

        Or a memory fact the request carries was forgotten since (:mod:`.fact_fence`), or a host
        document whose excerpt it carries was deleted since (:mod:`.document_run_fence`).
        """
        await self._check_ledger()
        if self.facts is not None:
            await self.facts.check(self.ticket, self.what)
        if self.documents is not None:
            await self.documents.check(self.ticket, self.what)

    async def last(self) -> None:
        """After the run's last model call, before its commit: the ledger, then the carried facts.

        Only for a run whose request carries memory facts or document excerpts
        (one carrying neither reads nothing here: the commit's own erasure
        fence covers it). The ledger goes first, as before a call: an erasure
        of the run's user or tenant takes the facts too, and the stop names
        the erasure, not a forget. The documents' last look is the commit
        fence's validation (:mod:`.last_look`).
        """
        if self.facts is None and self.documents is None:
            return
        await self._check_ledger(last=True)
        if self.facts is not None:
            await self.facts.last(self.ticket, self.what)

    async def after_failed_call(self) -> str | None:
        """After a model call that failed, before the tool rounds that ran are kept: :meth:`last`, and more.

        Those rounds were made from what the request carries, as the answer would have been: a fact
        forgotten, or a document deleted, during the failed call stops their commit the same way
        (``before_commit``). The ledger and the facts as :meth:`last`; the documents read once more,
        since no commit fence follows to validate them. Returns why the documents' look could not be
        made (``None``: made, or none carried); a failed read of the ledger or a fact raises its typed error.
        """
        if self.facts is None and self.documents is None:
            return None
        await self.last()
        if self.documents is not None:
            return await self.documents.after_failed_call(self.ticket, self.what)
        return None

    async def _check_ledger(self, last: bool = False) -> None:
        ticket, first, seen = self.ticket, self.first, self.seen
        key = ticket.key
        if first is None or seen is None or key is None:
            return
        ledger_key = pending_key(key.tenant)
        known = known_fence_and_session(ticket, self.store, key)
        store = self.store
        answer = (
            known[0]
            if known is not None
            else await ticket.call("erasure fence", lambda ctx: store.load(ledger_key, ctx))
        )
        revision, ledger = ledger_of(ledger_key, answer)
        for record in ledger.records:
            if covers(record.target, key):
                if record.target.groups:
                    self.groups_erasure = record.erasure_id
                    raise _groups_under_way(key, record, self.what, last)
                raise _stopped(key, record, "is under way", self.what, last)
        if revision == seen[0]:
            return  # no erasure of the tenant began or ended since the last look
        unchanged, found = False, None
        if self.revision is not None:
            found = (
                known[1]
                if known is not None
                else await ticket.call("session load", lambda ctx: store.load(key, ctx))
            )
            # The int the store's answer holds: a subclass's own ``__eq__`` could say it is unchanged.
            # Still the snapshot the content is from: no erasure took it since (join records aside:
            # an earlier version's erasure, with none, must not stop every later run).
            unchanged = isinstance(found, StoredSnapshot) and exact_int(found.revision) == self.revision
            if not unchanged and self.resident:
                resident = self.resident if isinstance(self.resident, tuple) else self.resident()
                if _erased_any(found, resident):
                    raise _recalled_gone(key, self.what, resident=True, last=last)
            if not unchanged and self.summary is not None:
                gone = summary_gone(found, self.summary, self.erased)
                # Retention with a summary rewrite looks like a forget in the snapshot (so does a forget of
                # groups marked erased before the load, then a rewrite): only then is the kind of the
                # erasure read from the index (a forget stops the run; retention keeps text).
                if gone is FORGOTTEN or (
                    isinstance(gone, tuple)
                    and await forgotten_since(ticket, store, key, first[0], gone, self.summary)
                ):
                    raise _recalled_gone(key, self.what, summary=True, last=last)
        if not unchanged:
            finished = await erased_whole_since(ticket, store, key, first[0])
            if finished is not None:
                raise _stopped(key, finished, "completed", self.what, last)
        # A recalled group an erasure took is marked in the snapshot before the erasure finishes
        # (``SessionSnapshot.erased``): no archive read (one per group, of any size, was made here).
        # No snapshot where the run loaded one: only an erasure removes it (or no answer was had).
        recalled = self.recalled if isinstance(self.recalled, tuple) else self.recalled()
        if recalled and not (isinstance(found, StoredSnapshot) and not _erased_any(found, recalled)):
            raise _recalled_gone(key, self.what, last=last)
        self.seen = (revision,)


#: What a stop kept from the erased history, by ``last`` (the look after the run's last model call).
_SENT: Final = {False: "sent", True: "committed"}


def _erased_any(found: object, seqs: tuple[int, ...]) -> bool:
    """Whether snapshot ``found`` (a store's answer, unchecked) marks one of ``seqs`` erased.

    Only a well-formed answer counts (a snapshot, its ranges :class:`SeqRange`):
    anything else is left to the whole-scope checks that follow, as before.
    """
    snapshot = found.snapshot if isinstance(found, StoredSnapshot) else None
    if not isinstance(snapshot, SessionSnapshot) or not isinstance(snapshot.erased, tuple):
        return False
    spans = [r for r in snapshot.erased if isinstance(r, SeqRange)]
    return any(seq in span for span in spans for seq in seqs)


def _stopped(
    key: SessionKey, record: ErasureRecord, how: str, what: str, last: bool = False
) -> ErasedDuringRunError:
    """The refusal of ``what`` (a run, a summary update) naming ``record``: a WARNING, a span event.

    ``last``: the stop is the look after the run's last model call (before its commit).
    """
    _log.warning(
        "%s stopped before %s: an erasure covering its session began after the run "
        "loaded it (erasure %s %s); nothing was sent or committed",
        what,
        STOPPED_BEFORE_LOG[last],
        record.erasure_id,
        how,
        extra={"agentium_operation": what, "agentium_commit_state": "not_committed"},
    )
    current_span_event(f"agentium.run.{ERASED_DURING_RUN}", {"agentium.erasure.state": record.state.value})
    error = ErasedDuringRunError(
        f"session {key.session!r} began to be erased ({record.target.describe()}, erasure "
        f"{record.erasure_id}, {how}) after the run loaded it; the {what} stopped before "
        f"{STOPPED_BEFORE[last]}, so the erased history was not {_SENT[last]}; nothing was committed",
        record.erasure_id,
    )
    error.commit_state = CommitState.NOT_COMMITTED
    error.before_commit = last
    return error


def _recalled_gone(
    key: SessionKey, what: str, *, resident: bool = False, summary: bool = False, last: bool = False
) -> ErasedDuringRunError:
    """The stop for a group the request carries that was erased since (recalled, or ``resident``).

    A WARNING and a span event, no content. ``last``: as for :func:`_stopped`.
    """
    how = (
        "resident history the request sends (archived since by another writer)"
        if resident
        else "the task summary the request sends (a forgotten fact's sources it covered)"
        if summary
        else "archived groups whose excerpts recall put in the request"
    )
    _log.warning(
        "%s stopped before %s: %s %s since the run loaded the session; nothing was sent or committed",
        what,
        STOPPED_BEFORE_LOG[last],
        how,
        "emptied" if summary else "erased",
        extra={"agentium_operation": what, "agentium_commit_state": "not_committed"},
    )
    current_span_event(f"agentium.run.{ERASED_DURING_RUN}", {"agentium.erasure.state": "complete"})
    gone = "was emptied by an erasure" if summary else "were erased"
    error = ErasedDuringRunError(
        f"{how} of session {key.session!r} {gone} after the {what} loaded the session (retention or a "
        f"forgotten fact's sources); the {what} stopped before {STOPPED_BEFORE[last]}, so that text was not "
        f"{'committed' if last else 'sent again'}; nothing was committed"
    )
    error.commit_state = CommitState.NOT_COMMITTED
    error.before_commit = last
    return error


def _groups_under_way(
    key: SessionKey, record: ErasureRecord, what: str, last: bool = False
) -> ErasureInProgressError:
    """The stop for an erasure of archived groups of the session under way (retention, a fact's sources).

    It leaves the resident history alone, so this is not an
    :class:`ErasedDuringRunError`: it is the refusal a load meets, and what
    ran is offered to a commit as after any stop (refused while the erasure
    is under way, and said so). A WARNING and the same span event (no content).
    """
    _log.warning(
        "%s stopped before %s: archived groups of its session are being erased (erasure %s)",
        what,
        STOPPED_BEFORE_LOG[last],
        record.erasure_id,
        extra={"agentium_operation": what, "agentium_commit_state": "not_committed"},
    )
    current_span_event(f"agentium.run.{ERASED_DURING_RUN}", {"agentium.erasure.state": record.state.value})
    error = ErasureInProgressError(
        f"session {key.session!r} has archived groups being erased ({record.target.describe()}, erasure "
        f"{record.erasure_id}); the {what} stopped before {STOPPED_BEFORE[last]} (what it recalled may be "
        "among them); run again once the erasure completes",
        record.erasure_id,
    )
    error.commit_state = CommitState.NOT_COMMITTED
    return error


def erased_during_run(error: ErasedDuringRunError, ran: bool) -> Diagnostic:
    """The run's diagnostic for ``error``: why it stopped, and that what ran (if ``ran``) is not kept."""
    forgot, deleted = (
        isinstance(error, FactForgottenDuringRunError),
        isinstance(error, DocumentDeletedDuringRunError),
    )
    made_from = (
        "the forgotten fact" if forgot else "the deleted documents" if deleted else "the erased history"
    )
    kept = f"; the tool calls that ran were made from {made_from} and were not committed" if ran else ""
    # No erasure id: the snapshot said groups (or the summary) the request carries went, not which erasure.
    why = (
        "a memory fact the request carries was forgotten after the run injected it"
        if forgot
        else "host documents whose excerpts the request carries were deleted after recall read them"
        if deleted
        else f"an erasure covering the session (erasure {error.erasure_id}) began after the run loaded it"
        if error.erasure_id
        else "groups (or the task summary) the request carries were erased after the run loaded the session"
    )
    where = STOPPED_BEFORE[error.before_commit]
    return Diagnostic(ERASED_DURING_RUN, f"{why}; the run stopped before {where}{kept}", Severity.WARNING)
