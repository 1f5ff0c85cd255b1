"""An in-process memory store (plugin name ``memory``) for tests and development; not durable.

Same semantics as the SQLite memory store (:mod:`agentium_harness.adapters.sqlite_memory`):
revisions per fact id, duplicates acknowledged (the groups a duplicate adds
kept as the fact's next revision), correction keeps the
history, forgetting removes the content of every revision and adds a
tombstone, foreign ids refused like missing ones, lookups filtered before
they are bounded. Every call checks its context first and then runs without
awaiting, under a thread lock, so no two calls interleave (not even from two
threads' event loops).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import ClassVar

import attrs

from .._errors import InvalidArgumentError
from .._errors_memory import MemoryStoreError
from .._ports import OpContext
from .._ports.erasure import (
    DEFAULT_ERASE_BATCH,
    EraseReport,
    EraseStatus,
    EraseTarget,
    check_max_items,
    check_target,
    count_items,
)
from .._ports.memory import (
    MAX_LOOKUP_LIMIT,
    AckStatus,
    FactStatus,
    MemoryAck,
    MemoryCapabilities,
    MemoryFact,
    MemoryScope,
    MemoryStore,
    StoredFact,
    check_at,
    check_fact,
    check_limit,
    check_revision,
)
from .._ports.memory_provenance import merged_provenance
from .._ports.recall_args import checked_argument, checked_ctx
from .._scope import validate_id
from ._excerpts import query_terms
from .sqlite_memory import forgotten, new_fact_id, not_found

__all__ = ["InMemoryMemoryConfig", "InMemoryMemoryStore"]


@attrs.frozen(slots=True)
class InMemoryMemoryConfig:
    """The in-process memory store takes no options."""


def _key(fact: MemoryFact) -> tuple[object, ...]:
    s = fact.scope
    return (s.tenant, s.user, s.project, s.repository, fact.text, fact.valid_from, fact.valid_until)


def _removed(fact: MemoryFact) -> MemoryFact:
    return MemoryFact(fact.scope, "")


class InMemoryMemoryStore(MemoryStore):
    """Facts in a dict, lost with the process. Declares every capability except ``durable``."""

    capabilities: ClassVar[MemoryCapabilities] = MemoryCapabilities(
        acknowledged_writes=True, correction=True, forgetting=True, listing=True, history=True, erasure=True
    )

    def __init__(self, config: InMemoryMemoryConfig | None = None) -> None:
        self._revisions: dict[str, list[StoredFact]] = {}
        self._order: list[str] = []  # fact ids by the time their current revision was written
        # The session ids a forgotten fact's provenance named (ids only): a session erasure removes it.
        self._sessions: dict[str, frozenset[str]] = {}
        self._closed = False
        # A thread lock, not an anyio one: the store serves any thread's event loop (a runtime's runs
        # on several threads), and nothing awaits inside. Without it a remember iterating the facts
        # while another thread adds one failed ("dictionary changed size during iteration").
        self._lock = threading.Lock()

    def _begin(self, ctx: OpContext, operation: str, *scope: object) -> None:
        # Typed refusals before anything is read or written, as the SQLite store's (``scope``, when
        # the call takes one, may be anything a caller passed: None included).
        checked_ctx(ctx, operation).raise_if_expired(operation)
        for given in scope:
            checked_argument(given, MemoryScope, "scope", operation)
        if self._closed:
            raise MemoryStoreError(f"in-memory memory store: {operation} refused: the store is closed")

    def _latest(self, scope: MemoryScope, fact_id: str) -> StoredFact:
        revisions = self._revisions.get(fact_id)
        if not revisions or not scope.owns(revisions[-1].scope):
            raise not_found(fact_id)
        return revisions[-1]

    def _touch(self, fact_id: str) -> None:
        if fact_id in self._order:
            self._order.remove(fact_id)
        self._order.append(fact_id)

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        """Store ``fact`` as revision 1 of a new id, or acknowledge the current duplicate.

        A duplicate citing groups the current revision does not is written as
        its next revision with them (:func:`merged_provenance`).
        """
        self._begin(ctx, "memory remember")
        with self._lock:
            check_fact(fact)
            for fact_id, revisions in self._revisions.items():
                last = revisions[-1]
                if last.status is FactStatus.CURRENT and _key(last.fact) == _key(fact):
                    return self._merge(fact_id, last, fact)
            fact_id = new_fact_id()
            self._revisions[fact_id] = [StoredFact(fact_id, 1, FactStatus.CURRENT, fact, datetime.now(UTC))]
            self._touch(fact_id)
            return MemoryAck(AckStatus.STORED, fact_id, 1)

    def _merge(self, fact_id: str, last: StoredFact, fact: MemoryFact) -> MemoryAck:
        """A duplicate of ``last``: its new groups as its next revision, or nothing (merged_provenance)."""
        merged = merged_provenance(last.fact.provenance, fact.provenance)
        if merged is None:
            return MemoryAck(AckStatus.DUPLICATE, fact_id, last.revision)
        check_revision(last.revision)  # before anything changes: refused, nothing is written
        revisions = self._revisions[fact_id]
        revisions[-1] = attrs.evolve(last, status=FactStatus.SUPERSEDED)
        kept = attrs.evolve(last.fact, provenance=merged)
        revisions.append(StoredFact(fact_id, last.revision + 1, FactStatus.CURRENT, kept, datetime.now(UTC)))
        self._touch(fact_id)
        return MemoryAck(AckStatus.STORED, fact_id, last.revision + 1)

    async def correct(
        self, scope: MemoryScope, fact_id: str, replacement: MemoryFact, ctx: OpContext
    ) -> MemoryAck:
        """Supersede the latest revision with ``replacement``."""
        self._begin(ctx, "memory correct", scope)
        with self._lock:
            fact_id = validate_id(fact_id, "fact id")
            check_fact(replacement)
            latest = self._latest(scope, fact_id)
            if not scope.owns(replacement.scope):
                raise not_found(fact_id)
            if latest.status is FactStatus.FORGOTTEN:
                raise forgotten(fact_id)
            if _key(latest.fact) == _key(replacement):
                return self._merge(fact_id, latest, replacement)  # a duplicate: its new groups kept
            check_revision(latest.revision)
            revisions = self._revisions[fact_id]
            revisions[-1] = attrs.evolve(latest, status=FactStatus.SUPERSEDED)
            now = datetime.now(UTC)
            revisions.append(StoredFact(fact_id, latest.revision + 1, FactStatus.CURRENT, replacement, now))
            self._touch(fact_id)
            return MemoryAck(AckStatus.STORED, fact_id, latest.revision + 1)

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        """Remove the content of every revision and add a tombstone."""
        self._begin(ctx, "memory forget", scope)
        with self._lock:
            fact_id = validate_id(fact_id, "fact id")
            latest = self._latest(scope, fact_id)
            if latest.status is FactStatus.FORGOTTEN:
                return MemoryAck(AckStatus.DUPLICATE, fact_id, latest.revision)
            revisions = self._revisions[fact_id]
            self._sessions[fact_id] = frozenset(ref.session for r in revisions for ref in r.fact.provenance)
            revisions[:] = [
                attrs.evolve(r, status=FactStatus.FORGOTTEN, fact=_removed(r.fact)) for r in revisions
            ]
            tombstone = StoredFact(
                fact_id, latest.revision + 1, FactStatus.FORGOTTEN, _removed(latest.fact), datetime.now(UTC)
            )
            revisions.append(tombstone)
            return MemoryAck(AckStatus.STORED, fact_id, latest.revision + 1)

    def _current(self) -> list[StoredFact]:
        newest_first = [self._revisions[fid][-1] for fid in reversed(self._order)]
        return [f for f in newest_first if f.status is FactStatus.CURRENT]

    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: OpContext, *, at: datetime | None = None
    ) -> Sequence[StoredFact]:
        """Current facts ``scope`` sees, valid at ``at``: most query words matched first, then newest."""
        self._begin(ctx, "memory lookup", scope)
        with self._lock:
            check_limit(limit)
            if not isinstance(query, str):
                raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
            checked = check_at(at)
            when = checked if checked is not None else datetime.now(UTC)
            terms = query_terms(query)
            visible = [f for f in self._current() if scope.sees(f.scope) and f.fact.valid_at(when)]
            scored = sorted(
                enumerate(visible), key=lambda p: (-sum(t in p[1].text.lower() for t in terms), p[0])
            )
            return [f for _, f in scored[:limit]]

    async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> Sequence[StoredFact]:
        """Current facts of the tenant and user, newest first; expired ones too."""
        self._begin(ctx, "memory list", scope)
        with self._lock:
            check_limit(limit)
            return [f for f in self._current() if scope.owns(f.scope)][:limit]

    async def history(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> Sequence[StoredFact]:
        """Every revision of ``fact_id``, oldest first."""
        self._begin(ctx, "memory history", scope)
        with self._lock:
            fact_id = validate_id(fact_id, "fact id")
            self._latest(scope, fact_id)
            return list(self._revisions[fact_id][:MAX_LOOKUP_LIMIT])

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        """Drop every revision of each covered fact (tombstones too); at most ``max_items`` facts."""
        self._begin(ctx, "memory erase")
        # A str such as "no" would be truthy: a dry run asked for by mistake, or the reverse.
        checked_argument(dry_run, bool, "dry_run", "memory erase")
        with self._lock:
            check_target(target)
            bound = check_max_items(max_items)
            found = sorted(
                fid
                for fid, revisions in self._revisions.items()
                if self._covered(target, revisions) or self._named(target, fid, revisions)
            )
            taken = found[:bound]
            revisions = sum(len(self._revisions[fid]) for fid in taken)
            if not dry_run:
                for fid in taken:
                    del self._revisions[fid]
                    self._sessions.pop(fid, None)
                    if fid in self._order:
                        self._order.remove(fid)
            return EraseReport(
                count_items(fact=len(taken), revision=revisions),
                (),
                EraseStatus.PARTIAL if len(found) > bound else EraseStatus.COMPLETE,
            )

    @staticmethod
    def _covered(target: EraseTarget, revisions: list[StoredFact]) -> bool:
        # Forgetting empties provenance, so a session's sources are looked for in every revision.
        scope = revisions[-1].scope
        if target.session_id is None:
            return target.covers_fact(scope, ())
        return any(target.covers_fact(scope, r.fact.provenance) for r in revisions)

    def _named(self, target: EraseTarget, fact_id: str, revisions: list[StoredFact]) -> bool:
        # A forgotten fact's sources are gone from its revisions; its tombstone keeps their session ids.
        sessions = self._sessions.get(fact_id, frozenset())
        scope = revisions[-1].scope
        return (
            target.session_id in sessions
            and not target.groups
            and (scope.tenant, scope.user) == (target.tenant_id, target.user_id)
        )

    async def aclose(self) -> None:
        """Refuse later calls (the facts are dropped with the object)."""
        self._closed = True
