"""Adapters whose ``erase`` has one realistic bug each, run through the contract suites' erasure tests.

Not collected directly: ``test_erasure_suites_catch_broken_adapters.py``
copies it into a pytester run and checks that each class fails exactly the
erasure tests that describe its bug (and nothing else).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest

from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.sqlite import SQLiteConfig
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    EraseReport,
    EraseTarget,
    HistoryArchive,
    MessageGroup,
    OpContext,
    SessionKey,
    SessionStore,
)
from agentium_harness.testing import (
    ArchiveContract,
    MemoryStoreContract,
    RawStorage,
    RecallStoreContract,
    SessionStoreContract,
    raw_files,
)

pytestmark = pytest.mark.anyio


def _widen(target: EraseTarget) -> EraseTarget:
    """The classic bug: a narrower target handled as the next level up."""
    if target.groups:
        return EraseTarget(target.tenant_id, target.user_id, target.session_id)
    if target.session_id is not None:
        return EraseTarget(target.tenant_id, target.user_id)
    return EraseTarget(target.tenant_id)


def _resplit(target: EraseTarget) -> EraseTarget:
    """Another classic: ids joined with ``/`` and split back (``a/b`` + ``c`` reads as ``a`` + ``b/c``)."""
    ids = [i for i in (target.tenant_id, target.user_id, target.session_id) if i is not None]
    parts = "/".join(ids).split("/", len(ids) - 1)
    return EraseTarget(*parts, groups=target.groups)  # type: ignore[arg-type]


class Resplit:
    """Joins the target's ids with ``/`` and splits them back, so colliding ids erase the wrong key."""

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(  # type: ignore[misc]
            _resplit(target), ctx, dry_run=dry_run, max_items=max_items
        )


def _ignore_ctx(ctx: OpContext) -> OpContext:
    return OpContext()


# -- archives -------------------------------------------------------------------------------------


class Archive(InMemoryArchive):
    """The in-memory archive with a trash bin that ``raw_storage`` shows (empty unless a bug fills it)."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.trash: list[bytes] = []


class ResplitEraseArchive(Resplit, Archive):
    """The archive with the joined-and-split bug of :class:`Resplit`."""

    capabilities = Archive.capabilities


class UndeclaredEraseArchive(Archive):
    """Erases although it does not declare ``erasure``."""

    capabilities = attrs.evolve(InMemoryArchive.capabilities, erasure=False)


class PrefixEraseArchive(Archive):
    """Matches sessions by the prefix of their joined key, so ``session-1`` also takes ``session-10``."""

    capabilities = InMemoryArchive.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        report = await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)
        prefix = "/".join(i for i in (target.tenant_id, target.user_id, target.session_id) if i is not None)
        for key in list(self._groups):
            if (
                f"{key.tenant}/{key.user}/{key.session}".startswith(prefix)
                and not dry_run
                and not target.groups
            ):
                del self._groups[key]
        return report


class WholeSessionArchive(Archive):
    """Erases the whole session for a groups target."""

    capabilities = InMemoryArchive.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(
            _widen(target) if target.groups else target, ctx, dry_run=dry_run, max_items=max_items
        )


class DryRunErasesArchive(Archive):
    """Ignores ``dry_run``."""

    capabilities = InMemoryArchive.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(target, ctx, max_items=max_items)


class UnboundedEraseArchive(Archive):
    """Ignores ``max_items``."""

    capabilities = InMemoryArchive.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(target, ctx, dry_run=dry_run, max_items=10**6)


class EraseIgnoresCancelArchive(Archive):
    """Never looks at the erase's context."""

    capabilities = InMemoryArchive.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(target, _ignore_ctx(ctx), dry_run=dry_run, max_items=max_items)


class SoftEraseArchive(Archive):
    """Moves erased groups to a trash bin the backend still holds."""

    capabilities = InMemoryArchive.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        if not dry_run:
            for key, groups in self._groups.items():
                self.trash.extend(data for seq, (data, _) in groups.items() if target.covers_group(key, seq))
        return await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)


class UncountedEraseArchive(Archive):
    """Erases but reports nothing."""

    capabilities = InMemoryArchive.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        report = await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)
        return EraseReport(status=report.status)


class GapEndsReadArchive(Archive):
    """Erases right, but a read from inside the gap an erased range leaves answers nothing.

    Its read seeks ``start_seq``'s own key and walks on from there: the numbering has gaps only
    after an erasure, and from inside one the groups past it are never reached (a caller takes
    the empty page for the end of the history).
    """

    capabilities = InMemoryArchive.capabilities

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        groups = await super().read_groups(key, start_seq, max_groups, ctx)
        return groups if groups and groups[0].seq == start_seq else []


def _archive_case(adapter: type[Archive]) -> type[ArchiveContract]:
    class Case(ArchiveContract):
        @pytest.fixture
        def archive(self) -> HistoryArchive:
            return adapter()

        @pytest.fixture
        def raw_storage(self, archive: Archive) -> RawStorage:
            def raw() -> bytes:
                stored = b"".join(d for groups in archive._groups.values() for d, _ in groups.values())
                return stored + b"".join(archive.trash)

            return raw

    return Case


class TestUndeclaredEraseArchive(_archive_case(UndeclaredEraseArchive)):  # type: ignore[misc]
    pass


class TestPrefixEraseArchive(_archive_case(PrefixEraseArchive)):  # type: ignore[misc]
    pass


class TestWholeSessionArchive(_archive_case(WholeSessionArchive)):  # type: ignore[misc]
    pass


class TestDryRunErasesArchive(_archive_case(DryRunErasesArchive)):  # type: ignore[misc]
    pass


class TestUnboundedEraseArchive(_archive_case(UnboundedEraseArchive)):  # type: ignore[misc]
    pass


class TestEraseIgnoresCancelArchive(_archive_case(EraseIgnoresCancelArchive)):  # type: ignore[misc]
    pass


class TestSoftEraseArchive(_archive_case(SoftEraseArchive)):  # type: ignore[misc]
    pass


class TestUncountedEraseArchive(_archive_case(UncountedEraseArchive)):  # type: ignore[misc]
    pass


class TestGapEndsReadArchive(_archive_case(GapEndsReadArchive)):  # type: ignore[misc]
    pass


# -- session stores -------------------------------------------------------------------------------


class Store(InMemorySessionStore):
    """The in-memory session store with a trash bin that ``raw_storage`` shows."""

    capabilities = InMemorySessionStore.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.trash: list[bytes] = []


class ResplitEraseStore(Resplit, Store):
    """The store with the joined-and-split bug of :class:`Resplit`."""

    capabilities = Store.capabilities


class UndeclaredEraseStore(Store):
    """Erases although it does not declare ``erasure``."""

    capabilities = attrs.evolve(InMemorySessionStore.capabilities, erasure=False)


class WidenedEraseStore(Store):
    """Handles every target one level up: a session erase takes the user, a groups erase the session."""

    capabilities = InMemorySessionStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(_widen(target), ctx, dry_run=dry_run, max_items=max_items)


class DryRunErasesStore(Store):
    """Ignores ``dry_run``."""

    capabilities = InMemorySessionStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(target, ctx, max_items=max_items)


class UnboundedEraseStore(Store):
    """Ignores ``max_items``."""

    capabilities = InMemorySessionStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(target, ctx, dry_run=dry_run, max_items=10**6)


class EraseIgnoresCancelStore(Store):
    """Never looks at the erase's context."""

    capabilities = InMemorySessionStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(target, _ignore_ctx(ctx), dry_run=dry_run, max_items=max_items)


class KeepsRevisionsStore(Store):
    """Keeps every earlier revision of a snapshot in a history the backend still holds."""

    capabilities = InMemorySessionStore.capabilities

    async def save(
        self, key: SessionKey, snapshot: Any, expected_revision: int | None, ctx: OpContext
    ) -> int:
        row = self._rows.get(key)
        if row is not None:
            self.trash.append(row[1])
        return await super().save(key, snapshot, expected_revision, ctx)


class RevisionsRestartAfterEraseStore(Store):
    """Starts a session created again after its erasure at revision 1 (no revision floor)."""

    capabilities = InMemorySessionStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        report = await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)
        self._floor = 0  # forgets the revisions it removed
        return report


def _store_case(adapter: type[Store]) -> type[SessionStoreContract]:
    class Case(SessionStoreContract):
        @pytest.fixture
        def session_store(self) -> SessionStore:
            return adapter()

        @pytest.fixture
        def raw_storage(self, session_store: Store) -> RawStorage:
            return lambda: (
                b"".join(d for _, d in session_store._rows.values()) + b"".join(session_store.trash)
            )

    return Case


class TestUndeclaredEraseStore(_store_case(UndeclaredEraseStore)):  # type: ignore[misc]
    pass


class TestWidenedEraseStore(_store_case(WidenedEraseStore)):  # type: ignore[misc]
    pass


class TestDryRunErasesStore(_store_case(DryRunErasesStore)):  # type: ignore[misc]
    pass


class TestUnboundedEraseStore(_store_case(UnboundedEraseStore)):  # type: ignore[misc]
    pass


class TestEraseIgnoresCancelStore(_store_case(EraseIgnoresCancelStore)):  # type: ignore[misc]
    pass


class TestKeepsRevisionsStore(_store_case(KeepsRevisionsStore)):  # type: ignore[misc]
    pass


class TestRevisionsRestartAfterEraseStore(_store_case(RevisionsRestartAfterEraseStore)):  # type: ignore[misc]
    pass


# -- recall stores --------------------------------------------------------------------------------


class Recall(SQLiteRecallStore):
    """The SQLite recall store; each bug below changes its ``erase`` only."""

    capabilities = SQLiteRecallStore.capabilities
    session_class = SQLiteRecallStore.session_class


class UndeclaredEraseRecall(Recall):
    """Erases although it does not declare ``erasure``."""

    capabilities = attrs.evolve(SQLiteRecallStore.capabilities, erasure=False)


class WidenedEraseRecall(Recall):
    """Handles a session target as its user: the user's other sessions and documents go too."""

    capabilities = SQLiteRecallStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        wide = _widen(target) if target.session_id is not None and not target.groups else target
        return await super().erase(wide, ctx, dry_run=dry_run, max_items=max_items)


class TenantForUserRecall(Recall):
    """Handles a user target as the whole tenant."""

    capabilities = SQLiteRecallStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        wide = _widen(target) if target.session_id is None and target.user_id is not None else target
        return await super().erase(wide, ctx, dry_run=dry_run, max_items=max_items)


class WholeSessionRecall(Recall):
    """Erases the whole session for a groups target."""

    capabilities = SQLiteRecallStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(
            _widen(target) if target.groups else target, ctx, dry_run=dry_run, max_items=max_items
        )


class DryRunErasesRecall(Recall):
    """Ignores ``dry_run``."""

    capabilities = SQLiteRecallStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(target, ctx, max_items=max_items)


class UnboundedEraseRecall(Recall):
    """Ignores ``max_items``."""

    capabilities = SQLiteRecallStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(target, ctx, dry_run=dry_run, max_items=10**6)


class EraseIgnoresCancelRecall(Recall):
    """Never looks at the erase's context."""

    capabilities = SQLiteRecallStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(target, _ignore_ctx(ctx), dry_run=dry_run, max_items=max_items)


class AuditsErasedTextRecall(Recall):
    """Copies what it erases into an audit table of the same file first."""

    capabilities = SQLiteRecallStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        def audit(conn: sqlite3.Connection) -> None:
            conn.execute("CREATE TABLE IF NOT EXISTS audit (text TEXT)")
            conn.execute(
                "INSERT INTO audit SELECT t.text FROM recall_texts AS t "
                "JOIN recall_sources AS s ON s.id = t.id WHERE s.tenant_id = ?",
                (target.tenant_id,),
            )

        if not dry_run:
            await self.run(ctx, "audit", audit)
        return await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)


class ResplitEraseRecall(Resplit, Recall):
    """The recall with the joined-and-split bug of :class:`Resplit`."""

    capabilities = Recall.capabilities


class _RecallSuite(RecallStoreContract):
    store_class: ClassVar[type[Recall]] = Recall

    @pytest.fixture
    async def recall_store(self, tmp_path: Path) -> AsyncIterator[Recall]:
        store = self.store_class(SQLiteRecallConfig(path=str(tmp_path / "r.db")))
        yield store
        await store.aclose()

    @pytest.fixture
    def raw_storage(self, tmp_path: Path) -> RawStorage:
        path = str(tmp_path / "r.db")
        return raw_files(path, path + "-wal")


class TestUndeclaredEraseRecall(_RecallSuite):
    store_class = UndeclaredEraseRecall


class TestWidenedEraseRecall(_RecallSuite):
    store_class = WidenedEraseRecall


class TestTenantForUserRecall(_RecallSuite):
    store_class = TenantForUserRecall


class TestWholeSessionRecall(_RecallSuite):
    store_class = WholeSessionRecall


class TestDryRunErasesRecall(_RecallSuite):
    store_class = DryRunErasesRecall


class TestUnboundedEraseRecall(_RecallSuite):
    store_class = UnboundedEraseRecall


class TestEraseIgnoresCancelRecall(_RecallSuite):
    store_class = EraseIgnoresCancelRecall


class TestAuditsErasedTextRecall(_RecallSuite):
    store_class = AuditsErasedTextRecall


# -- memory stores --------------------------------------------------------------------------------


class Memory(SQLiteMemoryStore):
    """The SQLite memory store; each bug below changes its ``erase`` only."""

    capabilities = SQLiteMemoryStore.capabilities


class UndeclaredEraseMemory(Memory):
    """Erases although it does not declare ``erasure``."""

    capabilities = attrs.evolve(SQLiteMemoryStore.capabilities, erasure=False)


class WidenedEraseMemory(Memory):
    """Handles a session target as its user: every fact of the user goes."""

    capabilities = SQLiteMemoryStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        wide = _widen(target) if target.session_id is not None and not target.groups else target
        return await super().erase(wide, ctx, dry_run=dry_run, max_items=max_items)


class TenantForUserMemory(Memory):
    """Handles a user target as the whole tenant."""

    capabilities = SQLiteMemoryStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        wide = _widen(target) if target.session_id is None and target.user_id is not None else target
        return await super().erase(wide, ctx, dry_run=dry_run, max_items=max_items)


class DryRunErasesMemory(Memory):
    """Ignores ``dry_run``."""

    capabilities = SQLiteMemoryStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(target, ctx, max_items=max_items)


class UnboundedEraseMemory(Memory):
    """Ignores ``max_items``."""

    capabilities = SQLiteMemoryStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(target, ctx, dry_run=dry_run, max_items=10**6)


class EraseIgnoresCancelMemory(Memory):
    """Never looks at the erase's context."""

    capabilities = SQLiteMemoryStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return await super().erase(target, _ignore_ctx(ctx), dry_run=dry_run, max_items=max_items)


class UncheckpointedMemory(Memory):
    """Deletes the rows but leaves the write-ahead log as it is (the inserts are still in it)."""

    capabilities = SQLiteMemoryStore.capabilities

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        if dry_run or target.groups:
            return await super().erase(target, ctx, dry_run=dry_run, max_items=max_items)

        def work(conn: sqlite3.Connection) -> int:
            owner = "tenant_id = ?" + ("" if target.user_id is None else " AND user_id = ?")
            args: tuple[str, ...] = (target.tenant_id,) + (
                () if target.user_id is None else (target.user_id,)
            )
            return conn.execute(f"DELETE FROM memory_facts WHERE {owner}", args).rowcount

        await self.run(ctx, "memory erase", work)
        return EraseReport()


class ResplitEraseMemory(Resplit, Memory):
    """The memory with the joined-and-split bug of :class:`Resplit`."""

    capabilities = Memory.capabilities


def _memory_case(adapter: type[Memory]) -> type[MemoryStoreContract]:
    class Case(MemoryStoreContract):
        @pytest.fixture
        async def memory_store(self, tmp_path: Path) -> AsyncIterator[Memory]:
            store = adapter(SQLiteConfig(path=str(tmp_path / "m.db")))
            yield store
            await store.aclose()

        @pytest.fixture
        def raw_storage(self, tmp_path: Path) -> RawStorage:
            path = str(tmp_path / "m.db")
            return raw_files(path, path + "-wal")

    return Case


class TestUndeclaredEraseMemory(_memory_case(UndeclaredEraseMemory)):  # type: ignore[misc]
    pass


class TestWidenedEraseMemory(_memory_case(WidenedEraseMemory)):  # type: ignore[misc]
    pass


class TestTenantForUserMemory(_memory_case(TenantForUserMemory)):  # type: ignore[misc]
    pass


class TestDryRunErasesMemory(_memory_case(DryRunErasesMemory)):  # type: ignore[misc]
    pass


class TestUnboundedEraseMemory(_memory_case(UnboundedEraseMemory)):  # type: ignore[misc]
    pass


class TestEraseIgnoresCancelMemory(_memory_case(EraseIgnoresCancelMemory)):  # type: ignore[misc]
    pass


class TestUncheckpointedMemory(_memory_case(UncheckpointedMemory)):  # type: ignore[misc]
    pass


class TestResplitEraseArchive(_archive_case(ResplitEraseArchive)):  # type: ignore[misc]
    pass


class TestResplitEraseStore(_store_case(ResplitEraseStore)):  # type: ignore[misc]
    pass


class TestResplitEraseRecall(_RecallSuite):
    store_class = ResplitEraseRecall


class TestResplitEraseMemory(_memory_case(ResplitEraseMemory)):  # type: ignore[misc]
    pass
