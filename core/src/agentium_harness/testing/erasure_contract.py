"""The erasure tests of the archive and session store suites (docs/erasure.md).

:class:`ArchiveErasureTests` and :class:`SessionStoreErasureTests` are part of
:class:`~agentium_harness.testing.ArchiveContract` and
:class:`~agentium_harness.testing.SessionStoreContract`; an adapter author
never subclasses them directly. They run when the adapter declares
``erasure`` (the refusal test runs when it does not). The byte-level test
needs the optional ``raw_storage`` fixture: a zero-argument callable (sync or
async) returning every byte the backend holds for the adapter — files,
objects, keys and values, concatenated — so the suite can check that no
erased text is left anywhere and that neighbours' bytes are still there.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Protocol

import pytest

from .._errors import OperationCancelledError, SessionConflictError, UnsupportedOperationError
from .._history import MessageGroup
from .._ports import OpContext
from .._ports.archive import ArchiveCapabilities, HistoryArchive
from .._ports.erasure import EraseReport, EraseStatus, EraseTarget, SeqRange
from .._ports.sessions import SessionStore, SessionStoreCapabilities, snapshot_bytes
from .._scope import SessionKey
from ._suite import expired_context, plain_group, require_flag, require_not_flag
from .helpers import COLLIDING_SESSION_KEYS, RawStorage, scoped_snapshot

__all__ = [
    "ERASED",
    "NEIGHBOURS",
    "ArchiveErasureTests",
    "SessionStoreErasureTests",
    "erase_colliding_keys",
    "erase_fully",
    "marker",
    "raw_bytes",
    "read_every_group",
]

#: The session the erasure tests erase.
ERASED = SessionKey("tenant-1", "user-1", "session-1")
#: Another session of the same user (a user erasure takes it, a session erasure does not).
SIBLING = SessionKey("tenant-1", "user-1", "session-2")
#: Sessions no erasure of ``ERASED``, its user or its tenant may touch: ids that are
#: prefixes or joins of the erased ones, and the same ids under another tenant.
NEIGHBOURS = (
    SessionKey("tenant-1", "user-1", "session-10"),
    SessionKey("tenant-1", "user-10", "session-1"),
    SessionKey("tenant-1", "user-1:session-1", "x"),
    SessionKey("tenant-10", "user-1", "session-1"),
    SessionKey("tenant-2", "user-1", "session-1"),
)
#: Another user of the erased tenant: a tenant erasure takes it.
OTHER_USER = SessionKey("tenant-1", "user-3", "session-1")


def _same_user() -> tuple[SessionKey, ...]:
    """Sessions a user erasure of ``tenant-1``/``user-1`` takes."""
    return tuple(k for k in (ERASED, SIBLING, *NEIGHBOURS) if (k.tenant, k.user) == ("tenant-1", "user-1"))


def _other_users() -> tuple[SessionKey, ...]:
    """Sessions a user erasure of ``tenant-1``/``user-1`` must leave as they are."""
    return tuple(k for k in (OTHER_USER, *NEIGHBOURS) if (k.tenant, k.user) != ("tenant-1", "user-1"))


class _Erasable(Protocol):
    async def erase(
        self, target: EraseTarget, ctx: OpContext, *, dry_run: bool = ..., max_items: int = ...
    ) -> EraseReport: ...


def marker(label: str) -> str:
    """A text no store could hold by chance, one token for full-text indexes (letters and digits)."""
    return f"q{label}{secrets.token_hex(10)}9"


def tail(text: str) -> bytes:
    """The last 12 bytes of a marker: what an index that shares term prefixes still stores verbatim."""
    return text.encode()[-12:]


async def raw_bytes(hook: RawStorage) -> bytes:
    """Call the ``raw_storage`` hook (sync or async)."""
    result: Any = hook()
    if isinstance(result, Awaitable):
        result = await result
    if not isinstance(result, bytes | bytearray):
        pytest.fail(f"raw_storage must return bytes, got {type(result).__name__}", pytrace=False)
    return bytes(result)


async def erase_fully(
    store: _Erasable, target: EraseTarget, *, max_items: int = 1000, dry_run: bool = False
) -> list[EraseReport]:
    """Call ``erase`` until it reports ``complete`` (a dry run: once); every report, in order."""
    reports: list[EraseReport] = []
    for _ in range(10_000):
        report = await store.erase(target, OpContext.with_timeout(30.0), dry_run=dry_run, max_items=max_items)
        assert isinstance(report, EraseReport), f"erase returned {type(report).__name__}, not an EraseReport"
        reports.append(report)
        if dry_run or report.status is EraseStatus.COMPLETE:
            return reports
    pytest.fail("erase never reported complete", pytrace=False)


async def read_every_group(
    archive: HistoryArchive, key: SessionKey, start_seq: int = 0, max_groups: int = 10_000
) -> list[MessageGroup]:
    """Up to ``max_groups`` of ``key``'s groups from ``start_seq``, read as the engine reads them.

    ``read_groups`` may answer with fewer groups than asked (an archive bounding the bytes of one
    call), never none while a group at or past ``start_seq`` is stored: so this reads on from the
    last group's ``seq + 1`` until an empty page. Each page is held to the port: at most what was
    asked, ascending from where it started. A page that breaks it fails the calling test.
    """
    out: list[MessageGroup] = []
    at = start_seq
    while len(out) < max_groups:
        left = max_groups - len(out)
        page = list(await archive.read_groups(key, at, left, OpContext()))
        assert len(page) <= left, f"read_groups from seq {at} returned {len(page)} groups, asked {left}"
        if not page:
            break
        seqs = [g.seq for g in page]
        assert seqs[0] >= at and all(a < b for a, b in itertools.pairwise(seqs)), (
            f"read_groups from seq {at} returned seqs {seqs}: not ascending from it"
        )
        out.extend(page)
        at = seqs[-1] + 1
    return out


async def erase_colliding_keys(
    store: _Erasable,
    seed: Callable[[SessionKey, str], Awaitable[None]],
    state: Callable[[SessionKey], Awaitable[object]],
    empty: object,
) -> None:
    """Erase one key of each pair in ``COLLIDING_SESSION_KEYS``; the other key's state must not change.

    Both keys of every pair are seeded (``seed(key, text)``), then one is
    erased as a session, as its user (when the pair's users differ) and as
    its tenant (when the tenants differ); after each erase the other key's
    ``state`` is what it was, and at the end the erased key's is ``empty``.
    Every other pair is erased from its right-hand key, so that each
    boundary is tried in both directions: a store that matches by prefix
    or by a joined key fails one way or the other.
    """
    pairs = [(b, a) if i % 2 else (a, b) for i, (a, b) in enumerate(COLLIDING_SESSION_KEYS)]
    for i, (gone, kept) in enumerate(pairs):
        await seed(gone, marker(f"{i}g"))
        await seed(kept, marker(f"{i}k"))
    before = {kept: await state(kept) for _, kept in pairs}
    for gone, kept in pairs:
        targets = [EraseTarget.session(gone.tenant, gone.user, gone.session)]
        if (gone.tenant, gone.user) != (kept.tenant, kept.user):
            targets.append(EraseTarget.user(gone.tenant, gone.user))
        if gone.tenant != kept.tenant:
            targets.append(EraseTarget.tenant(gone.tenant))
        for target in targets:
            await erase_fully(store, target)
            assert await state(kept) == before[kept], f"erasing {target.describe()} changed {kept!r}"
        assert await state(gone) == empty, f"{gone!r} survived its erasure (its key collides with {kept!r})"


def total(reports: Sequence[EraseReport], kind: str) -> int:
    """Items of ``kind`` over ``reports``."""
    return sum(r.count(kind) for r in reports)


def reported_groups(reports: Sequence[EraseReport]) -> dict[SessionKey, list[tuple[int, str]]]:
    """``(seq, digest)`` pairs per session over ``reports``, each list sorted."""
    out: dict[SessionKey, list[tuple[int, str]]] = {}
    for report in reports:
        for entry in report.sessions:
            out.setdefault(entry.session, []).extend(entry.groups)
    return {key: sorted(pairs) for key, pairs in out.items()}


# -- archives -------------------------------------------------------------------------------------


def _archive(archive: HistoryArchive, flag: str = "erasure") -> None:
    require_flag(archive, ArchiveCapabilities, "archive", flag)


async def _groups(archive: HistoryArchive, key: SessionKey) -> list[bytes]:
    return [g.canonical_bytes() for g in await read_every_group(archive, key)]


async def _seed_archive(archive: HistoryArchive, keys: Sequence[SessionKey], n: int, text: str) -> None:
    for key in keys:
        await archive.append(key, [plain_group(seq, f" {text}") for seq in range(n)], OpContext())


class ArchiveErasureTests:
    """The archive's ``erase`` (declared by ``erasure``); part of :class:`ArchiveContract`."""

    __agentium_contract__: ClassVar[bool] = True
    __agentium_contract_part__: ClassVar[bool] = True

    @pytest.fixture
    def raw_storage(self) -> RawStorage | None:
        """Override to return a callable giving every byte the archive's backend holds (byte-level test)."""
        return None

    async def test_erase_refused_when_undeclared(self, archive: HistoryArchive) -> None:
        """Without ``erasure`` declared, ``erase`` raises ``UnsupportedOperationError`` and removes nothing.

        A failure means the adapter erases (or pretends to) without declaring
        it: declare ``erasure=True`` or leave the port's stub in place.
        """
        require_not_flag(archive, ArchiveCapabilities, "archive", "erasure")
        await archive.append(ERASED, [plain_group(0)], OpContext())
        with pytest.raises(UnsupportedOperationError):
            await archive.erase(EraseTarget.session("tenant-1", "user-1", "session-1"), OpContext())
        assert len(await _groups(archive, ERASED)) == 1

    async def test_erase_removes_a_session_and_nothing_else(self, archive: HistoryArchive) -> None:
        """Erasing a session removes all its groups, reports each one's seq and digest, and nothing else.

        Neighbouring sessions — ids that are prefixes or joins of the erased
        ones, the same ids under another tenant — read back byte for byte as
        before. A failure usually means keys are matched by string prefix or
        built by joining ids, or the report does not name what was removed.
        """
        _archive(archive)
        await _seed_archive(archive, [ERASED], 3, "erased")
        await _seed_archive(archive, [SIBLING, *NEIGHBOURS], 2, "kept")
        before = {key: await _groups(archive, key) for key in (SIBLING, *NEIGHBOURS)}
        reports = await erase_fully(archive, EraseTarget.session("tenant-1", "user-1", "session-1"))
        assert await _groups(archive, ERASED) == []
        for key, data in before.items():
            assert await _groups(archive, key) == data, f"neighbour {key} changed"
        assert total(reports, "group") == 3
        expected = [(seq, plain_group(seq, " erased").digest) for seq in range(3)]
        assert reported_groups(reports) == {ERASED: expected}

    async def test_erase_user_and_tenant_take_every_session_below_them(self, archive: HistoryArchive) -> None:
        """A user target takes every session of that user; a tenant target every session of the tenant.

        Sessions of another user (for the user target) and of another tenant
        keep their bytes. A failure usually means the target's level is
        ignored or ids are compared by prefix.
        """
        _archive(archive)
        await _seed_archive(archive, [ERASED, SIBLING, OTHER_USER, *NEIGHBOURS], 2, "x")
        keep = _other_users()
        before = {key: await _groups(archive, key) for key in keep}
        await erase_fully(archive, EraseTarget.user("tenant-1", "user-1"))
        for key in _same_user():
            assert await _groups(archive, key) == [], f"{key} survived its user's erasure"
        for key, data in before.items():
            assert await _groups(archive, key) == data, f"{key} changed by a user erasure"
        reports = await erase_fully(archive, EraseTarget.tenant("tenant-1"))
        tenant_one = [k for k in keep if k.tenant == "tenant-1"]
        for key in keep:
            expected: list[bytes] = [] if key in tenant_one else before[key]
            assert await _groups(archive, key) == expected, f"{key} after the tenant erasure"
        assert total(reports, "group") == 2 * len(tenant_one)

    async def test_erase_keeps_colliding_session_keys_apart(self, archive: HistoryArchive) -> None:
        """Erasing a session, user or tenant leaves the other key of each ``COLLIDING_SESSION_KEYS`` pair.

        The pairs' naive joins are equal on every separator in
        ``COLLISION_SEPARATORS``. A failure means erase builds or matches
        keys by joining ids (or by prefix), so it takes a neighbour's groups
        or misses its own.
        """
        _archive(archive)

        async def seed(key: SessionKey, text: str) -> None:
            await archive.append(key, [plain_group(0, f" {text}")], OpContext())

        await erase_colliding_keys(archive, seed, lambda key: _groups(archive, key), [])

    async def test_erase_groups_takes_only_those_seqs(self, archive: HistoryArchive) -> None:
        """A groups target removes exactly the groups in its seq ranges; the session keeps the rest.

        A failure means the ranges were ignored (the whole session went) or
        read as inclusive at their end.
        """
        _archive(archive)
        await _seed_archive(archive, [ERASED, SIBLING], 6, "g")
        target = EraseTarget.groups_of(ERASED, [SeqRange(1, 3), SeqRange(4, 5)])
        reports = await erase_fully(archive, target)
        left = [g.seq for g in await read_every_group(archive, ERASED)]
        assert left == [0, 3, 5]
        # A read from inside an erased range goes on to the groups past it: an empty page is the end.
        assert [g.seq for g in await read_every_group(archive, ERASED, 1)] == [3, 5]
        assert len(await _groups(archive, SIBLING)) == 6
        assert [seq for seq, _ in reported_groups(reports)[ERASED]] == [1, 2, 4]

    async def test_erase_dry_run_changes_nothing(self, archive: HistoryArchive) -> None:
        """``dry_run=True`` removes nothing and reports what a real erase then removes.

        A failure means the dry run wrote, or its counts differ from the erase's.
        """
        _archive(archive)
        await _seed_archive(archive, [ERASED, SIBLING], 3, "d")
        target = EraseTarget.session("tenant-1", "user-1", "session-1")
        dry = await erase_fully(archive, target, dry_run=True)
        assert len(await _groups(archive, ERASED)) == 3
        real = await erase_fully(archive, target)
        assert total(dry, "group") == total(real, "group") == 3
        assert reported_groups(dry) == reported_groups(real)

    async def test_erase_is_bounded_and_resumable(self, archive: HistoryArchive) -> None:
        """Each call removes at most ``max_items`` and says ``partial`` until nothing is left.

        Calling again continues; once done, another call (and an erase of a
        scope that never existed) reports nothing and ``complete``. A failure
        means the bound was ignored, progress was lost or a status lied.
        """
        _archive(archive)
        await _seed_archive(archive, [ERASED], 5, "b")
        reports = await erase_fully(
            archive, EraseTarget.session("tenant-1", "user-1", "session-1"), max_items=2
        )
        assert all(r.count("group") <= 2 for r in reports)
        assert [r.status for r in reports][-1] is EraseStatus.COMPLETE
        assert all(r.status is EraseStatus.PARTIAL for r in reports[:-1])
        assert total(reports, "group") == 5 and await _groups(archive, ERASED) == []
        again = await archive.erase(EraseTarget.session("tenant-1", "user-1", "session-1"), OpContext())
        absent = await archive.erase(EraseTarget.user("tenant-9", "nobody"), OpContext())
        for report in (again, absent):
            assert report.removed == 0 and report.status is EraseStatus.COMPLETE

    async def test_cancelled_erase_removes_nothing(self, archive: HistoryArchive) -> None:
        """An ``erase`` with a cancelled context raises ``OperationCancelledError`` and removes nothing.

        A failure means the adapter does not check ``ctx`` before it starts.
        """
        _archive(archive)
        await _seed_archive(archive, [ERASED], 2, "c")
        with pytest.raises(OperationCancelledError):
            await archive.erase(EraseTarget.session("tenant-1", "user-1", "session-1"), expired_context())
        assert len(await _groups(archive, ERASED)) == 2

    async def test_erased_bytes_leave_the_storage(
        self, archive: HistoryArchive, raw_storage: RawStorage | None
    ) -> None:
        """After an erase none of the erased text is anywhere in the backend's bytes; a neighbour's still is.

        Needs the ``raw_storage`` fixture. A failure means the backend keeps
        a copy: rows marked deleted instead of removed, free pages or a
        write-ahead log still holding them, or earlier object versions.
        """
        _archive(archive)
        if raw_storage is None:
            pytest.skip("no raw_storage fixture: the byte-level check is not run")
        gone, kept = marker("erased"), marker("kept")
        await _seed_archive(archive, [ERASED], 3, gone)
        await _seed_archive(archive, [SIBLING], 2, kept)
        assert tail(gone) in await raw_bytes(raw_storage), "raw_storage does not show the stored groups"
        await erase_fully(archive, EraseTarget.session("tenant-1", "user-1", "session-1"))
        raw = await raw_bytes(raw_storage)
        assert tail(gone) not in raw, "erased text is still in the backend's bytes"
        assert tail(kept) in raw, "the neighbour's text is gone from the backend's bytes"


# -- session stores -------------------------------------------------------------------------------


def _store(store: SessionStore) -> None:
    require_flag(store, SessionStoreCapabilities, "session store", "erasure")


async def _seed_sessions(store: SessionStore, keys: Sequence[SessionKey], text: str) -> None:
    for key in keys:
        await store.save(key, scoped_snapshot(key, text), None, OpContext())


async def _row(store: SessionStore, key: SessionKey) -> tuple[int, bytes] | None:
    stored = await store.load(key, OpContext())
    return None if stored is None else (stored.revision, snapshot_bytes(stored.snapshot))


class SessionStoreErasureTests:
    """The session store's ``erase`` (declared by ``erasure``); part of :class:`SessionStoreContract`."""

    __agentium_contract__: ClassVar[bool] = True
    __agentium_contract_part__: ClassVar[bool] = True

    @pytest.fixture
    def raw_storage(self) -> RawStorage | None:
        """Override to return a callable giving every byte the store's backend holds (byte-level test)."""
        return None

    async def test_erase_refused_when_undeclared(self, session_store: SessionStore) -> None:
        """Without ``erasure`` declared, ``erase`` raises ``UnsupportedOperationError`` and removes nothing.

        A failure means the store erases without declaring it.
        """
        require_not_flag(session_store, SessionStoreCapabilities, "session store", "erasure")
        await _seed_sessions(session_store, [ERASED], "x")
        with pytest.raises(UnsupportedOperationError):
            await session_store.erase(EraseTarget.session("tenant-1", "user-1", "session-1"), OpContext())
        assert await _row(session_store, ERASED) is not None

    async def test_erase_removes_a_session_and_nothing_else(self, session_store: SessionStore) -> None:
        """Erasing a session removes its snapshot and reports its resident groups; neighbours are untouched.

        Every neighbouring session keeps its revision and its bytes. A
        failure usually means keys are matched by prefix or joined, or the
        report does not name the snapshot's groups.
        """
        _store(session_store)
        await _seed_sessions(session_store, [ERASED], "erased")
        await _seed_sessions(session_store, [SIBLING, *NEIGHBOURS], "kept")
        before = {key: await _row(session_store, key) for key in (SIBLING, *NEIGHBOURS)}
        reports = await erase_fully(session_store, EraseTarget.session("tenant-1", "user-1", "session-1"))
        assert await _row(session_store, ERASED) is None
        for key, row in before.items():
            assert await _row(session_store, key) == row, f"neighbour {key} changed"
        assert total(reports, "snapshot") == 1
        resident = scoped_snapshot(ERASED, "erased").resident
        assert reported_groups(reports) == {ERASED: sorted((g.seq, g.digest) for g in resident)}

    async def test_erase_user_and_tenant_take_every_session_below_them(
        self, session_store: SessionStore
    ) -> None:
        """User and tenant targets take every snapshot below them; a groups target takes none.

        A failure usually means the level is ignored, or ids are compared by prefix.
        """
        _store(session_store)
        await _seed_sessions(session_store, [ERASED, SIBLING, OTHER_USER, *NEIGHBOURS], "x")
        groups = await erase_fully(session_store, EraseTarget.groups_of(ERASED, [SeqRange(0, 100)]))
        assert sum(r.removed for r in groups) == 0 and await _row(session_store, ERASED) is not None
        keep = _other_users()
        before = {key: await _row(session_store, key) for key in keep}
        await erase_fully(session_store, EraseTarget.user("tenant-1", "user-1"))
        for key in _same_user():
            assert await _row(session_store, key) is None, f"{key} survived its user's erasure"
        for key, row in before.items():
            assert await _row(session_store, key) == row, f"{key} changed by a user erasure"
        await erase_fully(session_store, EraseTarget.tenant("tenant-1"))
        for key in keep:
            expected = None if key.tenant == "tenant-1" else before[key]
            assert await _row(session_store, key) == expected, f"{key} after the tenant erasure"

    async def test_erase_keeps_colliding_session_keys_apart(self, session_store: SessionStore) -> None:
        """Erasing a session, user or tenant leaves the other key of each ``COLLIDING_SESSION_KEYS`` pair.

        A failure means erase builds or matches keys by joining ids (or by
        prefix), so it takes a neighbour's snapshot or misses its own.
        """
        _store(session_store)

        async def seed(key: SessionKey, text: str) -> None:
            await _seed_sessions(session_store, [key], text)

        await erase_colliding_keys(session_store, seed, lambda key: _row(session_store, key), None)

    async def test_a_session_created_again_after_erasure_never_reuses_a_revision(
        self, session_store: SessionStore
    ) -> None:
        """A session created again under an erased id starts above every revision the erased one had.

        The session is saved three times (revision 3 in a fresh store),
        erased, and created again (``expected_revision=None``): its revision
        is above the third, and a save expecting any of the three (a writer
        that loaded the erased session before the erasure) raises
        ``SessionConflictError`` and changes nothing. Another user's session
        keeps its revision and bytes. A failure means revisions start again
        at 1 after an erasure, so such a writer's compare-and-set passes once
        the new session is back at its revision: erased text is written back
        and the new session's turns are lost. Keep a store-wide floor that
        ``erase`` raises to the highest revision it removes, and start new
        sessions above it.
        """
        _store(session_store)
        held = [await session_store.save(ERASED, scoped_snapshot(ERASED, "old 1"), None, OpContext())]
        for n in (2, 3):
            held.append(
                await session_store.save(ERASED, scoped_snapshot(ERASED, f"old {n}"), held[-1], OpContext())
            )
        assert held[0] < held[1] < held[2], f"three saves gave revisions {held}"
        await _seed_sessions(session_store, [OTHER_USER], "kept")
        kept = await _row(session_store, OTHER_USER)
        await erase_fully(session_store, EraseTarget.session("tenant-1", "user-1", "session-1"))
        created = await session_store.save(ERASED, scoped_snapshot(ERASED, "new"), None, OpContext())
        assert created > held[2], (
            f"the session created again after its erasure is at revision {created}; the erased one had {held}"
        )
        row = await _row(session_store, ERASED)
        assert row == (created, snapshot_bytes(scoped_snapshot(ERASED, "new")))
        for stale in held:
            with pytest.raises(SessionConflictError):
                await session_store.save(ERASED, scoped_snapshot(ERASED, "stale"), stale, OpContext())
            assert await _row(session_store, ERASED) == row, f"a save expecting revision {stale} wrote"
        assert await _row(session_store, OTHER_USER) == kept, "the other user's session changed"

    async def test_erase_dry_run_changes_nothing(self, session_store: SessionStore) -> None:
        """``dry_run=True`` removes nothing and reports what a real erase then removes.

        A failure means the dry run wrote, or its report differs from the erase's.
        """
        _store(session_store)
        await _seed_sessions(session_store, [ERASED, SIBLING], "d")
        target = EraseTarget.user("tenant-1", "user-1")
        row = await _row(session_store, ERASED)
        dry = await erase_fully(session_store, target, dry_run=True)
        assert await _row(session_store, ERASED) == row
        real = await erase_fully(session_store, target)
        assert total(dry, "snapshot") == total(real, "snapshot") == 2
        assert reported_groups(dry) == reported_groups(real)

    async def test_erase_is_bounded_and_resumable(self, session_store: SessionStore) -> None:
        """Each call removes at most ``max_items`` snapshots and says ``partial`` until none is left.

        Once done, another call (and an erase of a scope that never existed)
        reports nothing and ``complete``. A failure means the bound was
        ignored or a status lied.
        """
        _store(session_store)
        keys = [SessionKey("tenant-1", "user-1", f"s{i}") for i in range(5)]
        await _seed_sessions(session_store, keys, "b")
        reports = await erase_fully(session_store, EraseTarget.user("tenant-1", "user-1"), max_items=2)
        assert all(r.count("snapshot") <= 2 for r in reports)
        assert reports[-1].status is EraseStatus.COMPLETE
        assert all(r.status is EraseStatus.PARTIAL for r in reports[:-1])
        assert total(reports, "snapshot") == 5
        again = await session_store.erase(EraseTarget.user("tenant-1", "user-1"), OpContext())
        absent = await session_store.erase(EraseTarget.tenant("tenant-9"), OpContext())
        for report in (again, absent):
            assert report.removed == 0 and report.status is EraseStatus.COMPLETE

    async def test_cancelled_erase_removes_nothing(self, session_store: SessionStore) -> None:
        """An ``erase`` with a cancelled context raises ``OperationCancelledError`` and removes nothing.

        A failure means the store does not check ``ctx`` before it starts.
        """
        _store(session_store)
        await _seed_sessions(session_store, [ERASED], "c")
        with pytest.raises(OperationCancelledError):
            await session_store.erase(
                EraseTarget.session("tenant-1", "user-1", "session-1"), expired_context()
            )
        assert await _row(session_store, ERASED) is not None

    async def test_erased_bytes_leave_the_storage(
        self, session_store: SessionStore, raw_storage: RawStorage | None
    ) -> None:
        """After an erase no revision of the erased snapshot is anywhere in the backend's bytes.

        Earlier revisions count: a snapshot saved three times must leave no
        copy of any of them (free pages, a write-ahead log, object versions).
        Needs the ``raw_storage`` fixture.
        """
        _store(session_store)
        if raw_storage is None:
            pytest.skip("no raw_storage fixture: the byte-level check is not run")
        old, gone, kept = marker("old"), marker("erased"), marker("kept")
        stored = await session_store.save(ERASED, scoped_snapshot(ERASED, old), None, OpContext())
        await session_store.save(ERASED, scoped_snapshot(ERASED, gone), stored, OpContext())
        await _seed_sessions(session_store, [SIBLING], kept)
        await erase_fully(session_store, EraseTarget.session("tenant-1", "user-1", "session-1"))
        raw = await raw_bytes(raw_storage)
        assert tail(gone) not in raw, "the erased snapshot is still in the backend's bytes"
        assert tail(old) not in raw, (
            "an earlier revision of the erased snapshot is still in the backend's bytes"
        )
        assert tail(kept) in raw, "the neighbour's snapshot is gone from the backend's bytes"
