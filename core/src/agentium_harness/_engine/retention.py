"""Retention: archived groups past a policy leave through the erasure path, only when asked (docs/erasure.md).

A :class:`RetentionPolicy` (``[retention]``) bounds each session's archived
groups by count (keep the newest ``max_archived_groups``) and by age
(``max_age_days``, read from the snapshot's archive marks). Nothing happens
during a turn: ``runtime.apply_retention()`` (``agentium retention apply``)
finds, per session of the target, the archived groups past the policy and
erases them as a groups erasure — the same record, fence, late-write wait,
per-store erase, verification and tombstone as any erasure, one tombstone
per session trimmed. The session lives on: its snapshot records the groups
erased, its task summary keeps its text and marks the citations of erased
groups ``erased``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._errors import (
    CapabilityError,
    ContractViolationError,
    ErasureIncompleteError,
    ErasureInProgressError,
    InvalidArgumentError,
    LegacySnapshotError,
    ScopeMismatchError,
    SessionBusyError,
    SnapshotCorruptError,
)
from .._observe.logs import one_line
from .._observe.spans import current_span_event, error_type
from .._observe.turn import settings_of
from .._ports import OpContext
from .._ports._base import capabilities_of
from .._ports.erasure import EraseStatus, EraseTarget, ErasureKind, SeqRange
from .._ports.sessions import SessionSnapshot, SessionStore
from .._scope import SessionKey
from .._text import error_text
from .._validators import bounded_count, exact_number, keep_exact, shown_number, valid_ids
from .adapter_lists import adapter_method, bounded_list
from .erasure import ErasureResult, OperatorAttestation
from .erasure_reports import check_report
from .lifecycle import Ticket
from .load import load_session
from .results import CommitState
from .unexpected import WriteProgress

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = [
    "MAX_RETENTION_DAYS",
    "MAX_RETENTION_SESSIONS",
    "RetentionPolicy",
    "RetentionResult",
    "apply_policy",
    "retention_cutoff",
    "sessions_of",
]


#: A session whose stored snapshot cannot be read as it stands: passed over, the others are still trimmed.
_UNREADABLE: Final = (SnapshotCorruptError, LegacySnapshotError, ScopeMismatchError)

#: The longest age a policy may name, in days (100 years).
MAX_RETENTION_DAYS: Final = 36_500.0


def _days(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    days = exact_number(value)  # a subclass as its number: its own comparisons are not trusted
    if days is None or not 0 < days <= MAX_RETENTION_DAYS:  # (nan and inf fail it too)
        raise InvalidArgumentError(
            f"{attribute.name} must be a number of days in (0, {MAX_RETENTION_DAYS:g}], "
            f"got {shown_number(value)}"
        )
    keep_exact(instance, attribute, value, days)


@attrs.frozen(slots=True)
class RetentionPolicy:
    """How long archived history is kept, per session (``[retention]``); at least one bound.

    - ``max_archived_groups``: keep a session's newest N archived groups
      still stored (groups erased earlier are not counted); older ones go.
    - ``max_age_days``: archived groups archived more than this many days
      ago go (their age is when they were archived, read from the
      snapshot's archive marks; groups archived before marks existed take
      the time of the first mark after them, so they go later, never earlier).

    Resident groups are never touched: retention erases archived history
    only. The policy does nothing by itself; ``apply_retention`` applies it.
    """

    max_archived_groups: int | None = attrs.field(default=None, validator=bounded_count(optional=True))
    max_age_days: float | None = attrs.field(default=None, validator=_days)

    def __attrs_post_init__(self) -> None:
        if self.max_archived_groups is None and self.max_age_days is None:
            raise InvalidArgumentError(
                "a retention policy needs max_archived_groups or max_age_days (or both)"
            )


def retention_cutoff(policy: RetentionPolicy, snap: SessionSnapshot, now: datetime) -> int:
    """The seq below which ``policy`` erases archived groups of the session (0: none)."""
    cutoff = 0
    if policy.max_archived_groups is not None:
        cutoff = max(cutoff, _keeping(snap.boundary, policy.max_archived_groups, snap.erased or ()))
    if policy.max_age_days is not None:
        oldest = now - timedelta(days=policy.max_age_days)
        aged = [mark.below for mark in snap.archived or () if mark.at < oldest]
        cutoff = max([cutoff, *aged])
    return min(cutoff, snap.boundary)


def _keeping(boundary: int, keep: int, erased: Sequence[SeqRange]) -> int:
    """The seq below which archived groups go so that the newest ``keep`` still stored remain.

    Groups erased earlier (a forgotten fact's sources) are not counted as
    kept: the policy keeps ``keep`` groups that exist, never fewer.
    """
    stop, left = boundary, keep
    for erased_range in sorted(erased, key=lambda r: r.start, reverse=True):
        if erased_range.start >= stop:
            continue
        stored = stop - min(erased_range.stop, stop)  # the groups stored in [range's stop, stop)
        if stored >= left:
            return stop - left
        left -= stored
        stop = erased_range.start
    return max(0, stop - left)


def already_erased(snap: SessionSnapshot, cutoff: int) -> bool:
    """True when every group below ``cutoff`` is already recorded erased."""
    return any(r.start == 0 and r.stop >= cutoff for r in snap.erased or ())


def retention_ranges(cutoff: int) -> Sequence[SeqRange]:
    """The seq ranges a retention erasure below ``cutoff`` names."""
    return (SeqRange(0, cutoff),)


def now_utc() -> datetime:
    """The time retention measures ages from."""
    return datetime.now(UTC)


@attrs.frozen(slots=True)
class RetentionResult:
    """What one application of the retention policy did.

    ``erasures`` has one result per session trimmed (each record a
    tombstone; ``planned`` for a dry run). ``checked`` counts the sessions
    looked at; ``notes`` says what was passed over and why (a session busy,
    being erased or whose snapshot cannot be read, more sessions than one
    application takes).
    """

    policy: RetentionPolicy
    checked: int
    erasures: tuple[ErasureResult, ...] = ()
    notes: tuple[str, ...] = ()


_log = logging.getLogger("agentium.engine.erasure")

#: Sessions one application looks at, at most (a tenant's are listed by the session store's erase dry run).
MAX_RETENTION_SESSIONS: Final = 10_000
#: Session ids read per listing page (a user's sessions, when the store declares ``listing``).
_LIST_PAGE: Final = 500


def _page(
    store: SessionStore, tenant: str, user: str, after: str | None
) -> Callable[[OpContext], Awaitable[list[str]]]:
    def call(ctx: OpContext) -> Awaitable[list[str]]:
        return store.list_sessions(tenant, user, _LIST_PAGE, ctx, after=after)

    return call


async def sessions_of(
    ticket: Ticket, store: SessionStore, target: EraseTarget
) -> tuple[list[SessionKey], bool]:
    """The sessions of ``target`` retention looks at, and whether there were more than it takes."""
    key = target.session_key
    if key is not None:
        return [key], False
    caps = capabilities_of(store)
    if target.user_id is not None and getattr(caps, "listing", False):
        found: list[SessionKey] = []
        after: str | None = None
        tenant, user = target.tenant_id, target.user_id
        while len(found) < MAX_RETENTION_SESSIONS:
            raw = await ticket.call("session listing", _page(store, tenant, user, after))
            # Read to one past the page at most, each an id, before any session is looked at: an
            # answer that never ends, or is over its bound, is refused and nothing is erased.
            given = bounded_list(
                raw, _LIST_PAGE, adapter_method("session store", store, "list_sessions"), "ids", str
            )
            page = [str.__str__(sid) for sid in given]  # a subclass's own comparisons are never used
            if (after is not None and page and page[0] <= after) or any(a >= b for a, b in pairwise(page)):
                # A listing that does not move past its cursor would be read again without end, and
                # one naming a session twice would have it trimmed twice: the port owes ascending ids.
                raise ContractViolationError(
                    f"session store {type(store).__name__}.list_sessions returned ids not strictly "
                    "ascending after the cursor; nothing was erased"
                )
            if not valid_ids(page):
                # A SessionKey refused it as the host's bad id (InvalidIdError): the store's fault.
                raise ContractViolationError(
                    f"session store {type(store).__name__}.list_sessions listed a session id no session "
                    "key holds; nothing was erased"
                )
            found.extend(SessionKey(tenant, user, sid) for sid in page)
            if len(page) < _LIST_PAGE:
                return found[:MAX_RETENTION_SESSIONS], len(found) > MAX_RETENTION_SESSIONS
            after = page[-1]
        return found[:MAX_RETENTION_SESSIONS], True
    # A tenant (or a user without listing): what a dry-run erase of the scope would take, bounded.
    if not getattr(caps, "erasure", False):
        raise CapabilityError(
            f"session store {type(store).__name__} can list neither the sessions of {target.describe()} "
            "(no listing) nor any scope (no erasure); apply retention to one session at a time"
        )
    report = await ticket.call(
        "session store erase (listing)",
        lambda ctx: store.erase(target, ctx, dry_run=True, max_items=MAX_RETENTION_SESSIONS),
    )
    # Held to the erase port's contract like any erase report: at most one session per item of the
    # bound (never more sessions loaded than the call asked for), each an entry in the target. A
    # session named twice (once per kind of item) is looked at once.
    checked = check_report(report, target, "session_store", MAX_RETENTION_SESSIONS, dry_run=True)
    keys = list(dict.fromkeys(entry.session for entry in checked.sessions))
    return keys, checked.status is EraseStatus.PARTIAL


async def apply_policy(
    runtime: HarnessRuntime,
    policy: RetentionPolicy,
    target: EraseTarget,
    reason: str,
    attestation: OperatorAttestation,
    *,
    dry_run: bool,
    progress: WriteProgress | None = None,
) -> RetentionResult:
    """Apply ``policy`` to every session of ``target``: one groups erasure per session past it.

    ``progress`` turns ``unknown`` once an erasure began writing (what an error must say was erased).
    """
    from .erasure_api import run_erasure  # the API module imports this one

    admission, store = runtime.parts.admission, runtime.session_store
    async with admission.admit_shared(None, "retention listing") as ticket:
        keys, more = await sessions_of(ticket, store, target)
    notes: list[str] = []
    if more:
        # A store's listing may stop short of the bound (partial: SQLite's read budget, say).
        notes.append(
            f"more than {MAX_RETENTION_SESSIONS} sessions: apply retention again, or per user, for the rest"
            if len(keys) >= MAX_RETENTION_SESSIONS
            else f"the session store listed {len(keys)} session(s) and said there are more (partial): "
            "apply retention again, or per user, for the rest"
        )
    now = now_utc()
    results: list[ErasureResult] = []
    for key in keys:
        try:
            async with admission.admit_shared(key, "retention check") as ticket:
                stored, snap = await load_session(ticket, store, key, None, attest_legacy=False)
        except ErasureInProgressError as exc:
            notes.append(f"session {key.key()}: passed over, {exc}")
            _passed_over(runtime, key, exc)
            continue
        except _UNREADABLE as exc:
            # One damaged session must not stop the application part way: the sessions before it
            # are already trimmed (their tombstones stand) and those after it would never be. The
            # error's type only: a decoder's message may quote the stored bytes.
            _passed_over(runtime, key, exc)
            notes.append(
                f"session {key.key()}: passed over, its snapshot cannot be read ({type(exc).__name__})"
            )
            continue
        cutoff = retention_cutoff(policy, snap, now)
        if stored is None or cutoff <= 0 or already_erased(snap, cutoff):
            continue
        groups = EraseTarget.groups_of(key, retention_ranges(cutoff))
        erasure = WriteProgress()
        try:
            results.append(
                await run_erasure(
                    runtime,
                    groups,
                    reason,
                    attestation,
                    ErasureKind.RETENTION,
                    dry_run=dry_run,
                    progress=erasure,
                )
            )
        except (SessionBusyError, ErasureInProgressError, ErasureIncompleteError) as exc:
            notes.append(f"session {key.key()}: {error_text(exc)}")
            if not isinstance(exc, ErasureIncompleteError):  # that one run_erasure has logged
                _passed_over(runtime, key, exc)
        finally:
            # The call may have erased once one of its erasures began writing (its record; or a pending
            # one resumed). One refused before that (a typed error of its own, or passed over above)
            # wrote nothing: were the call marked before it ran, an error of this erasure or a later
            # one said "unknown", the sessions "trimmed before" standing, with none trimmed.
            if progress is not None and erasure.commit_state is not CommitState.NOT_COMMITTED:
                progress.saving()
    return RetentionResult(policy, len(keys), tuple(results), tuple(notes))


def _passed_over(runtime: HarnessRuntime, key: SessionKey, exc: Exception) -> None:
    """A session retention passed over keeps groups past the policy: a WARNING, its id hashed, no text."""
    session = settings_of(runtime).ident(key.tenant, key.user, key.session)
    _log.warning(
        "retention passed over session %s (%s); apply retention again for it",
        one_line(session),
        error_type(exc),
        extra={"agentium_session": session, "agentium_error_type": error_type(exc)},
    )
    # On the agentium.retention span (the id is on the WARNING only: one event per session passed over).
    current_span_event("agentium.retention.passed_over", {"error.type": error_type(exc)})
