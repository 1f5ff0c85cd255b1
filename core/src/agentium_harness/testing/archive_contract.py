"""The history archive contract suite: :class:`ArchiveContract`.

Subclass it in a test module and provide the ``archive`` fixture::

    class TestMyArchive(ArchiveContract):
        @pytest.fixture
        def archive(self) -> HistoryArchive:
            return MyArchive(MyArchiveConfig(...))

Optionally provide ``reopen_archive`` (a callable returning a new adapter over
the same storage) to run the durability test, and ``corrupt_archived_group``
(a callable rewriting a stored group's bytes behind the adapter's back) to run
the corruption test. Declared capabilities decide which tests run; the others
skip and say why.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from .._errors import (
    ArchiveConflictError,
    ArchiveError,
    CapabilityError,
    ContractViolationError,
    OperationCancelledError,
)
from .._history import MessageGroup
from .._ports import OpContext, is_port_stub
from .._ports.archive import ArchiveCapabilities, ArchiveReceipt, HistoryArchive
from .._scope import SessionKey
from ._suite import (
    TRICKY_SESSION_KEYS,
    ContractSuite,
    CorruptStored,
    Reopen,
    call_hook,
    declared_capabilities,
    expired_context,
    from_threads,
    past_deadline_context,
    plain_group,
    reopen,
    require_flag,
    require_not_flag,
    rich_group,
)
from .erasure_contract import ArchiveErasureTests, read_every_group
from .helpers import COLLIDING_SESSION_KEYS, control_text_group, replace_once

__all__ = ["ArchiveContract"]

_KEY = SessionKey("tenant-1", "user-1", "session-1")


def _caps(archive: HistoryArchive) -> ArchiveCapabilities:
    return declared_capabilities(archive, ArchiveCapabilities, "archive")


def _require(archive: HistoryArchive, flag: str) -> None:
    require_flag(archive, ArchiveCapabilities, "archive", flag)


def _require_not(archive: HistoryArchive, flag: str) -> None:
    require_not_flag(archive, ArchiveCapabilities, "archive", flag)


async def _read_all(archive: HistoryArchive, key: SessionKey) -> list[MessageGroup]:
    return await read_every_group(archive, key)


def _assert_receipts(receipts: Sequence[ArchiveReceipt], groups: Sequence[MessageGroup]) -> None:
    receipts = list(receipts)
    assert len(receipts) == len(groups), f"expected {len(groups)} receipts, got {len(receipts)}"
    for receipt, group in zip(receipts, groups, strict=True):
        assert isinstance(receipt, ArchiveReceipt)
        assert receipt.seq == group.seq, f"receipt seq {receipt.seq} for group {group.seq}"
        assert receipt.digest == group.digest, f"receipt digest {receipt.digest} != group {group.digest}"
        assert isinstance(receipt.location, str) and receipt.location, "receipt location must be non-empty"


class ArchiveContract(ArchiveErasureTests, ContractSuite):
    """Standard tests every :class:`~agentium_harness._ports.archive.HistoryArchive` adapter must pass.

    Fixtures the subclass provides:

    - ``archive`` (required): a fresh, empty adapter for each test. It may be
      a plain, generator, async or async-generator fixture; close the adapter
      in its teardown.
    - ``reopen_archive`` (optional): a zero-argument callable (sync or async)
      that returns a *new* adapter instance over the same storage as
      ``archive``. Without it the durability test skips. The suite closes
      the instances it gets from it.
    - ``corrupt_archived_group`` (optional): a callable
      ``corrupt(key, seq, transform)`` (sync or async) that reads the stored
      bytes of one archived group straight from the backend, passes them to
      ``transform`` and writes the result back in place, leaving any stored
      digest as it was (see :class:`~agentium_harness.testing.helpers.CorruptStored`).
      Without it the corruption test skips.

    Reads must re-check what they return: call
    :func:`~agentium_harness._ports.archive.check_archived_group` on every group.
    """

    __agentium_contract__ = True

    @pytest.fixture
    def archive(self) -> HistoryArchive:
        """Override this fixture: return (or yield) a fresh, empty archive adapter."""
        pytest.fail(
            f"{type(self).__name__} must provide an `archive` fixture that yields a fresh, empty adapter",
            pytrace=False,
        )

    @pytest.fixture
    def reopen_archive(self) -> Reopen[HistoryArchive] | None:
        """Override to return a callable that opens a new adapter on the same storage as ``archive``."""
        return None

    @pytest.fixture
    def corrupt_archived_group(self) -> CorruptStored | None:
        """Override to return ``corrupt(key, seq, transform)`` rewriting a stored group's bytes in place."""
        return None

    # -- declarations ---------------------------------------------------------------------------

    async def test_declares_capabilities(self, archive: HistoryArchive) -> None:
        """The adapter class declares ``capabilities = ArchiveCapabilities(...)`` with ``idempotent_append``.

        A failure means the declaration is missing, inherited rather than
        declared in the adapter's own class body (the registry requires its
        own), of the wrong type, or lacks the required ``idempotent_append``.
        """
        declared = type(archive).__dict__.get("capabilities")
        assert isinstance(declared, ArchiveCapabilities), (
            f"{type(archive).__name__} must declare `capabilities = ArchiveCapabilities(...)` in its own "
            f"class body, found {declared!r}"
        )
        for flag in ArchiveCapabilities.REQUIRED:
            assert getattr(declared, flag), f"required capability {flag} is not declared"

    async def test_declared_capabilities_are_implemented(self, archive: HistoryArchive) -> None:
        """Every declared optional capability has a real method, not the port's stub.

        A failure names a flag declared true whose method is still inherited
        from ``HistoryArchive``: implement it or stop declaring the flag.
        """
        caps = _caps(archive)
        for flag, method in ArchiveCapabilities.METHODS.items():
            if getattr(caps, flag):
                assert not is_port_stub(getattr(type(archive), method)), (
                    f"{flag} is declared but {method} is the port's stub"
                )
        assert not is_port_stub(type(archive).append), "append is the port's stub; implement it"

    # -- append ---------------------------------------------------------------------------------

    async def test_append_returns_one_receipt_per_group_in_order(self, archive: HistoryArchive) -> None:
        """``append`` returns one receipt per group, in order, with the group's ``seq`` and digest.

        A failure usually means receipts are built from something other than
        the stored canonical bytes (digest differs from ``MessageGroup.digest``),
        are reordered, or are missing for groups that were already stored.
        """
        groups = [rich_group(0, _KEY), plain_group(1), rich_group(2, _KEY, "x")]
        receipts = await archive.append(_KEY, groups, OpContext())
        _assert_receipts(receipts, groups)

    async def test_append_empty_batch_returns_no_receipts(self, archive: HistoryArchive) -> None:
        """Appending an empty batch succeeds with no receipts and stores nothing.

        A failure means the adapter errors on an empty batch (the runtime may
        send one when nothing is evicted) or invents receipts.
        """
        assert list(await archive.append(_KEY, [], OpContext())) == []
        # Later appends still start from an empty session.
        receipts = await archive.append(_KEY, [plain_group(0)], OpContext())
        _assert_receipts(receipts, [plain_group(0)])

    async def test_identical_reappend_is_a_noop_success(self, archive: HistoryArchive) -> None:
        """Re-appending stored groups with equal content succeeds and returns the same receipts.

        The runtime retries an append whose acknowledgment it did not see, so
        this must be a no-op. A failure means the adapter raises on duplicates,
        stores a second copy, or returns a different digest.
        """
        groups = [rich_group(0, _KEY), plain_group(1)]
        first = await archive.append(_KEY, groups, OpContext())
        again = await archive.append(_KEY, groups, OpContext())
        _assert_receipts(again, groups)
        assert [(r.seq, r.digest) for r in again] == [(r.seq, r.digest) for r in first]
        # A batch mixing an already-stored group with a new one also succeeds.
        mixed = [plain_group(1), plain_group(2)]
        _assert_receipts(await archive.append(_KEY, mixed, OpContext()), mixed)
        if _caps(archive).bounded_reads:
            assert await _read_all(archive, _KEY) == [groups[0], groups[1], mixed[1]]

    async def test_conflicting_reappend_raises_and_keeps_the_stored_group(
        self, archive: HistoryArchive
    ) -> None:
        """The same ``seq`` with different content raises ``ArchiveConflictError``; the stored group stays.

        A failure means the adapter overwrote archived history (last writer
        wins) or accepted the conflict silently. Compare digests before writing
        and never update an archived row.
        """
        original = rich_group(0, _KEY)
        await archive.append(_KEY, [original], OpContext())
        with pytest.raises(ArchiveConflictError):
            await archive.append(_KEY, [rich_group(0, _KEY, " changed")], OpContext())
        # The original is still what is stored: re-appending it is still a no-op...
        _assert_receipts(await archive.append(_KEY, [original], OpContext()), [original])
        if _caps(archive).bounded_reads:
            assert await _read_all(archive, _KEY) == [original]

    async def test_batch_with_a_conflict_writes_nothing(self, archive: HistoryArchive) -> None:
        """A batch containing one conflicting group stores none of its groups, even those before it.

        A failure means the batch was written group by group without a
        transaction (or a check-all-then-write pass), so a conflict left part
        of the batch behind.
        """
        await archive.append(_KEY, [plain_group(0)], OpContext())
        new_first = plain_group(1, " new")
        with pytest.raises(ArchiveConflictError):
            await archive.append(_KEY, [new_first, plain_group(0, " conflicting")], OpContext())
        # seq 1 must not exist: a different group at seq 1 is accepted, not a conflict.
        other = plain_group(1, " other")
        _assert_receipts(await archive.append(_KEY, [other], OpContext()), [other])
        if _caps(archive).bounded_reads:
            assert await _read_all(archive, _KEY) == [plain_group(0), other]

    async def test_batch_repeating_a_seq_with_different_content_conflicts(
        self, archive: HistoryArchive
    ) -> None:
        """A batch that carries the same ``seq`` twice with different content conflicts and writes nothing.

        A failure means conflicts are only checked against rows stored before
        the batch, so the second copy was acknowledged with a digest that is
        not what the archive holds.
        """
        with pytest.raises(ArchiveConflictError):
            await archive.append(_KEY, [plain_group(0), plain_group(0, " twin")], OpContext())
        fresh = plain_group(0, " fresh")
        _assert_receipts(await archive.append(_KEY, [fresh], OpContext()), [fresh])

    # -- cancellation ---------------------------------------------------------------------------

    async def test_cancelled_signal_refuses_append(self, archive: HistoryArchive) -> None:
        """An append whose context is already cancelled raises ``OperationCancelledError`` and writes nothing.

        A failure means the adapter ignores ``ctx.signal`` (R12, R13). Check
        ``ctx.expired`` before starting backend work.
        """
        with pytest.raises(OperationCancelledError):
            await archive.append(_KEY, [plain_group(0)], expired_context())
        other = plain_group(0, " after")
        _assert_receipts(await archive.append(_KEY, [other], OpContext()), [other])

    async def test_past_deadline_refuses_append(self, archive: HistoryArchive) -> None:
        """An append whose deadline has passed raises ``OperationCancelledError`` and writes nothing.

        A failure means the adapter ignores ``ctx.deadline``; ``ctx.expired``
        covers both the signal and the deadline.
        """
        with pytest.raises(OperationCancelledError):
            await archive.append(_KEY, [plain_group(0)], past_deadline_context())
        other = plain_group(0, " after")
        _assert_receipts(await archive.append(_KEY, [other], OpContext()), [other])

    # -- isolation and identifiers --------------------------------------------------------------

    async def test_sessions_are_isolated_even_with_tricky_ids(self, archive: HistoryArchive) -> None:
        """Each session key has its own groups, even keys that collide under naive key building.

        Every key gets different content at ``seq`` 0; a conflict means two
        keys share storage (ids joined with ``:`` or ``/``, URL-decoded, case
        folded, normalised or trimmed). Build keys from
        ``SessionKey.key_segments()`` or bind ids as parameters.
        """
        groups = {key: rich_group(0, key, f" for {key!r}") for key in TRICKY_SESSION_KEYS}
        for key, group in groups.items():
            _assert_receipts(await archive.append(key, [group], OpContext()), [group])
        if _caps(archive).bounded_reads:
            for key, group in groups.items():
                assert await _read_all(archive, key) == [group], f"wrong groups for {key!r}"
            assert await _read_all(archive, SessionKey("a", "b", "c:s")) == []

    async def test_colliding_session_keys_stay_apart(self, archive: HistoryArchive) -> None:
        """Session keys whose naive keys collide (``COLLIDING_SESSION_KEYS``) append and read apart.

        Both keys of each pair append a different group 0: neither append
        conflicts, and (with ``bounded_reads``) each key reads back only its
        own. The pairs move an id's tail across the tenant/user and
        user/session boundaries with every separator in
        ``COLLISION_SEPARATORS``. A failure means the archive joins ids into
        its keys without an injective encoding.
        """
        groups = {
            key: rich_group(0, key, f" collision {i}")
            for i, pair in enumerate(COLLIDING_SESSION_KEYS)
            for key in pair
        }
        for key, group in groups.items():
            _assert_receipts(await archive.append(key, [group], OpContext()), [group])
        if _caps(archive).bounded_reads:
            for key, group in groups.items():
                assert await _read_all(archive, key) == [group], f"{key!r} reads another session's groups"

    async def test_tricky_ids_round_trip(self, archive: HistoryArchive) -> None:
        """Ids with unicode, ``/``, ``..``, ``*`` and quotes are stored and read back exactly.

        A failure means ids are escaped lossily or used as paths or patterns.
        """
        _require(archive, "bounded_reads")
        for key in TRICKY_SESSION_KEYS:
            group = rich_group(3, key)
            await archive.append(key, [group], OpContext())
            (read,) = await archive.read_groups(key, 0, 5, OpContext())
            assert read == group
            assert read.retained is not None and read.retained.scope.session == key.session

    # -- reads ----------------------------------------------------------------------------------

    async def test_read_groups_returns_whole_groups_ascending_from_start(
        self, archive: HistoryArchive
    ) -> None:
        """``read_groups`` returns whole stored groups with ``seq >= start_seq``, ascending.

        A failure means groups come back out of order, start at the wrong
        ``seq``, differ from what was appended, or gaps in numbering confuse
        the scan.
        """
        _require(archive, "bounded_reads")
        groups = [rich_group(s, _KEY) if s % 2 else plain_group(s) for s in (0, 1, 2, 3, 4, 7, 9)]
        await archive.append(_KEY, groups[:4], OpContext())
        await archive.append(_KEY, groups[4:], OpContext())
        # Read on from each page's last seq + 1 (a page may be shorter than asked, never empty
        # while a group at or past its start is stored): seq 5 is in a gap, and 7 and 9 follow it.
        assert await read_every_group(archive, _KEY, 0, 100) == groups
        assert await read_every_group(archive, _KEY, 2, 100) == groups[2:]
        assert await read_every_group(archive, _KEY, 5, 100) == groups[5:]
        assert list(await archive.read_groups(_KEY, 10, 100, OpContext())) == []
        assert list(await archive.read_groups(SessionKey("other", "u", "s"), 0, 100, OpContext())) == []

    async def test_read_groups_never_exceeds_max_groups(self, archive: HistoryArchive) -> None:
        """``read_groups`` returns at most ``max_groups`` groups (the first ones), and none for 0.

        A page may be shorter than asked (an archive bounding the bytes of one
        call), but never empty while a group at or past its start is stored.
        A failure means the bound is ignored or applied after a wider fetch
        that returns too much; the runtime reports this as a contract violation.
        """
        _require(archive, "bounded_reads")
        groups = [plain_group(s) for s in range(12)]
        await archive.append(_KEY, groups, OpContext())
        for start, asked in ((0, 5), (4, 3), (0, 1)):
            page = list(await archive.read_groups(_KEY, start, asked, OpContext()))
            assert 1 <= len(page) <= asked and page == groups[start : start + len(page)], (
                f"read_groups({start}, {asked}) returned seqs {[g.seq for g in page]}"
            )
        assert list(await archive.read_groups(_KEY, 0, 0, OpContext())) == []

    async def test_rich_groups_round_trip_exactly(self, archive: HistoryArchive) -> None:
        """Groups with tool calls, nested arguments and retained records read back equal, same digest.

        A failure means some field is dropped or changed on the way (a tuple
        turned into a list that does not convert back, a float reformatted,
        a retained record lost); store the canonical JSON bytes as they are.
        """
        _require(archive, "bounded_reads")
        groups = [rich_group(s, _KEY, f" #{s}") for s in range(3)]
        receipts = await archive.append(_KEY, groups, OpContext())
        read = await read_every_group(archive, _KEY, 0, 3)
        assert read == groups
        assert [g.digest for g in read] == [r.digest for r in receipts]
        assert all(g.is_complete for g in read)

    async def test_free_text_with_nul_and_control_characters_round_trips_exactly(
        self, archive: HistoryArchive
    ) -> None:
        """Free text holding NUL, other controls and the text of escapes reads back equal, same digest.

        Message content, tool-call arguments and payloads are free text, which
        may hold any valid Unicode (``control_text_group``). A failure means
        the store changed it: a text column that refuses or cuts at NUL
        (PostgreSQL ``text``, a C string), or JSON decoded and re-encoded on the
        way; store the canonical JSON bytes as they are.
        """
        _require(archive, "bounded_reads")
        groups = [control_text_group(s, _KEY) for s in range(2)]
        receipts = await archive.append(_KEY, groups, OpContext())
        read = await read_every_group(archive, _KEY, 0, 2)
        assert read == groups
        assert [g.digest for g in read] == [r.digest for r in receipts] == [g.digest for g in groups]

    async def test_reads_recheck_digests_of_stored_groups(
        self, archive: HistoryArchive, corrupt_archived_group: CorruptStored | None
    ) -> None:
        """A stored group changed behind the archive's back makes every read of it raise ``ArchiveError``.

        Runs when ``bounded_reads`` is declared and ``corrupt_archived_group``
        is provided. One letter of a message is changed (still valid data, only
        its digest disagrees). A failure means the read returned damaged
        history instead of re-checking the digest, or repaired or dropped the
        row; raise ``ArchiveCorruptError`` (an ``ArchiveError``).
        """
        _require(archive, "bounded_reads")
        if corrupt_archived_group is None:
            pytest.skip("no corrupt_archived_group fixture: digest re-checks are not tested")
        groups = [plain_group(0), plain_group(1, " corruption-target"), plain_group(2)]
        await archive.append(_KEY, groups, OpContext())
        await call_hook(
            corrupt_archived_group, _KEY, 1, replace_once(b"corruption-target", b"corruption-tarGet")
        )
        for attempt in ("first", "second"):
            with pytest.raises(ArchiveError):
                read = await read_every_group(archive, _KEY, 0, 10)
                pytest.fail(f"{attempt} read of a damaged group returned {read!r}")
        # The groups before it are still readable on their own.
        assert list(await archive.read_groups(_KEY, 0, 1, OpContext())) == groups[:1]

    async def test_reads_refuse_a_group_of_another_session(self, archive: HistoryArchive) -> None:
        """A group whose retained scope names another session is never returned under this key.

        The archive may refuse it at ``append`` (``ArchiveError``,
        ``ContractViolationError`` or ``ValueError``), or must refuse it at
        ``read_groups`` with ``ArchiveError``. A failure means a misfiled or
        copied group would leak one session's history into another's.
        """
        _require(archive, "bounded_reads")
        other = SessionKey(_KEY.tenant, _KEY.user, "another-session")
        misfiled = rich_group(0, other, " misfiled")
        try:
            await archive.append(_KEY, [misfiled], OpContext())
        except (ArchiveError, ContractViolationError, ValueError):
            return  # refused on the way in: nothing was stored
        with pytest.raises(ArchiveError):
            read = await read_every_group(archive, _KEY, 0, 10)
            pytest.fail(f"the read returned another session's group: {read!r}")

    async def test_cancelled_signal_refuses_read(self, archive: HistoryArchive) -> None:
        """A read whose context is cancelled raises ``OperationCancelledError``.

        A failure means ``read_groups`` ignores ``ctx.signal`` (R12, R13).
        """
        _require(archive, "bounded_reads")
        await archive.append(_KEY, [plain_group(0)], OpContext())
        with pytest.raises(OperationCancelledError):
            await archive.read_groups(_KEY, 0, 5, expired_context())

    async def test_read_groups_refused_when_undeclared(self, archive: HistoryArchive) -> None:
        """Without ``bounded_reads``, ``read_groups`` raises ``NotImplementedError`` or ``CapabilityError``.

        A failure means the adapter answers reads it does not declare; declare
        ``bounded_reads`` (and pass its tests) or leave the port's stub in place.
        """
        _require_not(archive, "bounded_reads")
        with pytest.raises((NotImplementedError, CapabilityError)):
            await archive.read_groups(_KEY, 0, 5, OpContext())

    # -- health ---------------------------------------------------------------------------------

    async def test_health_probe(self, archive: HistoryArchive) -> None:
        """A declared health check returns a non-empty description.

        A failure means ``health`` raised or returned nothing; it should run a
        small bounded probe and describe the backend.
        """
        _require(archive, "health_check")
        result = await archive.health(OpContext.with_timeout(10))
        assert isinstance(result, str) and result.strip()

    async def test_health_refused_when_undeclared(self, archive: HistoryArchive) -> None:
        """Without ``health_check``, ``health`` raises ``NotImplementedError`` or ``CapabilityError``.

        A failure means an undeclared probe answered; declare ``health_check``
        or keep the port's stub.
        """
        _require_not(archive, "health_check")
        with pytest.raises((NotImplementedError, CapabilityError)):
            await archive.health(OpContext())

    # -- durability and lifecycle ---------------------------------------------------------------

    async def test_durable_across_reopen(
        self, archive: HistoryArchive, reopen_archive: Reopen[HistoryArchive] | None
    ) -> None:
        """Groups acknowledged by one instance are seen by a new instance over the same storage.

        Runs when ``durable`` is declared and ``reopen_archive`` is provided.
        A failure means acknowledged groups were only buffered in the process
        (not committed or flushed before the receipt).
        """
        _require(archive, "durable")
        if reopen_archive is None:
            pytest.skip("no reopen_archive fixture: durability is not checked")
        groups = [rich_group(0, _KEY), plain_group(1)]
        await archive.append(_KEY, groups, OpContext())
        second = await reopen(reopen_archive)
        try:
            # Conflict detection works through the port even without reads.
            with pytest.raises(ArchiveConflictError):
                await second.append(_KEY, [plain_group(1, " changed")], OpContext())
            _assert_receipts(await second.append(_KEY, groups, OpContext()), groups)
            if _caps(second).bounded_reads:
                assert await _read_all(second, _KEY) == groups
        finally:
            await second.aclose()
        await archive.aclose()
        third = await reopen(reopen_archive)
        try:
            if _caps(third).bounded_reads:
                assert await _read_all(third, _KEY) == groups
            with pytest.raises(ArchiveConflictError):
                await third.append(_KEY, [plain_group(1, " changed")], OpContext())
        finally:
            await third.aclose()

    async def test_one_adapter_serves_threads_each_with_its_own_event_loop(
        self, archive: HistoryArchive, anyio_backend_name: str
    ) -> None:
        """One archive object, used at once from four threads that each run an event loop, loses nothing.

        Hosts share one runtime, and so one adapter, between threads with loops
        of their own (the OpenAI Agents SDK's concurrent-access pattern), and
        call it from successive ``anyio.run`` calls. Each thread appends three
        groups to its own session and reads them back; this test's loop, which
        used the adapter first, reads them all afterwards.

        A failure, or a hang reported after 60 s, means the adapter keeps a
        loop-bound object from one call to the next (an anyio limiter or lock,
        an ``asyncio.Lock``, a client whose connections belong to one loop):
        keep one per loop (``PerLoop`` from ``plugin_api``) or use thread locks
        (docs/sync.md, "Writing adapters that serve any loop").
        """
        await archive.append(_KEY, [plain_group(0, "this loop first")], OpContext.with_timeout(30))
        keys = [SessionKey("tenant-1", "user-1", f"loop-{i}") for i in range(4)]

        def groups(i: int) -> list[MessageGroup]:
            return [plain_group(seq, f"thread {i} group {seq}") for seq in range(3)]

        async def work(i: int) -> list[str]:
            for group in groups(i):
                await archive.append(keys[i], [group], OpContext.with_timeout(30))
            return [g.digest for g in await read_every_group(archive, keys[i], 0, 10)]

        results = await from_threads(work, anyio_backend_name)
        expected = [[g.digest for g in groups(i)] for i in range(4)]
        assert results == expected, "a write made on another loop is lost"
        for i, key in enumerate(keys):
            assert [g.digest for g in await _read_all(archive, key)] == [g.digest for g in groups(i)]

    async def test_aclose_is_idempotent(self, archive: HistoryArchive) -> None:
        """``aclose`` can be called more than once, before or after use, without error.

        A failure means a second close raised; the runtime's teardown may be
        retried (R42), so guard the close with a flag.
        """
        await archive.append(_KEY, [plain_group(0)], OpContext())
        await archive.aclose()
        await archive.aclose()
