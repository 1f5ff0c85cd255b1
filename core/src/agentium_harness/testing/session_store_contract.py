"""The session store contract suite: :class:`SessionStoreContract`.

Subclass it in a test module and provide the ``session_store`` fixture::

    class TestMySessionStore(SessionStoreContract):
        @pytest.fixture
        def session_store(self) -> SessionStore:
            return MySessionStore(MySessionStoreConfig(...))

Optionally provide ``reopen_session_store`` (a callable returning a new
adapter over the same storage) to run the durability test, and
``corrupt_snapshot`` (a callable rewriting a stored row's bytes behind the
adapter's back) to run the corruption test.
"""

from __future__ import annotations

import anyio
import pytest

from .._errors import CapabilityError, OperationCancelledError, SessionConflictError, SnapshotCorruptError
from .._ports import OpContext, is_port_stub
from .._ports.sessions import (
    SessionSnapshot,
    SessionStore,
    SessionStoreCapabilities,
    StoredSnapshot,
    seal_snapshot,
)
from .._scope import Scope, SessionKey
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
    reopen,
    require_flag,
    require_not_flag,
)
from .erasure_contract import SessionStoreErasureTests
from .helpers import (
    COLLIDING_SESSION_KEYS,
    control_text_group,
    legacy_snapshot,
    replace_once,
    scoped_snapshot,
)
from .session_store_scope_contract import SessionStoreScopeTests

__all__ = ["SessionStoreContract", "legacy_snapshot", "scoped_snapshot"]

_KEY = SessionKey("tenant-1", "user-1", "session-1")


def _caps(store: SessionStore) -> SessionStoreCapabilities:
    return declared_capabilities(store, SessionStoreCapabilities, "session store")


def _require(store: SessionStore, flag: str) -> None:
    require_flag(store, SessionStoreCapabilities, "session store", flag)


def _require_not(store: SessionStore, flag: str) -> None:
    require_not_flag(store, SessionStoreCapabilities, "session store", flag)


async def _load(store: SessionStore, key: SessionKey) -> StoredSnapshot | None:
    return await store.load(key, OpContext())


def _assert_revision(value: object) -> int:
    assert isinstance(value, int) and not isinstance(value, bool), f"revision must be an int, got {value!r}"
    assert value >= 1, f"revisions start at 1 or above, got {value}"
    return value


class SessionStoreContract(SessionStoreErasureTests, SessionStoreScopeTests, ContractSuite):
    """Standard tests every :class:`~agentium_harness._ports.sessions.SessionStore` adapter must pass.

    Fixtures the subclass provides:

    - ``session_store`` (required): a fresh, empty adapter for each test
      (plain, generator, async or async-generator fixture); close it in its
      teardown.
    - ``reopen_session_store`` (optional): a zero-argument callable (sync or
      async) returning a *new* adapter instance over the same storage.
      Without it the durability test skips. The suite closes what it returns.
    - ``corrupt_snapshot`` (optional): a callable ``corrupt(key, transform)``
      (sync or async) that reads the stored bytes of ``key``'s snapshot
      straight from the backend, passes them to ``transform`` and writes the
      result back in place, bypassing the adapter (see
      :class:`~agentium_harness.testing.helpers.CorruptStored`). Without it
      the corruption test skips.

    Snapshots the suite saves are sealed
    (:func:`~agentium_harness._ports.sessions.seal_snapshot`), as the engine
    saves them. A store should call
    :func:`~agentium_harness._ports.sessions.verify_snapshot` on every load.
    """

    __agentium_contract__ = True

    @pytest.fixture
    def session_store(self) -> SessionStore:
        """Override this fixture: return (or yield) a fresh, empty session store adapter."""
        pytest.fail(
            f"{type(self).__name__} must provide a `session_store` fixture that yields a fresh, empty "
            "adapter",
            pytrace=False,
        )

    @pytest.fixture
    def reopen_session_store(self) -> Reopen[SessionStore] | None:
        """Override to return a callable that opens a new adapter on the same storage."""
        return None

    @pytest.fixture
    def corrupt_snapshot(self) -> CorruptStored | None:
        """Override to return ``corrupt(key, transform)`` rewriting a stored snapshot's bytes in place."""
        return None

    # -- declarations ---------------------------------------------------------------------------

    async def test_declares_capabilities(self, session_store: SessionStore) -> None:
        """The adapter class declares ``SessionStoreCapabilities`` with ``compare_and_set`` in its own body.

        A failure means the declaration is missing, inherited, of the wrong
        type, or lacks the required ``compare_and_set``.
        """
        declared = type(session_store).__dict__.get("capabilities")
        assert isinstance(declared, SessionStoreCapabilities), (
            f"{type(session_store).__name__} must declare `capabilities = SessionStoreCapabilities(...)` "
            f"in its own class body, found {declared!r}"
        )
        for flag in SessionStoreCapabilities.REQUIRED:
            assert getattr(declared, flag), f"required capability {flag} is not declared"

    async def test_declared_capabilities_are_implemented(self, session_store: SessionStore) -> None:
        """Every declared optional capability has a real method, not the port's stub.

        A failure names a flag declared true whose method is still the port's
        stub: implement it or stop declaring the flag.
        """
        caps = _caps(session_store)
        for flag, method in SessionStoreCapabilities.METHODS.items():
            if getattr(caps, flag):
                assert not is_port_stub(getattr(type(session_store), method)), (
                    f"{flag} is declared but {method} is the port's stub"
                )
        for method in ("load", "save"):
            assert not is_port_stub(getattr(type(session_store), method)), f"{method} is the port's stub"

    # -- load and save --------------------------------------------------------------------------

    async def test_load_missing_returns_none(self, session_store: SessionStore) -> None:
        """Loading a session that was never saved returns ``None``.

        A failure means the adapter raises for a missing row or invents an
        empty snapshot (which would hide a missing memory scope).
        """
        assert await _load(session_store, _KEY) is None

    async def test_first_save_creates_a_revision(self, session_store: SessionStore) -> None:
        """``save(expected_revision=None)`` on a new session stores it and returns its revision.

        A failure means the revision returned is not a positive int, or
        ``load`` afterwards does not return the same revision and snapshot.
        """
        snapshot = scoped_snapshot(_KEY)
        revision = _assert_revision(await session_store.save(_KEY, snapshot, None, OpContext()))
        loaded = await _load(session_store, _KEY)
        assert loaded is not None
        assert loaded.revision == revision
        assert loaded.snapshot == snapshot

    async def test_revision_increases_with_each_save(self, session_store: SessionStore) -> None:
        """Each successful save returns a revision greater than the one it replaced.

        A failure means revisions repeat or go backwards, which breaks
        compare-and-set for every later writer.
        """
        revision = await session_store.save(_KEY, scoped_snapshot(_KEY, " 0"), None, OpContext())
        seen = [_assert_revision(revision)]
        for i in range(1, 4):
            revision = await session_store.save(_KEY, scoped_snapshot(_KEY, f" {i}"), revision, OpContext())
            seen.append(_assert_revision(revision))
        assert seen == sorted(set(seen)), f"revisions must strictly increase, got {seen}"
        loaded = await _load(session_store, _KEY)
        assert loaded is not None and loaded.revision == seen[-1]
        assert loaded.snapshot == scoped_snapshot(_KEY, " 3")

    async def test_stale_revision_conflicts_and_changes_nothing(self, session_store: SessionStore) -> None:
        """Saving with an old revision raises ``SessionConflictError``; the stored snapshot is unchanged.

        A failure means the store does last-writer-wins (or compares outside
        the write's atomic step), so two runs could both commit on one base.
        """
        first = await session_store.save(_KEY, scoped_snapshot(_KEY, " a"), None, OpContext())
        second = await session_store.save(_KEY, scoped_snapshot(_KEY, " b"), first, OpContext())
        with pytest.raises(SessionConflictError):
            await session_store.save(_KEY, scoped_snapshot(_KEY, " stale"), first, OpContext())
        loaded = await _load(session_store, _KEY)
        assert loaded is not None
        assert loaded.revision == second
        assert loaded.snapshot == scoped_snapshot(_KEY, " b")

    async def test_create_on_existing_session_conflicts(self, session_store: SessionStore) -> None:
        """``expected_revision=None`` when the session exists raises ``SessionConflictError``.

        A failure means "create" silently overwrote a session another run had
        created.
        """
        revision = await session_store.save(_KEY, scoped_snapshot(_KEY, " a"), None, OpContext())
        with pytest.raises(SessionConflictError):
            await session_store.save(_KEY, scoped_snapshot(_KEY, " again"), None, OpContext())
        loaded = await _load(session_store, _KEY)
        assert loaded is not None and loaded.revision == revision
        assert loaded.snapshot == scoped_snapshot(_KEY, " a")

    async def test_update_of_missing_session_conflicts(self, session_store: SessionStore) -> None:
        """A save expecting a revision of a session that does not exist raises ``SessionConflictError``.

        A failure means the store treats "expected 1, found nothing" as a
        create, resurrecting a session that was never saved (or was removed).
        """
        with pytest.raises(SessionConflictError):
            await session_store.save(_KEY, scoped_snapshot(_KEY), 1, OpContext())
        assert await _load(session_store, _KEY) is None

    async def test_snapshots_round_trip_exactly(self, session_store: SessionStore) -> None:
        """Scoped, legacy (``memory_scope=None``) and empty snapshots load back equal to what was saved.

        A failure means a field was lost or changed: a legacy snapshot gained
        a scope (or lost its format version), resident groups lost tool calls
        or retained records, or optional fields came back with other values.
        """
        cases = {
            SessionKey("t", "u", "scoped"): scoped_snapshot(SessionKey("t", "u", "scoped"), groups=3),
            SessionKey("t", "u", "legacy"): legacy_snapshot(),
            SessionKey("t", "u", "empty"): seal_snapshot(
                SessionSnapshot(memory_scope=Scope("t", "u", "empty"))
            ),
        }
        for key, snapshot in cases.items():
            await session_store.save(key, snapshot, None, OpContext())
        for key, snapshot in cases.items():
            loaded = await _load(session_store, key)
            assert loaded is not None
            assert loaded.snapshot == snapshot, f"snapshot of {key.session!r} changed"
            assert [g.digest for g in loaded.snapshot.resident] == [g.digest for g in snapshot.resident]
        legacy = await _load(session_store, SessionKey("t", "u", "legacy"))
        assert legacy is not None and legacy.snapshot.memory_scope is None

    async def test_free_text_with_nul_and_control_characters_round_trips_exactly(
        self, session_store: SessionStore
    ) -> None:
        """A snapshot whose groups hold NUL, other controls and the text of escapes loads back equal.

        Message content, tool-call arguments and payloads are free text, which
        may hold any valid Unicode (``control_text_group``). A failure means
        the store changed the bytes (a text column that refuses or cuts at NUL,
        such as PostgreSQL ``text``; JSON decoded and re-encoded), and then the
        digest no longer matches: store ``snapshot_bytes`` as they are.
        """
        snapshot = seal_snapshot(
            SessionSnapshot(
                memory_scope=Scope(_KEY.tenant, _KEY.user, _KEY.session),
                boundary=0,
                next_seq=2,
                resident=(control_text_group(0, _KEY), control_text_group(1, _KEY)),
            )
        )
        await session_store.save(_KEY, snapshot, None, OpContext())
        loaded = await _load(session_store, _KEY)
        assert loaded is not None
        assert loaded.snapshot == snapshot and loaded.snapshot.digest == snapshot.digest

    async def test_sessions_are_isolated_even_with_tricky_ids(self, session_store: SessionStore) -> None:
        """Each session key has its own snapshot, even keys that collide under naive key building.

        A failure (a conflict on first save, or another key's snapshot) means
        keys share storage: ids joined with ``:``/``/``, URL-decoded, case
        folded, normalised or trimmed. Use ``SessionKey.key_segments()`` or
        bind ids as parameters.
        """
        for key in TRICKY_SESSION_KEYS:
            await session_store.save(key, scoped_snapshot(key, f" {key!r}", groups=1), None, OpContext())
        for key in TRICKY_SESSION_KEYS:
            loaded = await _load(session_store, key)
            assert loaded is not None, f"{key!r} is missing"
            assert loaded.snapshot == scoped_snapshot(key, f" {key!r}", groups=1), (
                f"wrong snapshot for {key!r}"
            )
        assert await _load(session_store, SessionKey("a", "b", "c:s")) is None

    async def test_colliding_session_keys_stay_apart(self, session_store: SessionStore) -> None:
        """Session keys whose naive keys collide (``COLLIDING_SESSION_KEYS``) save, load and list apart.

        Both keys of each pair create a snapshot: neither save conflicts,
        each loads back its own, and (with ``listing``) each user's listing
        holds only its own session. A failure means the store joins ids
        into its keys without an injective encoding.
        """
        snapshots = {
            key: scoped_snapshot(key, f" collision {i}", groups=1)
            for i, pair in enumerate(COLLIDING_SESSION_KEYS)
            for key in pair
        }
        for key, snapshot in snapshots.items():
            await session_store.save(key, snapshot, None, OpContext())
        for key, snapshot in snapshots.items():
            loaded = await _load(session_store, key)
            assert loaded is not None and loaded.snapshot == snapshot, (
                f"{key!r} loads another session's snapshot"
            )
        if _caps(session_store).listing:
            for key in snapshots:
                listed = await session_store.list_sessions(key.tenant, key.user, 10, OpContext())
                assert listed == [key.session], f"{key.tenant!r}/{key.user!r} lists {listed}"

    async def test_concurrent_saves_on_one_revision_have_one_winner(
        self, session_store: SessionStore
    ) -> None:
        """Of several concurrent saves on the same base revision, exactly one succeeds.

        Six writers load the same revision, wait for each other (a barrier),
        then save together. The others raise ``SessionConflictError`` and the
        stored snapshot is the winner's. A failure means the compare and the
        write are not one atomic step (a lock, a transaction or a conditional
        write).
        """
        await session_store.save(_KEY, scoped_snapshot(_KEY, " base"), None, OpContext())
        writers = 6
        outcomes: dict[int, int | str] = {}
        loaded_bases: dict[int, int] = {}
        arrived = 0
        all_loaded = anyio.Event()

        async def attempt(i: int) -> None:
            # Every writer loads the same base, then waits until all have:
            # the saves are released together, as two runs racing would be,
            # so the compare of each happens before any write it could see.
            nonlocal arrived
            stored = await _load(session_store, _KEY)
            assert stored is not None
            loaded_bases[i] = stored.revision
            arrived += 1
            if arrived == writers:
                all_loaded.set()
            await all_loaded.wait()
            try:
                outcomes[i] = await session_store.save(
                    _KEY, scoped_snapshot(_KEY, f" w{i}"), stored.revision, OpContext()
                )
            except SessionConflictError:
                outcomes[i] = "conflict"

        async with anyio.create_task_group() as tg:
            for i in range(writers):
                tg.start_soon(attempt, i)
        assert len(set(loaded_bases.values())) == 1, f"writers saw different bases: {loaded_bases}"
        winners = [i for i, outcome in outcomes.items() if outcome != "conflict"]
        assert len(outcomes) == writers
        assert len(winners) == 1, f"expected one winner, got {outcomes}"
        loaded = await _load(session_store, _KEY)
        assert loaded is not None
        assert loaded.revision == outcomes[winners[0]]
        assert loaded.snapshot == scoped_snapshot(_KEY, f" w{winners[0]}")

    # -- stored data is checked ------------------------------------------------------------------

    async def test_corrupt_stored_snapshot_raises_snapshot_corrupt_error(
        self, session_store: SessionStore, corrupt_snapshot: CorruptStored | None
    ) -> None:
        """A stored snapshot changed behind the store's back raises ``SnapshotCorruptError`` on every load.

        Runs when ``corrupt_snapshot`` is provided. One row gets one letter of
        a message changed (still valid data, only its digest disagrees), one
        a number replaced by text, one a value nested 1,100 levels deep, one
        a key written twice. A failure means the store returned damaged
        history (it does not call ``verify_snapshot`` or decodes leniently),
        raised another error (a ``RecursionError`` from an unbounded JSON
        parser), or repaired or dropped the row: decode with
        ``plugin_api.decode_snapshot``.
        """
        if corrupt_snapshot is None:
            pytest.skip("no corrupt_snapshot fixture: corruption detection is not checked")
        flipped, retyped = SessionKey("t", "u", "flipped"), SessionKey("t", "u", "retyped")
        deep, doubled = SessionKey("t", "u", "deep"), SessionKey("t", "u", "doubled")
        await session_store.save(flipped, scoped_snapshot(flipped, " corruption-target"), None, OpContext())
        for key in (retyped, deep, doubled):
            await session_store.save(key, scoped_snapshot(key), None, OpContext())
        await call_hook(corrupt_snapshot, flipped, replace_once(b"corruption-target", b"corruption-tarGet"))
        await call_hook(corrupt_snapshot, retyped, replace_once(b'"boundary":5', b'"boundary":"5"'))
        nested = b"[" * 1100 + b"]" * 1100
        await call_hook(corrupt_snapshot, deep, replace_once(b'"boundary":5', b'"boundary":5,"x":' + nested))
        twice = replace_once(b'"boundary":5', b'"boundary":6,"boundary":5')
        await call_hook(corrupt_snapshot, doubled, twice)
        for key in (flipped, retyped, deep, doubled):
            for attempt in ("first", "second"):
                with pytest.raises(SnapshotCorruptError):
                    loaded = await _load(session_store, key)
                    pytest.fail(f"{attempt} load of the damaged {key.session!r} row returned {loaded!r}")

    # -- cancellation ---------------------------------------------------------------------------

    async def test_cancelled_signal_refuses_save(self, session_store: SessionStore) -> None:
        """A save whose context is already cancelled raises ``OperationCancelledError`` and writes nothing.

        A failure means the adapter ignores ``ctx.signal`` (R12, R13).
        """
        with pytest.raises(OperationCancelledError):
            await session_store.save(_KEY, scoped_snapshot(_KEY), None, expired_context())
        assert await _load(session_store, _KEY) is None

    async def test_past_deadline_refuses_save_and_load(self, session_store: SessionStore) -> None:
        """Save and load whose deadline has passed raise ``OperationCancelledError``; nothing is written.

        A failure means the adapter ignores ``ctx.deadline``.
        """
        with pytest.raises(OperationCancelledError):
            await session_store.save(_KEY, scoped_snapshot(_KEY), None, past_deadline_context())
        assert await _load(session_store, _KEY) is None
        await session_store.save(_KEY, scoped_snapshot(_KEY), None, OpContext())
        with pytest.raises(OperationCancelledError):
            await session_store.load(_KEY, past_deadline_context())

    # -- listing --------------------------------------------------------------------------------

    async def test_list_sessions_sorted_bounded_and_per_user(self, session_store: SessionStore) -> None:
        """``list_sessions`` returns one user's session ids, sorted by code point, at most ``limit``.

        With ``after``, only the ids sorting strictly after it (the next page).

        A failure means the listing leaks other users' or tenants' sessions
        (including ids that collide under naive joining), is unsorted,
        ignores the bound, or pages wrongly (repeats ``after`` or skips ids).
        """
        _require(session_store, "listing")
        mine = ["b", "a", "Z", "é", "a/b", "a b", "..", "*"]
        for session in mine:
            key = SessionKey("t", "u", session)
            await session_store.save(key, scoped_snapshot(key, groups=0), None, OpContext())
        for key in (
            SessionKey("t", "u2", "other-user"),
            SessionKey("t2", "u", "other-tenant"),
            SessionKey("t:u", "x", "joined"),
            SessionKey("a:b", "c", "left"),
            SessionKey("a", "b:c", "right"),
        ):
            await session_store.save(key, scoped_snapshot(key, groups=0), None, OpContext())
        ctx = OpContext()
        assert await session_store.list_sessions("t", "u", 100, ctx) == sorted(mine)
        assert await session_store.list_sessions("t", "u", 3, ctx) == sorted(mine)[:3]
        assert await session_store.list_sessions("t", "u", 0, ctx) == []
        assert await session_store.list_sessions("a:b", "c", 10, ctx) == ["left"]
        assert await session_store.list_sessions("a", "b:c", 10, ctx) == ["right"]
        assert await session_store.list_sessions("nobody", "u", 10, ctx) == []
        ordered = sorted(mine)
        assert await session_store.list_sessions("t", "u", 3, ctx, after=ordered[2]) == ordered[3:6]
        assert await session_store.list_sessions("t", "u", 100, ctx, after=ordered[-1]) == []
        assert await session_store.list_sessions("t", "u", 100, ctx, after="a") == [
            s for s in ordered if s > "a"
        ]
        assert await session_store.list_sessions("t", "u2", 10, ctx, after="a") == ["other-user"]

    async def test_list_sessions_refused_when_undeclared(self, session_store: SessionStore) -> None:
        """Without ``listing``, ``list_sessions`` raises ``NotImplementedError`` or ``CapabilityError``.

        A failure means the adapter answers a listing it does not declare.
        """
        _require_not(session_store, "listing")
        with pytest.raises((NotImplementedError, CapabilityError)):
            await session_store.list_sessions("t", "u", 10, OpContext())

    # -- health ---------------------------------------------------------------------------------

    async def test_health_probe(self, session_store: SessionStore) -> None:
        """A declared health check returns a non-empty description.

        A failure means ``health`` raised or returned nothing.
        """
        _require(session_store, "health_check")
        result = await session_store.health(OpContext.with_timeout(10))
        assert isinstance(result, str) and result.strip()

    async def test_health_refused_when_undeclared(self, session_store: SessionStore) -> None:
        """Without ``health_check``, ``health`` raises ``NotImplementedError`` or ``CapabilityError``.

        A failure means an undeclared probe answered.
        """
        _require_not(session_store, "health_check")
        with pytest.raises((NotImplementedError, CapabilityError)):
            await session_store.health(OpContext())

    # -- durability and lifecycle ---------------------------------------------------------------

    async def test_durable_across_reopen(
        self, session_store: SessionStore, reopen_session_store: Reopen[SessionStore] | None
    ) -> None:
        """A snapshot saved by one instance loads, with its revision, in a new instance on the same storage.

        Runs when ``durable`` is declared and ``reopen_session_store`` is
        provided. A failure means saves were only buffered in the process, or
        the revision is not stored with the snapshot.
        """
        _require(session_store, "durable")
        if reopen_session_store is None:
            pytest.skip("no reopen_session_store fixture: durability is not checked")
        snapshot = scoped_snapshot(_KEY, " durable")
        first = await session_store.save(_KEY, snapshot, None, OpContext())
        second = await reopen(reopen_session_store)
        try:
            loaded = await _load(second, _KEY)
            assert loaded == StoredSnapshot(snapshot=snapshot, revision=first)
            # Compare-and-set holds across instances: the old base is stale for both.
            revision = await second.save(_KEY, scoped_snapshot(_KEY, " next"), first, OpContext())
            with pytest.raises(SessionConflictError):
                await session_store.save(_KEY, scoped_snapshot(_KEY, " stale"), first, OpContext())
        finally:
            await second.aclose()
        await session_store.aclose()
        third = await reopen(reopen_session_store)
        try:
            loaded = await _load(third, _KEY)
            assert loaded == StoredSnapshot(snapshot=scoped_snapshot(_KEY, " next"), revision=revision)
        finally:
            await third.aclose()

    async def test_one_adapter_serves_threads_each_with_its_own_event_loop(
        self, session_store: SessionStore, anyio_backend_name: str
    ) -> None:
        """One store object, used at once from four threads that each run an event loop, keeps its promises.

        Hosts share one runtime, and so one adapter, between threads with loops
        of their own (the OpenAI Agents SDK's concurrent-access pattern). Each
        thread saves its own session twice (revisions 1 and 2) and loads it
        back; all four race to create one shared session, and exactly one
        wins. This test's loop, which used the store first, sees every write.

        A failure, or a hang reported after 60 s, means the adapter keeps a
        loop-bound object from one call to the next (an anyio limiter or lock,
        an ``asyncio.Lock``, a client whose connections belong to one loop):
        keep one per loop (``PerLoop`` from ``plugin_api``) or use thread locks
        (docs/sync.md, "Writing adapters that serve any loop").
        """
        shared = SessionKey("tenant-1", "user-1", "loops-shared")
        assert await session_store.load(shared, OpContext.with_timeout(30)) is None  # this loop first
        keys = [SessionKey("tenant-1", "user-1", f"loop-{i}") for i in range(4)]

        async def work(i: int) -> tuple[int, bool]:
            ctx = OpContext.with_timeout(30)
            first = await session_store.save(keys[i], scoped_snapshot(keys[i], f" t{i}"), None, ctx)
            await session_store.save(keys[i], scoped_snapshot(keys[i], f" t{i} again"), first, ctx)
            loaded = await session_store.load(keys[i], ctx)
            assert loaded is not None and loaded.snapshot == scoped_snapshot(keys[i], f" t{i} again")
            try:
                await session_store.save(shared, scoped_snapshot(shared, f" by {i}"), None, ctx)
            except SessionConflictError:
                return loaded.revision, False
            return loaded.revision, True

        results = await from_threads(work, anyio_backend_name)
        assert [revision for revision, _won in results] == [2, 2, 2, 2]
        assert sum(won for _revision, won in results) == 1, "compare-and-set let more than one loop win"
        for i, key in enumerate(keys):
            loaded = await session_store.load(key, OpContext.with_timeout(30))
            assert loaded is not None and loaded.revision == 2
            assert loaded.snapshot == scoped_snapshot(key, f" t{i} again")
        assert await session_store.load(shared, OpContext.with_timeout(30)) is not None

    async def test_aclose_is_idempotent(self, session_store: SessionStore) -> None:
        """``aclose`` can be called more than once without error.

        A failure means a second close raised; teardown may be retried (R42).
        """
        await session_store.save(_KEY, scoped_snapshot(_KEY), None, OpContext())
        await session_store.aclose()
        await session_store.aclose()
