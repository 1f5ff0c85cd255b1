"""The joint commit's parts: what a commit did, the store's shared transaction, its fence, a landed one.

Split from :mod:`.commit`, which runs them: the record of one commit
(:class:`CommitOutcome`), whether the session store and the archive share a
transaction (:func:`shares_transaction`), the commit fence a store checks
inside that transaction (:func:`transaction_fence`), the outcome of a joint
commit that raised but had landed (:func:`landed_joint`), and the
archived-groups hook (:func:`broadcast_archived`).
"""

from __future__ import annotations

import attrs

from .._history import MessageGroup
from .._observe import spans as observe
from .._ports._base import capabilities_of
from .._ports.archive import ArchiveReceipt, HistoryArchive
from .._ports.sessions import ArchivedDigest, SessionStore
from .._scope import SessionKey
from .._text import error_text
from .archive_receipts import archive_groups
from .erasure_ledger import pending_key
from .hooks import HookBroadcaster, broadcast
from .lifecycle import Ticket
from .resident import EvictionPlan
from .results import Diagnostic, EvictionStatus, Severity
from .settle import Settled

__all__ = [
    "FENCED_ATTEMPTS",
    "FENCED_COMMIT",
    "CommitOutcome",
    "broadcast_archived",
    "fence_after_look",
    "landed_joint",
    "shares_transaction",
    "transaction_fence",
]

#: The method of a session store's own class that checks the commit fence inside its joint commit's
#: transaction (the built-in SQLite store): ``(archive, key, groups, snapshot, expected_revision,
#: fence, ctx)``, answering ``None`` when the fence moved (rolled back, nothing written).
FENCED_COMMIT = "_agentium_commit_fenced"


@attrs.frozen(slots=True)
class CommitOutcome:
    """What one commit did."""

    revision: int
    boundary: int
    resident: tuple[MessageGroup, ...]
    archived: tuple[ArchiveReceipt, ...]
    eviction: EvictionStatus
    diagnostics: tuple[Diagnostic, ...]
    #: The groups ``archived`` acknowledges, same order: what a recall index follows.
    archived_groups: tuple[MessageGroup, ...] = ()
    #: The receipt digests the snapshot now holds (``SessionSnapshot.receipts``): what the summary checks.
    receipts: tuple[ArchivedDigest, ...] = ()


def shares_transaction(store: SessionStore, archive: HistoryArchive) -> bool:
    """True when the store declares joint commits and shares a transaction with this archive."""
    caps = capabilities_of(store)
    if not getattr(caps, "joint_archive_commit", False):
        return False
    try:
        return bool(store.shares_transactions_with(archive))
    except Exception:  # an adapter's check failing only means: no joint commit
        return False


def transaction_fence(
    ticket: Ticket, store: SessionStore, key: SessionKey
) -> tuple[SessionKey, int | None] | None:
    """What the store checks inside its joint commit's transaction instead of the look before it, if it can.

    The tenant's erasure ledger and the revision the ticket's fenced load
    saw (:func:`.commit_fence.refuse_if_erased_since_load` looks at the
    same): while the transaction holds the write lock no erasure begins or
    ends, and a ledger still at that revision is one the look would pass
    (the load refused a covering erasure in it). Only a store whose own
    class (not a subclass, which may override the commit) has
    :data:`FENCED_COMMIT`, with nothing recording (the look's reads keep
    their spans otherwise), and a ticket with a fenced load; ``None``
    otherwise: the look runs before the commit, as for every other store.
    """
    seen = ticket.fence_seen
    if seen is None or FENCED_COMMIT not in type(store).__dict__ or observe.current() is not None:
        return None
    return pending_key(key.tenant), seen[0]


#: Transactions one joint commit tries with the fence checked in them: the first at the revision the
#: load saw, each later one at the revision of the look taken after the ledger moved. Past them (the
#: tenant's erasures kept landing in between), the last runs after its look as for any store: never
#: refused for that alone.
FENCED_ATTEMPTS = 4


def fence_after_look(
    fence: tuple[SessionKey, int | None] | None, looked: tuple[int | None] | None, moves: int
) -> tuple[SessionKey, int | None] | None:
    """The fence of the commit run again after the ledger moved ``moves`` times and the look passed.

    The ledger at the revision the look saw (``looked``): while it is still
    there, no erasure began or ended since that look, so the look's answer
    stands in the transaction too, and an erasure begun after the engine's
    last look is refused as after the load. ``None`` (the commit runs after
    the look as for any store) past :data:`FENCED_ATTEMPTS`, or with nothing looked at.
    """
    if fence is None or looked is None or moves >= FENCED_ATTEMPTS:
        return None
    return fence[0], looked[0]


async def landed_joint(
    ticket: Ticket,
    archive: HistoryArchive,
    hooks: HookBroadcaster | None,
    key: SessionKey,
    plan: EvictionPlan,
    boundary: int,
    settled: Settled,
    exc: Exception,
) -> CommitOutcome:
    """The outcome of a joint commit that raised but had landed (read back): its receipts asked again.

    The archive holds the groups (the store commits both or neither), so
    appending them again is a no-op that returns their receipts; if even that
    fails the commit stands and only the receipts are missing.
    """
    assert settled.revision is not None
    notes = [
        Diagnostic(
            "save_settled",
            f"the joint archive-and-save transaction raised {error_text(exc)}; {settled.how}, "
            "so the turn is committed",
            Severity.WARNING,
        )
    ]
    receipts: tuple[ArchiveReceipt, ...] = ()
    try:
        receipts = await archive_groups(ticket, archive, key, plan.evict)
    except Exception as again:
        notes.append(
            Diagnostic(
                "archive_receipts_missing",
                f"the archived groups' receipts could not be read again ({type(again).__name__}: {again})",
                Severity.WARNING,
            )
        )
    if receipts and hooks is not None:
        notes.extend(await broadcast_archived(hooks, key, receipts, plan.evict, ticket.hook_timeout_s))
    return CommitOutcome(
        settled.revision,
        boundary,
        plan.keep,
        receipts,
        EvictionStatus.ARCHIVED,
        tuple(notes),
        plan.evict if receipts else (),
    )


async def broadcast_archived(
    hooks: HookBroadcaster,
    key: SessionKey,
    receipts: tuple[ArchiveReceipt, ...],
    groups: tuple[MessageGroup, ...],
    timeout_s: float,
) -> list[Diagnostic]:
    """Broadcast ``agentium_groups_archived`` off the event loop, bounded; report failures."""
    return await broadcast(
        hooks, "agentium_groups_archived", timeout_s, key=key, receipts=receipts, groups=groups
    )
