"""Memory stores with one realistic bug each, run through MemoryStoreContract by a pytester session.

Each wraps the real SQLite memory store and changes one behaviour.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentium_harness.adapters._sqlite_memory_sql import COLUMNS, decode_row
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.sqlite import SQLiteConfig
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import (
    MAX_LOOKUP_LIMIT,
    AckStatus,
    FactStatus,
    MemoryAck,
    MemoryCapabilities,
    MemoryFact,
    MemoryFactNotFoundError,
    MemoryRejectedError,
    MemoryScope,
    OpContext,
    StoredFact,
    rejection_reason,
)
from agentium_harness.testing import MemoryStoreContract

pytestmark = pytest.mark.anyio

CAPS = SQLiteMemoryStore.capabilities


async def _raw(
    store: SQLiteMemoryStore, sql: str, params: tuple[Any, ...], ctx: OpContext
) -> list[StoredFact]:
    def work(conn: sqlite3.Connection) -> list[StoredFact]:
        return [decode_row(r) for r in conn.execute(sql, params).fetchall()]

    return await store.run(ctx, "broken lookup", work)


class InheritedCaps(SQLiteMemoryStore):
    pass


class NoDuplicates(SQLiteMemoryStore):
    """Reports a duplicate as a newly stored fact."""

    capabilities = CAPS

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        ack = await super().remember(fact, ctx)
        return attrs.evolve(ack, status=AckStatus.STORED) if ack.status is AckStatus.DUPLICATE else ack


class LosesProvenance(SQLiteMemoryStore):
    """Drops the groups a fact came from."""

    capabilities = CAPS

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        return await super().remember(attrs.evolve(fact, provenance=()), ctx)


def _same_content(one: MemoryFact, other: MemoryFact) -> bool:
    return (one.scope, one.text, one.valid_from, one.valid_until) == (
        other.scope,
        other.text,
        other.valid_from,
        other.valid_until,
    )


class DropsDuplicateProvenance(SQLiteMemoryStore):
    """Acknowledges a duplicate remember without keeping the groups it cites (what every store once did)."""

    capabilities = CAPS

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        for current in await self.list_facts(fact.scope, MAX_LOOKUP_LIMIT, ctx):
            if _same_content(current.fact, fact):
                return MemoryAck(AckStatus.DUPLICATE, current.fact_id, current.revision, durable=True)
        return await super().remember(fact, ctx)


class DropsCorrectionProvenance(SQLiteMemoryStore):
    """Answers a correction to the same text as a duplicate without keeping the groups it cites."""

    capabilities = CAPS

    async def correct(
        self, scope: MemoryScope, fact_id: str, replacement: MemoryFact, ctx: OpContext
    ) -> MemoryAck:
        latest = (await self.history(scope, fact_id, ctx))[-1]
        if latest.status is FactStatus.CURRENT and _same_content(latest.fact, replacement):
            return MemoryAck(AckStatus.DUPLICATE, fact_id, latest.revision, durable=True)
        return await super().correct(scope, fact_id, replacement, ctx)


class DropsProvenancePastTheBound(InMemoryMemoryStore):
    """Answers a duplicate that would cite over MAX_PROVENANCE groups as a plain duplicate, dropping them."""

    capabilities = InMemoryMemoryStore.capabilities

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        try:
            return await super().remember(fact, ctx)
        except MemoryRejectedError:
            if rejection_reason(fact) is not None:
                raise  # a bad fact: refused, as it must be
            [current] = [f for f in self._current() if _same_content(f.fact, fact)]
            return MemoryAck(AckStatus.DUPLICATE, current.fact_id, current.revision)


class RepairsBadFacts(SQLiteMemoryStore):
    """Silently truncates, rewrites ``<`` and reorders windows instead of refusing."""

    capabilities = CAPS

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        text = fact.text[:4000].replace("<", "(")
        start, end = fact.valid_from, fact.valid_until
        if start is not None and end is not None and end <= start:
            start, end = end, start
        return await super().remember(attrs.evolve(fact, text=text, valid_from=start, valid_until=end), ctx)


class LeaksTenants(SQLiteMemoryStore):
    """Looks up by user id only: another tenant's user of the same id sees the facts."""

    capabilities = CAPS

    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: OpContext, *, at: datetime | None = None
    ) -> Sequence[StoredFact]:
        ctx.raise_if_expired("memory lookup")
        sql = f"SELECT {COLUMNS} FROM memory_facts WHERE user_id = ? AND status = 'current' LIMIT ?"
        found = await _raw(self, sql, (scope.user, limit), ctx)
        return [f for f in found if f.fact.valid_at(at or datetime.now().astimezone())]


class FiltersAfterLimit(SQLiteMemoryStore):
    """Takes the newest rows of everyone, then filters: foreign rows take the places."""

    capabilities = CAPS

    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: OpContext, *, at: datetime | None = None
    ) -> Sequence[StoredFact]:
        ctx.raise_if_expired("memory lookup")
        sql = f"SELECT {COLUMNS} FROM memory_facts WHERE status = 'current' ORDER BY rowid DESC LIMIT ?"
        found = await _raw(self, sql, (limit,), ctx)
        when = at or datetime.now().astimezone()
        return [f for f in found if scope.sees(f.scope) and f.fact.valid_at(when)]


class ReturnsExpired(SQLiteMemoryStore):
    """Ignores validity windows."""

    capabilities = CAPS

    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: OpContext, *, at: datetime | None = None
    ) -> Sequence[StoredFact]:
        ctx.raise_if_expired("memory lookup")
        sql = (
            f"SELECT {COLUMNS} FROM memory_facts WHERE tenant_id = ? AND user_id = ? AND status = 'current' "
            "ORDER BY rowid DESC LIMIT ?"
        )
        found = await _raw(self, sql, (scope.tenant, scope.user, limit), ctx)
        return [f for f in found if scope.sees(f.scope)]


class LosesHistory(SQLiteMemoryStore):
    """Shows only the latest revision in the history (a correction that overwrites)."""

    capabilities = CAPS

    async def history(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> Sequence[StoredFact]:
        return list(await super().history(scope, fact_id, ctx))[-1:]


class IgnoresRevisionCap(InMemoryMemoryStore):
    """Lets a fact grow past MAX_FACT_REVISIONS (writes the correction the cap refuses)."""

    capabilities = InMemoryMemoryStore.capabilities

    async def correct(
        self, scope: MemoryScope, fact_id: str, replacement: MemoryFact, ctx: OpContext
    ) -> MemoryAck:
        try:
            return await super().correct(scope, fact_id, replacement, ctx)
        except MemoryRejectedError:
            revisions = self._revisions[fact_id]
            latest = revisions[-1]
            revisions[-1] = attrs.evolve(latest, status=FactStatus.SUPERSEDED)
            revision = latest.revision + 1
            now = latest.recorded_at
            revisions.append(StoredFact(fact_id, revision, FactStatus.CURRENT, replacement, now))
            return MemoryAck(AckStatus.STORED, fact_id, revision)


class ForgetDoesNothing(SQLiteMemoryStore):
    """Acknowledges a forget without removing anything."""

    capabilities = CAPS

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        ctx.raise_if_expired("memory forget")
        found = await super().history(scope, fact_id, ctx)
        return MemoryAck(AckStatus.STORED, fact_id, found[-1].revision, durable=True)


class RevealsForeignIds(SQLiteMemoryStore):
    """Says when an id exists but belongs to someone else."""

    capabilities = CAPS

    async def _exists(self, fact_id: str, ctx: OpContext) -> bool:
        sql = f"SELECT {COLUMNS} FROM memory_facts WHERE fact_id = ? LIMIT 1"
        return bool(await _raw(self, sql, (fact_id,), ctx))

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        try:
            return await super().forget(scope, fact_id, ctx)
        except MemoryFactNotFoundError:
            if await self._exists(fact_id, OpContext.with_timeout(30.0)):
                raise MemoryFactNotFoundError(f"fact {fact_id!r} belongs to another tenant") from None
            raise


class IgnoresDeadline(SQLiteMemoryStore):
    capabilities = CAPS

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        return await super().remember(fact, OpContext.with_timeout(30.0))


class ForgetsUndeclared(SQLiteMemoryStore):
    """Declares no forgetting but forgets anyway."""

    capabilities = MemoryCapabilities(acknowledged_writes=True, correction=True, listing=True, history=True)


class ListsOldestFirst(SQLiteMemoryStore):
    capabilities = CAPS

    async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> Sequence[StoredFact]:
        ctx.raise_if_expired("memory list")
        sql = (
            f"SELECT {COLUMNS} FROM memory_facts WHERE tenant_id = ? AND user_id = ? AND status = 'current' "
            "ORDER BY rowid LIMIT ?"
        )
        return await _raw(self, sql, (scope.tenant, scope.user, limit), ctx)


class JoinsIds(SQLiteMemoryStore):
    """Keys scopes by joining tenant and user with '/' (not injective)."""

    capabilities = CAPS

    @staticmethod
    def _j(scope: MemoryScope) -> MemoryScope:
        return MemoryScope(f"{scope.tenant}/{scope.user}", "-", scope.project, scope.repository)

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        return await super().remember(attrs.evolve(fact, scope=self._j(fact.scope)), ctx)

    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: OpContext, *, at: datetime | None = None
    ) -> Sequence[StoredFact]:
        found = await super().lookup(self._j(scope), query, limit, ctx, at=at)
        return [attrs.evolve(f, fact=attrs.evolve(f.fact, scope=scope)) for f in found]

    async def correct(
        self, scope: MemoryScope, fact_id: str, replacement: MemoryFact, ctx: OpContext
    ) -> MemoryAck:
        fixed = attrs.evolve(replacement, scope=self._j(replacement.scope))
        return await super().correct(self._j(scope), fact_id, fixed, ctx)

    async def forget(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> MemoryAck:
        return await super().forget(self._j(scope), fact_id, ctx)

    async def history(self, scope: MemoryScope, fact_id: str, ctx: OpContext) -> Sequence[StoredFact]:
        found = await super().history(self._j(scope), fact_id, ctx)
        return [attrs.evolve(f, fact=attrs.evolve(f.fact, scope=scope)) for f in found]

    async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> Sequence[StoredFact]:
        found = await super().list_facts(self._j(scope), limit, ctx)
        return [attrs.evolve(f, fact=attrs.evolve(f.fact, scope=scope)) for f in found]


class JoinsOwnerOnChange(SQLiteMemoryStore):
    """Checks who may change a fact by comparing ``tenant/user`` joined with '/' (lookup is right).

    Tenant ``a`` with user ``b/c`` is then tenant ``a/b`` with user ``c``: one
    tenant corrects, forgets and reads the history of another's fact.
    """

    capabilities = CAPS

    @staticmethod
    def _latest(conn: sqlite3.Connection, scope: MemoryScope, fact_id: str) -> StoredFact:
        row = conn.execute(
            f"SELECT {COLUMNS} FROM memory_facts WHERE fact_id = ? ORDER BY revision DESC LIMIT 1",
            (fact_id,),
        ).fetchone()
        if row is None or f"{row[2]}/{row[3]}" != f"{scope.tenant}/{scope.user}":
            raise MemoryFactNotFoundError(f"no fact {fact_id!r} in this tenant and user")
        return decode_row(row)


class NotesAbsentAsTilde(InMemoryMemoryStore):
    """Keys facts by scope with an absent project or repository written as '~' (another id can spell it)."""

    capabilities = InMemoryMemoryStore.capabilities

    @staticmethod
    def _k(scope: MemoryScope) -> MemoryScope:
        return MemoryScope(scope.tenant, scope.user, scope.project or "~", scope.repository or "~")

    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: OpContext, *, at: datetime | None = None
    ) -> Sequence[StoredFact]:
        # Every fact of the tenant and user, filtered on the '~'-keyed project and repository.
        found = await super().lookup(
            MemoryScope(scope.tenant, scope.user), query, MAX_LOOKUP_LIMIT, ctx, at=at
        )
        owner = await self.list_facts(scope, MAX_LOOKUP_LIMIT, ctx)
        wanted = self._k(scope)
        keep = [
            f
            for f in {f.fact_id: f for f in [*found, *owner]}.values()
            if self._k(f.scope).project in (wanted.project, "~")
            and self._k(f.scope).repository in (wanted.repository, "~")
            and f.fact.valid_at(at or datetime.now().astimezone())
        ]
        return keep[:limit]


def _running_loop() -> object:
    """The running event loop (asyncio) or run (trio), as a client library would bind to it."""
    import sniffio

    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_trio_token()
    import asyncio

    return asyncio.get_running_loop()


class _FirstLoopClient:
    """A client bound to the event loop of its first call, as asyncio streams, redis.asyncio and httpx pools
    are: from any other loop it fails, as they do (``attached to a different loop``)."""

    _bound_loop: object = None

    def _client(self) -> None:
        loop = _running_loop()
        if self._bound_loop is None:
            self._bound_loop = loop
        elif self._bound_loop is not loop:
            raise RuntimeError("Future attached to a different loop")


class LoopBound(_FirstLoopClient, SQLiteMemoryStore):
    """Keeps the client of its first event loop and uses it from every other loop."""

    capabilities = CAPS

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> MemoryAck:
        self._client()
        return await super().remember(fact, ctx)


class NotDurable(SQLiteMemoryStore):
    """Acknowledges durable writes, but a reopened store starts from a different (empty) file."""

    capabilities = CAPS


def _store(cls: type[SQLiteMemoryStore]) -> Callable[..., Any]:
    @pytest.fixture
    async def memory_store(self: Any, tmp_path: Path) -> AsyncIterator[SQLiteMemoryStore]:
        store = cls(SQLiteConfig(path=str(tmp_path / "memory.db")))
        yield store
        await store.aclose()

    return memory_store


class TestLoopBound(MemoryStoreContract):
    memory_store = _store(LoopBound)


class TestInheritedCaps(MemoryStoreContract):
    memory_store = _store(InheritedCaps)


class TestNoDuplicates(MemoryStoreContract):
    memory_store = _store(NoDuplicates)


class TestLosesProvenance(MemoryStoreContract):
    memory_store = _store(LosesProvenance)


class TestDropsDuplicateProvenance(MemoryStoreContract):
    memory_store = _store(DropsDuplicateProvenance)


class TestDropsCorrectionProvenance(MemoryStoreContract):
    memory_store = _store(DropsCorrectionProvenance)


class TestDropsProvenancePastTheBound(MemoryStoreContract):
    @pytest.fixture
    def memory_store(self) -> InMemoryMemoryStore:
        return DropsProvenancePastTheBound()


class TestRepairsBadFacts(MemoryStoreContract):
    memory_store = _store(RepairsBadFacts)


class TestLeaksTenants(MemoryStoreContract):
    memory_store = _store(LeaksTenants)


class TestFiltersAfterLimit(MemoryStoreContract):
    memory_store = _store(FiltersAfterLimit)


class TestReturnsExpired(MemoryStoreContract):
    memory_store = _store(ReturnsExpired)


class TestLosesHistory(MemoryStoreContract):
    memory_store = _store(LosesHistory)


class TestForgetDoesNothing(MemoryStoreContract):
    memory_store = _store(ForgetDoesNothing)


class TestRevealsForeignIds(MemoryStoreContract):
    memory_store = _store(RevealsForeignIds)


class TestIgnoresDeadline(MemoryStoreContract):
    memory_store = _store(IgnoresDeadline)


class TestForgetsUndeclared(MemoryStoreContract):
    memory_store = _store(ForgetsUndeclared)


class TestListsOldestFirst(MemoryStoreContract):
    memory_store = _store(ListsOldestFirst)


class TestJoinsIds(MemoryStoreContract):
    memory_store = _store(JoinsIds)


class TestJoinsOwnerOnChange(MemoryStoreContract):
    memory_store = _store(JoinsOwnerOnChange)


class TestNotesAbsentAsTilde(MemoryStoreContract):
    @pytest.fixture
    def memory_store(self) -> InMemoryMemoryStore:
        return NotesAbsentAsTilde()


class TestNotDurable(MemoryStoreContract):
    memory_store = _store(NotDurable)

    @pytest.fixture
    def reopen_memory_store(self, tmp_path: Path) -> Callable[[], SQLiteMemoryStore]:
        return lambda: NotDurable(SQLiteConfig(path=str(tmp_path / "elsewhere.db")))


class TestIgnoresRevisionCap(MemoryStoreContract):
    @pytest.fixture
    def memory_store(self) -> InMemoryMemoryStore:
        return IgnoresRevisionCap()
