"""The erasure fence read again before a commit writes: no erased group comes back from a stale load.

A run, an append or a flush reads the tenant's pending erasures with its
session load (:mod:`.load`), then commits — archive the groups over the
resident bound, then save with compare-and-set. Another process may erase
the session in between (the run waited on the model meanwhile). The save's
compare-and-set then fails (the snapshot is gone), but the archive append
comes first: without a second look it writes the loaded groups, the erased
session's text, back at their old seqs, where nothing refers to them, and
the session id used again later meets them at those seqs (``diverged``).
A commit that only saves, and a joint commit (archive and save in one
transaction), need the same look: the compare-and-set passes while an
erasure under way has still to reach the snapshot. Once the snapshot is
gone the compare-and-set refuses it by itself: a store never hands out a
revision twice for a key, even across an erasure (the port's rule; the
built-in stores keep a store-wide revision floor), so the erased id used
again never comes back to the loaded revision. That rule, not this read,
is what covers an erasure and a re-use that both fall between this read
and the write; for a store that breaks it, this read is what is left.

So before archiving or saving, the pending ledger is read again (one small read): an
erasure covering the session under way refuses the commit
(:class:`ErasureInProgressError`); if the ledger moved since the load (an
erasure of the tenant began or ended), the session's snapshot is read too,
and one that is not the snapshot loaded — gone, or another revision —
refuses it (:class:`SessionConflictError`, as the save would). Nothing is
written either way. An erasure that begins after this read erases what the
commit archives itself, unless the append is still on its way once the
erasure has verified the archive (docs/erasure.md, "What is not removed").
A store that can check it inside its joint commit's transaction (the
built-in SQLite store: :func:`.commit_joint.transaction_fence`) takes the
first step there instead, the ledger still at the revision the load saw,
with the file's write lock held; one that moved rolls the commit back,
nothing written, and this look runs as for any store, the commit after it
checking the ledger still at the revision this look saw.

A session absent at the load and absent now tells nothing by its revision:
an erasure of it (or of its user or tenant) meanwhile found nothing stored,
yet what the commit holds — a new session's first turn — was submitted
before it. So then, when the ledger moved, the tenant's finished erasures
are read too, and one of the whole session that joined the ledger after the
load refuses the commit (:class:`SessionConflictError`, a WARNING logged,
no content).

A run that loads its session again to commit what ran (:mod:`.effects`)
moves its ticket's fence point to that load; the content it commits is
still from before it. :func:`refuse_if_erased_since` compares the reload
with the run's first load: if the ledger moved in between and an erasure of
the whole session (its own, its user's or its tenant's) that joined the
ledger after the first load is among the tenant's finished ones, what ran
is refused.

Which erasures joined after a load: the load saw the ledger at revision F
and no covering erasure in it (else it was refused). A covering erasure
finished since was therefore either finished before F or joined after it,
and its join record (the ledger revision R its header was added to,
:func:`.erasure_ledger.save_joined`) says which, exactly: F <= R, after
(:func:`.erasure_ledger.joined_since` says why). An erasure without one
(one an earlier version started, or one that stopped before keeping it;
or with a damaged one) may have joined at any time: it refuses as if it joined after (never the
other way round). The join records are read only when the ledger moved,
and only the last erasure's of each index chain (at most four small reads,
however often the session id was erased and used again): erasures of the
whole session all overlap, so they ran one after another, each chain lists
them in that order, and if the one that joined last joined before the load,
all did (:func:`.erasure_index.last_whole_erasures`). Each chain is read
newest first and stops there — or at an erasure of some of the session's
groups (retention) that joined before the load: the heads, usually, and
never more than :data:`.erasure_index.MAX_CHAIN_PAGES_READ` pages of one
chain (past them the check fails: nothing is committed).
"""

from __future__ import annotations

import logging

from .._errors import ErasureInProgressError, SessionConflictError
from .._ports.erasure import ErasureRecord
from .._ports.sessions import SessionStore, StoredSnapshot
from .._scope import SessionKey
from .._validators import exact_int
from .erasure_index import last_whole_erasures
from .erasure_ledger import joined_since, ledger_of, pending_key
from .lifecycle import Ticket, covers
from .load import known_fence_and_session

__all__ = ["erased_whole_since", "refuse_if_erased_since", "refuse_if_erased_since_load"]

_log = logging.getLogger("agentium.engine")


async def refuse_if_erased_since_load(
    ticket: Ticket, store: SessionStore, key: SessionKey, stored: StoredSnapshot | None
) -> tuple[int | None] | None:
    """Raise if ``key`` is being erased, or was erased or replaced since ``ticket``'s fenced load.

    Returns the ledger's revision it passed at (``(None,)``: absent), what a
    store checking the fence in its transaction may check again there
    (:func:`.commit_joint.fence_after_look`); ``None`` when nothing was checked.

    A ticket without a fenced load (erasure's own rewrites, maintenance
    under an erasure) is not checked. A session absent at the load and now,
    with the ledger moved, is checked against the tenant's finished erasures
    (:func:`_refuse_if_erased_whole`): its erasure left no revision behind.
    """
    if ticket.fence_seen is None:
        return None
    (seen,) = ticket.fence_seen
    ledger_key = pending_key(key.tenant)
    # A store that knows both rows unchanged (the SQLite store, nothing committed to the file since
    # it last read or wrote them) answers at once: a turn of the joint path pays no bounded call.
    known = known_fence_and_session(ticket, store, key)
    revision, ledger = ledger_of(
        ledger_key,
        known[0]
        if known is not None
        else await ticket.call("erasure fence", lambda ctx: store.load(ledger_key, ctx)),
    )
    for record in ledger.records:
        if covers(record.target, key):
            raise ErasureInProgressError(
                f"session {key.session!r} began to be erased ({record.target.describe()}, erasure "
                f"{record.erasure_id}) after it was loaded; nothing was committed",
                record.erasure_id,
            )
    if revision == seen:
        return (revision,)  # no erasure of the tenant began or ended since the load
    found = (
        known[1] if known is not None else await ticket.call("session load", lambda ctx: store.load(key, ctx))
    )
    now = found if isinstance(found, StoredSnapshot) else None  # anything else: the save meets it
    before = None if stored is None else stored.revision
    # The int the store's answer holds: a subclass's own ``__ne__`` could say nothing changed.
    after = None if now is None else exact_int(now.revision)
    if after != before or (now is not None and stored is not None and now.snapshot != stored.snapshot):
        raise SessionConflictError(
            f"session {key.session!r} changed since it was loaded (an erasure of tenant "
            f"{key.tenant!r} ran meanwhile; the session is now at revision {after or 0}); "
            "nothing was committed"
        )
    if now is None and stored is None:
        # Absent then and now: an erasure of the session meanwhile found nothing stored, and left
        # nothing a revision could tell. Only its tombstone says it ran.
        await _refuse_if_erased_whole(ticket, store, key, seen)
    return (revision,)


async def refuse_if_erased_since(
    ticket: Ticket, store: SessionStore, key: SessionKey, first: tuple[int | None] | None
) -> None:
    """After ``ticket`` loaded ``key`` again: raise if an erasure of it may have run since ``first``.

    ``first`` is the fence point of the operation's first load (its content
    is from then); ``ticket.fence_seen`` that of the load just made, which
    refused a covering erasure still pending. If the ledger moved in between
    (an erasure of the tenant began or ended), the tenant's finished
    erasures are read: one that took the whole session and joined the
    ledger after ``first`` (or may have: an earlier version's record)
    refuses with :class:`SessionConflictError` (a WARNING logged, no
    content). It is indexed before it leaves the ledger, so none is missed.
    """
    if first is None or ticket.fence_seen is None or ticket.fence_seen == first:
        return  # no fenced first load, or no erasure of the tenant began or ended since it
    await _refuse_if_erased_whole(ticket, store, key, first[0])


async def erased_whole_since(
    ticket: Ticket, store: SessionStore, key: SessionKey, loaded_at: int | None
) -> ErasureRecord | None:
    """A finished erasure of the whole of ``key`` that joined the ledger after revision ``loaded_at``, if any.

    ``loaded_at`` is the ledger's revision a load saw (``None``: absent
    then). One without a join record (an earlier version's) may have joined
    at any time: it is returned. Read only once the ledger moved.
    """
    # The last of each index chain (at most four), each read newest first: the one that joined last is
    # among them, and if it joined before the load, every earlier one did (they ran one after another).
    # A chain whose newest entry of the session is a groups erasure joined before the load has none.
    for candidate in await last_whole_erasures(ticket, store, key, (loaded_at,)):
        # Unknown (``None``: an earlier version's erasure) may have joined at any time: it counts.
        if await joined_since(ticket, store, candidate, loaded_at) is not False:
            return candidate
    return None


async def _refuse_if_erased_whole(
    ticket: Ticket, store: SessionStore, key: SessionKey, loaded_at: int | None
) -> None:
    """Refuse the commit if a finished erasure of the whole of ``key`` joined the ledger since ``loaded_at``.

    ``loaded_at`` is the ledger's revision at the load the commit's content
    is from (``None``: the ledger was absent then); called once it moved.
    """
    record = await erased_whole_since(ticket, store, key, loaded_at)
    if record is None:
        return
    _log.warning(
        # The operation's name first ("append", "view reset"): no article to get wrong for any.
        "%s not committed: an erasure of its session is recorded and the tenant's erasures "
        "changed since it loaded the session (erasure %s)",
        ticket.kind,
        record.erasure_id,
        extra={"agentium_operation": ticket.kind, "agentium_commit_state": "not_committed"},
    )
    raise SessionConflictError(
        f"session {key.session!r} was erased ({record.target.describe()}, erasure {record.erasure_id}) "
        f"and erasures of tenant {key.tenant!r} ran since it was loaded: what this commit holds may "
        "predate the erasure; nothing was committed"
    )
