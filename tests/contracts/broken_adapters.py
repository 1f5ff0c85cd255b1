"""Deliberately broken adapters, each with one realistic bug, run through the contract suites.

Not collected directly (the file name does not start with ``test_``):
``test_suites_catch_broken_adapters.py`` copies it into a pytester run and
checks that the suites fail exactly the tests that describe each bug.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import ClassVar

import anyio
import anyio.lowlevel
import pytest

from agentium_harness._codec import digest_of, from_json, make_converter, unstructure
from agentium_harness._errors import ArchiveError, OperationCancelledError, SessionConflictError
from agentium_harness._history import MessageGroup
from agentium_harness._ports import OpContext
from agentium_harness._ports.archive import ArchiveCapabilities, ArchiveReceipt, HistoryArchive
from agentium_harness._ports.sessions import (
    SessionSnapshot,
    SessionStore,
    SessionStoreCapabilities,
    StoredSnapshot,
    check_snapshot_scope,
    snapshot_bytes,
    verify_snapshot,
)
from agentium_harness._scope import SessionKey
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.testing import ArchiveContract, CorruptStored, SessionStoreContract

_ARCHIVE_CAPS = InMemoryArchive.capabilities
_STORE_CAPS = InMemorySessionStore.capabilities


def _check(ctx: OpContext) -> None:
    # The broken adapters get cancellation right, so each one has only its own bug.
    if ctx.expired:
        raise OperationCancelledError("cancelled")


def _colon_key(key: SessionKey) -> SessionKey:
    # The classic bug: ids joined with a separator they may contain.
    joined = f"{key.tenant}:{key.user}:{key.session}"
    return SessionKey("all", "all", joined[:256])


class _PipeKeys:
    """Backend keys are ``tenant|user|session`` (ids may contain the separator); first key seen owns each."""

    def __init__(self) -> None:
        self.owners: dict[str, SessionKey] = {}

    def __call__(self, key: SessionKey) -> SessionKey:
        return self.owners.setdefault(f"{key.tenant}|{key.user}|{key.session}", key)


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


# -- archives -----------------------------------------------------------------------------------


class OverwritingArchive(InMemoryArchive):
    """Last writer wins: a conflicting re-append replaces the stored group."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        _check(ctx)
        stored = self._groups.setdefault(key, {})
        for g in groups:
            stored[g.seq] = (g.canonical_bytes(), g.digest)
        return [ArchiveReceipt(g.seq, g.digest, f"x/{g.seq}") for g in groups]


class NonAtomicArchive(InMemoryArchive):
    """Writes group by group, so a conflict leaves the earlier part of the batch behind."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        receipts: list[ArchiveReceipt] = []
        for g in groups:
            receipts.extend(await super().append(key, [g], ctx))
        return receipts


class ColonKeyArchive(InMemoryArchive):
    """Keys sessions by ``tenant:user:session``."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        return await super().append(_colon_key(key), groups, ctx)

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        return await super().read_groups(_colon_key(key), start_seq, max_groups, ctx)


class PipeKeyArchive(InMemoryArchive):
    """Keys sessions by ``tenant|user|session``: tenant ``a|b`` + user ``c`` shares ``a`` + ``b|c``."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    def __init__(self) -> None:
        super().__init__()
        self.backend_key = _PipeKeys()

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        return await super().append(self.backend_key(key), groups, ctx)

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        return await super().read_groups(self.backend_key(key), start_seq, max_groups, ctx)


class UnboundedReadArchive(InMemoryArchive):
    """Ignores ``max_groups``."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        return await super().read_groups(key, start_seq, 10**9, ctx)


class DescendingReadArchive(InMemoryArchive):
    """Returns groups newest first."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        groups = await super().read_groups(key, start_seq, 10**9, ctx)
        return list(reversed(groups))[: max(0, max_groups)]


class GapEndsReadArchive(InMemoryArchive):
    """Answers nothing when no group is stored at ``start_seq`` itself, though later ones are.

    A read that seeks the key of ``start_seq`` and walks on from there: from inside a gap in the
    numbering (an erased range) it finds nothing, and a caller takes the empty page for the end.
    """

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        groups = await super().read_groups(key, start_seq, max_groups, ctx)
        return groups if groups and groups[0].seq == start_seq else []


class WrongDigestArchive(InMemoryArchive):
    """Acknowledges with a digest of the messages only, not of the canonical group."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        receipts = await super().append(key, groups, ctx)
        return [
            ArchiveReceipt(r.seq, digest_of(unstructure(g.messages)), r.location)
            for r, g in zip(receipts, groups, strict=True)
        ]


class DropsRetainedArchive(InMemoryArchive):
    """Loses the retained record on the way in."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        groups = await super().read_groups(key, start_seq, max_groups, ctx)
        return [MessageGroup(g.seq, g.messages) for g in groups]


class IgnoresCancellationArchive(InMemoryArchive):
    """Never looks at the caller's context."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        return await super().append(key, groups, OpContext())

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        return await super().read_groups(key, start_seq, max_groups, OpContext())


class UndeclaredHealthArchive(InMemoryArchive):
    """Answers ``health`` although it does not declare ``health_check``."""

    capabilities: ClassVar[ArchiveCapabilities] = ArchiveCapabilities(
        idempotent_append=True, bounded_reads=True
    )


class UndeclaredReadsArchive(InMemoryArchive):
    """Answers ``read_groups`` although it does not declare ``bounded_reads``."""

    capabilities: ClassVar[ArchiveCapabilities] = ArchiveCapabilities(
        idempotent_append=True, health_check=True
    )


class StubReadsArchive(InMemoryArchive):
    """Declares ``bounded_reads`` but keeps the port's stub."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS
    read_groups = HistoryArchive.read_groups


class InheritedCapabilitiesArchive(InMemoryArchive):
    """Declares nothing in its own body (inherits the parent's declaration)."""


class ForgetfulDurableArchive(InMemoryArchive):
    """Claims ``durable`` while keeping everything in the process."""

    capabilities: ClassVar[ArchiveCapabilities] = ArchiveCapabilities(
        durable=True, idempotent_append=True, bounded_reads=True, health_check=True
    )


class SilentHealthArchive(InMemoryArchive):
    """Declares a health check that returns nothing useful."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def health(self, ctx: OpContext) -> str:
        return ""


class CloseOnceArchive(InMemoryArchive):
    """Raises when closed a second time."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS
    closed = False

    async def aclose(self) -> None:
        if self.closed:
            raise RuntimeError("already closed")
        self.closed = True


class NoDigestCheckArchive(InMemoryArchive):
    """Decodes stored bytes and returns them without re-checking digest or scope."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        _check(ctx)
        stored = self._groups.get(key, {})
        seqs = sorted(s for s in stored if s >= start_seq)[: max(0, max_groups)]
        return [from_json(stored[s][0], MessageGroup) for s in seqs]


class NoScopeCheckArchive(InMemoryArchive):
    """Re-checks digests but returns a group filed under another session's key."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def read_groups(
        self, key: SessionKey, start_seq: int, max_groups: int, ctx: OpContext
    ) -> Sequence[MessageGroup]:
        _check(ctx)
        stored = self._groups.get(key, {})
        seqs = sorted(s for s in stored if s >= start_seq)[: max(0, max_groups)]
        groups = [from_json(stored[s][0], MessageGroup) for s in seqs]
        for group in groups:
            if group.digest != stored[group.seq][1]:
                raise ArchiveError("damaged")
        return groups


class NulStrippingArchive(InMemoryArchive):
    """Writes groups without their NULs, as a text column or a C string that cannot hold one would."""

    capabilities: ClassVar[ArchiveCapabilities] = _ARCHIVE_CAPS

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        receipts = await super().append(key, groups, ctx)
        for group in groups:
            stored = self.raw(key, group.seq)
            if stored is not None:
                self.put_raw(key, group.seq, stored[0].replace(b"\\u0000", b""), stored[1])
        return receipts


class LoopBoundArchive(_FirstLoopClient, InMemoryArchive):
    """Keeps the client of its first event loop and uses it from every other loop."""

    capabilities = _ARCHIVE_CAPS

    async def append(
        self, key: SessionKey, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> Sequence[ArchiveReceipt]:
        self._client()
        return await super().append(key, groups, ctx)


def _archive_case(adapter: type[InMemoryArchive]) -> type[ArchiveContract]:
    class Case(ArchiveContract):
        @pytest.fixture
        def archive(self) -> HistoryArchive:
            return adapter()

        @pytest.fixture
        def reopen_archive(self) -> Callable[[], HistoryArchive]:
            return adapter

        @pytest.fixture
        def corrupt_archived_group(self, archive: InMemoryArchive) -> CorruptStored:
            def corrupt(key: SessionKey, seq: int, transform: Callable[[bytes], bytes]) -> None:
                stored = archive.raw(key, seq)
                if stored is None:
                    raise LookupError(f"group {seq} is not stored under {key!r}")
                archive.put_raw(key, seq, transform(stored[0]), stored[1])

            return corrupt

    return Case


class TestNulStrippingArchive(_archive_case(NulStrippingArchive)):  # type: ignore[misc]
    pass


class TestLoopBoundArchive(_archive_case(LoopBoundArchive)):  # type: ignore[misc]
    pass


class TestOverwritingArchive(_archive_case(OverwritingArchive)):  # type: ignore[misc]
    pass


class TestNonAtomicArchive(_archive_case(NonAtomicArchive)):  # type: ignore[misc]
    pass


class TestColonKeyArchive(_archive_case(ColonKeyArchive)):  # type: ignore[misc]
    pass


class TestPipeKeyArchive(_archive_case(PipeKeyArchive)):  # type: ignore[misc]
    pass


class TestUnboundedReadArchive(_archive_case(UnboundedReadArchive)):  # type: ignore[misc]
    pass


class TestDescendingReadArchive(_archive_case(DescendingReadArchive)):  # type: ignore[misc]
    pass


class TestGapEndsReadArchive(_archive_case(GapEndsReadArchive)):  # type: ignore[misc]
    pass


class TestWrongDigestArchive(_archive_case(WrongDigestArchive)):  # type: ignore[misc]
    pass


class TestDropsRetainedArchive(_archive_case(DropsRetainedArchive)):  # type: ignore[misc]
    pass


class TestIgnoresCancellationArchive(_archive_case(IgnoresCancellationArchive)):  # type: ignore[misc]
    pass


class TestUndeclaredHealthArchive(_archive_case(UndeclaredHealthArchive)):  # type: ignore[misc]
    pass


class TestUndeclaredReadsArchive(_archive_case(UndeclaredReadsArchive)):  # type: ignore[misc]
    pass


class TestStubReadsArchive(_archive_case(StubReadsArchive)):  # type: ignore[misc]
    pass


class TestInheritedCapabilitiesArchive(_archive_case(InheritedCapabilitiesArchive)):  # type: ignore[misc]
    pass


class TestForgetfulDurableArchive(_archive_case(ForgetfulDurableArchive)):  # type: ignore[misc]
    pass


class TestSilentHealthArchive(_archive_case(SilentHealthArchive)):  # type: ignore[misc]
    pass


class TestCloseOnceArchive(_archive_case(CloseOnceArchive)):  # type: ignore[misc]
    pass


class TestNoDigestCheckArchive(_archive_case(NoDigestCheckArchive)):  # type: ignore[misc]
    pass


class TestNoScopeCheckArchive(_archive_case(NoScopeCheckArchive)):  # type: ignore[misc]
    pass


# -- session stores -----------------------------------------------------------------------------


class NoCompareStore(InMemorySessionStore):
    """Saves unconditionally: last writer wins."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        _check(ctx)
        check_snapshot_scope(key, snapshot, "store")
        current = self._rows.get(key)
        revision = 1 if current is None else current[0] + 1
        self._rows[key] = (revision, snapshot_bytes(snapshot))
        return revision


class YieldingCompareStore(InMemorySessionStore):
    """Compares, yields to the event loop, then writes: not atomic."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        _check(ctx)
        check_snapshot_scope(key, snapshot, "store")
        current = self._rows.get(key)
        current_revision = None if current is None else current[0]
        if current_revision != expected_revision:
            raise SessionConflictError("stale")
        await anyio.lowlevel.checkpoint()  # a network round trip would sit here
        revision = 1 if current_revision is None else current_revision + 1
        self._rows[key] = (revision, snapshot_bytes(snapshot))
        return revision


class _BackendRows(dict[SessionKey, tuple[int, bytes]]):
    """The store's rows under backend keys: ``mangle`` maps each key as the store's backend would.

    Below the store's checks (which see the caller's key), as in a real backend, so each
    store using it has only its key bug.
    """

    def __init__(self, mangle: Callable[[SessionKey], SessionKey]) -> None:
        super().__init__()
        self.mangle = mangle

    def get(self, key: SessionKey, default: None = None) -> tuple[int, bytes] | None:
        return super().get(self.mangle(key), default)

    def __getitem__(self, key: SessionKey) -> tuple[int, bytes]:
        return super().__getitem__(self.mangle(key))

    def __setitem__(self, key: SessionKey, row: tuple[int, bytes]) -> None:
        super().__setitem__(self.mangle(key), row)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, SessionKey) and super().__contains__(self.mangle(key))


class ColonKeyStore(InMemorySessionStore):
    """Keys sessions by ``tenant:user:session``."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    def __init__(self) -> None:
        super().__init__()
        self._rows = _BackendRows(_colon_key)


class PipeKeyStore(InMemorySessionStore):
    """Keys sessions by ``tenant|user|session``: colliding keys share one snapshot."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    def __init__(self) -> None:
        super().__init__()
        self._rows = _BackendRows(_PipeKeys())


class StaticRevisionStore(InMemorySessionStore):
    """Reports revision 1 forever (a timestamp-free "version" column that never moves)."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        _check(ctx)
        check_snapshot_scope(key, snapshot, "store")
        if expected_revision is None and key in self._rows:
            raise SessionConflictError("exists")
        self._rows[key] = (1, snapshot_bytes(snapshot))
        return 1


class UpgradesLegacyStore(InMemorySessionStore):
    """Silently rewrites legacy snapshots to the current format version."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        stored = await super().load(key, ctx)
        if stored is None or stored.snapshot.format_version != 1:
            return stored
        s = stored.snapshot
        upgraded = SessionSnapshot(s.memory_scope, s.boundary, s.next_seq, s.resident)
        return StoredSnapshot(upgraded, stored.revision)


class LeakyListingStore(InMemorySessionStore):
    """Lists every session of the tenant, unbounded."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    async def list_sessions(
        self, tenant: str, user: str, limit: int, ctx: OpContext, after: str | None = None
    ) -> list[str]:
        return sorted(k.session for k in self._rows if k.tenant == tenant)


class IgnoresCancellationStore(InMemorySessionStore):
    """Never looks at the caller's context."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        return await super().load(key, OpContext())

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        return await super().save(key, snapshot, expected_revision, OpContext())


class UndeclaredListingStore(InMemorySessionStore):
    """Answers ``list_sessions`` although it does not declare ``listing``."""

    capabilities: ClassVar[SessionStoreCapabilities] = SessionStoreCapabilities(
        compare_and_set=True, health_check=True
    )


class ForgetfulDurableStore(InMemorySessionStore):
    """Claims ``durable`` while keeping everything in the process."""

    capabilities: ClassVar[SessionStoreCapabilities] = SessionStoreCapabilities(
        compare_and_set=True, durable=True, listing=True, health_check=True
    )


class PhantomStore(InMemorySessionStore):
    """Invents an empty snapshot at revision 0 for a session that was never saved."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        stored = await super().load(key, ctx)
        return stored if stored is not None else StoredSnapshot(SessionSnapshot(memory_scope=None), 0)


class MisreportedRevisionStore(InMemorySessionStore):
    """Returns a revision from ``save`` that ``load`` does not report."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        return await super().save(key, snapshot, expected_revision, ctx) * 10


class UndeclaredHealthStore(InMemorySessionStore):
    """Answers ``health`` although it does not declare ``health_check``."""

    capabilities: ClassVar[SessionStoreCapabilities] = SessionStoreCapabilities(
        compare_and_set=True, listing=True
    )


class StubListingStore(InMemorySessionStore):
    """Declares ``listing`` but keeps the port's stub."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS
    list_sessions = SessionStore.list_sessions


class InheritedCapabilitiesStore(InMemorySessionStore):
    """Declares nothing in its own body."""


class SilentHealthStore(InMemorySessionStore):
    """Declares a health check that returns nothing useful."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    async def health(self, ctx: OpContext) -> str:
        return "  "


class CloseOnceStore(InMemorySessionStore):
    """Raises when closed a second time."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS
    closed = False

    async def aclose(self) -> None:
        if self.closed:
            raise RuntimeError("already closed")
        self.closed = True


_LENIENT = make_converter(strict=False)


class NoVerifyStore(InMemorySessionStore):
    """Decodes leniently and never checks the snapshot's digest."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        _check(ctx)
        row = self._rows.get(key)
        if row is None:
            return None
        snapshot = _LENIENT.structure(json.loads(row[1]), SessionSnapshot)
        return StoredSnapshot(snapshot=snapshot, revision=row[0])


class NoScopeCheckStore(InMemorySessionStore):
    """Stores any snapshot under the key it is saved as, another session's too (only a load refuses it)."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        _check(ctx)
        verify_snapshot(key, snapshot)
        with self._lock:
            current = self._rows.get(key)
            current_revision = None if current is None else current[0]
            if current_revision != expected_revision:
                raise SessionConflictError("stale")
            revision = 1 if current_revision is None else current_revision + 1
            self._rows[key] = (revision, snapshot_bytes(snapshot))
            return revision


class LoopBoundStore(_FirstLoopClient, InMemorySessionStore):
    """Keeps the client of its first event loop and uses it from every other loop."""

    capabilities = _STORE_CAPS

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        self._client()
        return await super().save(key, snapshot, expected_revision, ctx)

    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        self._client()
        return await super().load(key, ctx)


class NulStrippingStore(InMemorySessionStore):
    """Writes snapshots without their NULs, as a text column or a C string that cannot hold one would."""

    capabilities: ClassVar[SessionStoreCapabilities] = _STORE_CAPS

    async def save(
        self, key: SessionKey, snapshot: SessionSnapshot, expected_revision: int | None, ctx: OpContext
    ) -> int:
        revision = await super().save(key, snapshot, expected_revision, ctx)
        row = self.raw(key)
        if row is not None:
            self.put_raw(key, row[0], row[1].replace(b"\\u0000", b""))
        return revision


def _store_case(adapter: type[InMemorySessionStore]) -> type[SessionStoreContract]:
    class Case(SessionStoreContract):
        @pytest.fixture
        def session_store(self) -> SessionStore:
            return adapter()

        @pytest.fixture
        def reopen_session_store(self) -> Callable[[], SessionStore]:
            return adapter

        @pytest.fixture
        def corrupt_snapshot(self, session_store: InMemorySessionStore) -> CorruptStored:
            def corrupt(key: SessionKey, transform: Callable[[bytes], bytes]) -> None:
                row = session_store.raw(key)
                if row is None:
                    raise LookupError(f"no snapshot is stored under {key!r}")
                session_store.put_raw(key, row[0], transform(row[1]))

            return corrupt

    return Case


class TestLoopBoundStore(_store_case(LoopBoundStore)):  # type: ignore[misc]
    pass


class TestNoCompareStore(_store_case(NoCompareStore)):  # type: ignore[misc]
    pass


class TestYieldingCompareStore(_store_case(YieldingCompareStore)):  # type: ignore[misc]
    pass


class TestColonKeyStore(_store_case(ColonKeyStore)):  # type: ignore[misc]
    pass


class TestPipeKeyStore(_store_case(PipeKeyStore)):  # type: ignore[misc]
    pass


class TestStaticRevisionStore(_store_case(StaticRevisionStore)):  # type: ignore[misc]
    pass


class TestUpgradesLegacyStore(_store_case(UpgradesLegacyStore)):  # type: ignore[misc]
    pass


class TestLeakyListingStore(_store_case(LeakyListingStore)):  # type: ignore[misc]
    pass


class TestIgnoresCancellationStore(_store_case(IgnoresCancellationStore)):  # type: ignore[misc]
    pass


class TestUndeclaredListingStore(_store_case(UndeclaredListingStore)):  # type: ignore[misc]
    pass


class TestForgetfulDurableStore(_store_case(ForgetfulDurableStore)):  # type: ignore[misc]
    pass


class TestPhantomStore(_store_case(PhantomStore)):  # type: ignore[misc]
    pass


class TestMisreportedRevisionStore(_store_case(MisreportedRevisionStore)):  # type: ignore[misc]
    pass


class TestUndeclaredHealthStore(_store_case(UndeclaredHealthStore)):  # type: ignore[misc]
    pass


class TestStubListingStore(_store_case(StubListingStore)):  # type: ignore[misc]
    pass


class TestInheritedCapabilitiesStore(_store_case(InheritedCapabilitiesStore)):  # type: ignore[misc]
    pass


class TestSilentHealthStore(_store_case(SilentHealthStore)):  # type: ignore[misc]
    pass


class TestCloseOnceStore(_store_case(CloseOnceStore)):  # type: ignore[misc]
    pass


class TestNoVerifyStore(_store_case(NoVerifyStore)):  # type: ignore[misc]
    pass


class TestNulStrippingStore(_store_case(NulStrippingStore)):  # type: ignore[misc]
    pass


class TestNoScopeCheckStore(_store_case(NoScopeCheckStore)):  # type: ignore[misc]
    pass
