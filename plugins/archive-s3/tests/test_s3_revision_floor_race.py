"""The create/erase race across processes, made deterministic: a create settles past the revision floor.

A create reads the floor, then writes revision floor + 1 create-only. Here
another process (a second store: its own adapter and client, no ETag cached)
erases the session exactly between those two steps, from a botocore hook on
the creating store's lent client that runs just before its create's
``PutObject`` is sent. Without the settle step (sessions_create.py) the
create finds the key absent and lands at revision 1, a revision the erased
session had; a stale holder of that session then writes over it (ABA).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
from s3_helpers import BUCKET, live_keys
from s3_races import elsewhere, once

from agentium_archive_s3 import S3Archive, S3Config, S3CreateUnsettledError, S3SessionStore
from agentium_archive_s3.keys import session_object_key
from agentium_archive_s3.link import S3Client, make_client
from agentium_archive_s3.revision_floor import floor_key, parse_floor, raise_floor
from agentium_harness import CommitState, RuntimeLimits, VerifiedIdentity, create_harness_runtime
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import EraseTarget, OpContext, SessionConflictError, SessionKey
from agentium_harness.testing import scoped_snapshot

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
TARGET = EraseTarget.session("acme", "ana", "s1")
OLD = 5  # the erased incarnation's revisions are 1..OLD


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _client(config: S3Config) -> S3Client:
    # The store's own retries (botocore standard mode), with more attempts than its default: a
    # one-OSD Ceph RGW occasionally answers a 5xx, which the store would retry all the same.
    return make_client(attrs.evolve(config, max_attempts=6))


def _store(config: S3Config) -> S3SessionStore:
    """Another "process": a store of its own with its own client and no ETag cached."""
    return S3SessionStore(config, client=_client(config))


@pytest.fixture
def admin(config: S3Config) -> Iterator[S3Client]:
    """A plain client for looking behind the stores' backs, retrying like theirs (this file's own)."""
    client = _client(config)
    yield client
    client.close()


@pytest.fixture
def hooked(config: S3Config) -> Iterator[tuple[S3Client, list[Callable[[dict[str, Any]], None]]]]:
    """A client whose every ``PutObject`` first runs the hooks (in the caller's thread, before sending)."""
    client = _client(config)
    hooks: list[Callable[[dict[str, Any]], None]] = []

    def before_put(params: dict[str, Any], **_: Any) -> None:
        for hook in list(hooks):
            hook(params)

    client.meta.events.register("before-parameter-build.s3.PutObject", before_put)
    yield client, hooks
    client.close()


def _floor(admin: S3Client, config: S3Config) -> int:
    return parse_floor(admin.get_object(Bucket=BUCKET, Key=floor_key(config.prefix))["Body"].read())


def _snapshot_object(admin: S3Client, config: S3Config) -> bytes | None:
    object_key = session_object_key(config.prefix, KEY)
    if object_key not in live_keys(admin, config.prefix + "/"):
        return None
    data: bytes = admin.get_object(Bucket=BUCKET, Key=object_key)["Body"].read()
    return data


async def _old_incarnation(config: S3Config) -> S3SessionStore:
    """The session at revisions 1..OLD, saved by a store that keeps its ETag cached (returned, open)."""
    holder = _store(config)
    revision = await holder.save(KEY, scoped_snapshot(KEY, " old 1"), None, _ctx())
    for i in range(2, OLD + 1):
        revision = await holder.save(KEY, scoped_snapshot(KEY, f" old {i}"), revision, _ctx())
    assert revision == OLD
    return holder


def _erase_between_floor_read_and_create(
    config: S3Config, hooks: list[Callable[[dict[str, Any]], None]]
) -> None:
    """Arm the race: just before the create's write is sent (its floor read done), another store erases it."""

    async def erase() -> None:
        eraser = _store(config)
        try:
            report = await eraser.erase(TARGET, _ctx())
            assert [s.session for s in report.sessions] == [KEY]  # it did erase the session, in between
        finally:
            await eraser.aclose()

    hooks.append(once(lambda params: "IfNoneMatch" in params, lambda: elsewhere(erase)))


async def test_a_create_racing_an_erasure_in_another_process_settles_past_every_erased_revision(
    config: S3Config, admin: S3Client, hooked: tuple[S3Client, list[Callable[[dict[str, Any]], None]]]
) -> None:
    client, hooks = hooked
    holder = await _old_incarnation(config)
    creator = S3SessionStore(config, client=client)
    stale = _store(config)  # a holder of the erased session with no ETag cached: it reads the header
    try:
        _erase_between_floor_read_and_create(config, hooks)
        new = scoped_snapshot(KEY, " new")
        created = await creator.save(KEY, new, None, _ctx())

        assert _floor(admin, config) == OLD  # the erasure ran, in between, and raised the floor
        assert created > OLD  # above every revision the erased session had (without the fix: 1)
        fresh = _store(config)
        try:
            loaded = await fresh.load(KEY, _ctx())
        finally:
            await fresh.aclose()
        assert loaded is not None and (loaded.revision, loaded.snapshot) == (created, new)

        # No holder of the erased session can write over the new one: every revision it knew is gone.
        stored = _snapshot_object(admin, config)
        for writer in (holder, stale):
            for revision in range(1, OLD + 1):
                with pytest.raises(SessionConflictError):
                    await writer.save(KEY, scoped_snapshot(KEY, f" stale {revision}"), revision, _ctx())
        assert _snapshot_object(admin, config) == stored
        # The creator saves on from what it was told.
        assert await creator.save(KEY, scoped_snapshot(KEY, " on"), created, _ctx()) == created + 1
    finally:
        for store in (holder, creator, stale):
            await store.aclose()


@pytest.mark.parametrize("intruder", ["loaded writer", "erasure"])
async def test_a_create_that_cannot_be_moved_past_the_floor_says_it_committed(
    config: S3Config,
    admin: S3Client,
    hooked: tuple[S3Client, list[Callable[[dict[str, Any]], None]]],
    intruder: str,
) -> None:
    # The remaining window: between the create's write and its move, another writer changes the
    # session (one that loaded the new session: a stale holder is refused, test_s3_erase_races.py).
    # The move (IfMatch on the create's ETag) is refused; the create says it committed.
    client, hooks = hooked
    holder = await _old_incarnation(config)
    await holder.aclose()
    creator = S3SessionStore(config, client=client)
    try:
        _erase_between_floor_read_and_create(config, hooks)

        async def intrude() -> None:
            other = _store(config)
            try:
                if intruder == "erasure":
                    await other.erase(TARGET, _ctx())
                else:  # a process that loaded the new session at revision 1 (its ETag cached) saves on it
                    loaded = await other.load(KEY, _ctx())
                    assert loaded is not None and loaded.revision == 1
                    assert await other.save(KEY, scoped_snapshot(KEY, " loaded"), 1, _ctx()) == 2
            finally:
                await other.aclose()

        hooks.append(once(lambda params: "IfMatch" in params, lambda: elsewhere(intrude)))
        with pytest.raises(
            S3CreateUnsettledError,
            match=r"may have replaced it since\) and last written by this save at revision 1,",
        ) as caught:
            await creator.save(KEY, scoped_snapshot(KEY, " new"), None, _ctx())
        assert (caught.value.revision, caught.value.floor) == (1, OLD)
        assert "moving it to revision 6" in str(caught.value)
        fresh = _store(config)
        try:
            loaded = await fresh.load(KEY, _ctx())
        finally:
            await fresh.aclose()
        if intruder == "erasure":
            assert loaded is None and _floor(admin, config) == OLD
        else:  # the move overwrote nothing: the other writer's save stands
            assert loaded is not None and loaded.revision == 2
            assert loaded.snapshot == scoped_snapshot(KEY, " loaded")
    finally:
        await creator.aclose()


async def test_a_floor_that_keeps_rising_is_followed_within_a_bound(
    config: S3Config, admin: S3Client, hooked: tuple[S3Client, list[Callable[[dict[str, Any]], None]]]
) -> None:
    client, hooks = hooked
    holder = await _old_incarnation(config)
    await holder.aclose()
    creator = S3SessionStore(config, client=client)
    try:
        _erase_between_floor_read_and_create(config, hooks)
        # Before every move, erasures elsewhere raise the floor again (of other sessions: it is
        # store-wide). The create follows a few, then gives up saying it committed.
        raised: list[int] = []
        moves: set[str] = set()

        def rise(params: dict[str, Any]) -> None:
            # Once per move: a move resent with the other ETag form (Ceph RGW) is the same move.
            if "IfMatch" in params and params["IfMatch"].strip('"') not in moves:
                moves.add(params["IfMatch"].strip('"'))
                raised.append(raise_floor(admin, config, _floor(admin, config) + 10, _ctx()))

        hooks.append(rise)
        with pytest.raises(S3CreateUnsettledError, match="kept rising") as caught:
            await creator.save(KEY, scoped_snapshot(KEY, " new"), None, _ctx())
        assert len(raised) == 16  # the bound: 16 moves
        # Every move landed on the ETag of the one before: the last is stored, one past the last
        # floor the create read (each raise came just before the move that followed it).
        assert caught.value.floor == raised[-2]
        loaded = await creator.load(KEY, _ctx())
        assert loaded is not None and loaded.revision == caught.value.revision == raised[-2] + 1
    finally:
        await creator.aclose()


async def test_a_create_cancelled_before_its_move_says_it_committed(
    config: S3Config, admin: S3Client, hooked: tuple[S3Client, list[Callable[[dict[str, Any]], None]]]
) -> None:
    client, hooks = hooked
    holder = await _old_incarnation(config)
    await holder.aclose()
    creator = S3SessionStore(config, client=client)
    try:
        _erase_between_floor_read_and_create(config, hooks)
        ctx = _ctx()
        # Cancelled just before the move is sent: no request leaves after it (the link's check).
        hooks.append(once(lambda params: "IfMatch" in params, lambda: ctx.signal.cancel("host shutdown")))
        new = scoped_snapshot(KEY, " new")
        with pytest.raises(
            S3CreateUnsettledError,
            match=r"may have replaced it since\) and last written by this save at revision 1,",
        ) as caught:
            await creator.save(KEY, new, None, ctx)
        assert "host shutdown" in str(caught.value)
        assert (caught.value.revision, caught.value.floor) == (1, OLD)
        loaded = await creator.load(KEY, _ctx())  # what the error says: the create stands, unmoved
        assert loaded is not None and (loaded.revision, loaded.snapshot) == (1, new)
    finally:
        await creator.aclose()


async def test_an_unsettled_create_forgets_the_etag_of_the_session_erased_under_it(
    config: S3Config, admin: S3Client, hooked: tuple[S3Client, list[Callable[[dict[str, Any]], None]]]
) -> None:
    # The creating store held the erased session itself: it cached that session's ETag at revision
    # 1, the revision the create lands on again. A create left unsettled (cancelled before its
    # move) must not keep that ETag: a save on the revision the error names would send it, and be
    # refused as a conflict by the create's own object, which is at that very revision.
    client, hooks = hooked
    creator = S3SessionStore(config, client=client)
    try:
        assert await creator.save(KEY, scoped_snapshot(KEY, " old 1"), None, _ctx()) == 1
        _erase_between_floor_read_and_create(config, hooks)
        ctx = _ctx()
        hooks.append(once(lambda params: "IfMatch" in params, lambda: ctx.signal.cancel("host shutdown")))
        new = scoped_snapshot(KEY, " new")
        with pytest.raises(S3CreateUnsettledError) as caught:
            await creator.save(KEY, new, None, ctx)
        assert (caught.value.revision, caught.value.floor) == (1, 1)
        stored = _snapshot_object(admin, config)
        assert stored is not None and stored.startswith(b"agentium-s3-snapshot/2 revision=1 ")
        # The session holds the create's snapshot at revision 1: a save on it lands.
        on = scoped_snapshot(KEY, " on")
        assert await creator.save(KEY, on, caught.value.revision, _ctx()) == 2
        loaded = await creator.load(KEY, _ctx())
        assert loaded is not None and (loaded.revision, loaded.snapshot) == (2, on)
    finally:
        await creator.aclose()


async def test_a_save_over_a_session_another_process_erased_is_a_conflict(
    config: S3Config, admin: S3Client
) -> None:
    # The holder's store has the ETag cached, so its save is sent (IfMatch) without a read first.
    # moto (as AWS) answers 404 NoSuchKey to IfMatch on a missing key, Ceph RGW 412: both mean the
    # compare-and-set failed, and the port says SessionConflictError, writing nothing.
    holder = await _old_incarnation(config)
    try:
        eraser = _store(config)
        try:
            await eraser.erase(TARGET, _ctx())
        finally:
            await eraser.aclose()
        with pytest.raises(SessionConflictError, match="the session was removed; nothing was written"):
            await holder.save(KEY, scoped_snapshot(KEY, " stale"), OLD, _ctx())
        assert _snapshot_object(admin, config) is None
    finally:
        await holder.aclose()


@pytest.mark.parametrize("intruder", [None, "erasure"])
async def test_the_engine_reports_a_create_that_raced_an_erasure_by_where_it_landed(
    config: S3Config, hooked: tuple[S3Client, list[Callable[[dict[str, Any]], None]]], intruder: str | None
) -> None:
    # A run's first turn: its load finds no session; before its create is sent, another process
    # creates the session (revisions 1..OLD) and erases it. The engine says committed at the
    # revision the create was moved to, and the next turn saves on it. With the session erased
    # again before the move, the engine reads back nothing: not committed, and the next run
    # creates the session above every erased revision.
    client, hooks = hooked
    store = S3SessionStore(config, client=client)
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=S3Archive(config),
        session_store=store,
        limits=RuntimeLimits(op_timeout_s=30),
    )
    ana = VerifiedIdentity(KEY.tenant, KEY.user, "test")
    object_key = session_object_key(config.prefix, KEY)

    async def incarnate_and_erase() -> None:
        holder = await _old_incarnation(config)
        await holder.aclose()
        eraser = _store(config)
        try:
            await eraser.erase(TARGET, _ctx())
        finally:
            await eraser.aclose()

    async def erase() -> None:
        eraser = _store(config)
        try:
            await eraser.erase(TARGET, _ctx())
        finally:
            await eraser.aclose()

    try:
        hooks.append(
            once(
                lambda params: "IfNoneMatch" in params and params["Key"] == object_key,
                lambda: elsewhere(incarnate_and_erase),
            )
        )
        if intruder is None:
            first = await runtime.run(ana, KEY.session, "The first turn.")
            assert first.committed and first.snapshot_revision == OLD + 1
            second = await runtime.run(ana, KEY.session, "The second turn.")
            assert second.committed and second.snapshot_revision == OLD + 2
            return
        hooks.append(
            once(
                lambda params: "IfMatch" in params and params["Key"] == object_key,
                lambda: elsewhere(erase),
            )
        )
        with pytest.raises(S3CreateUnsettledError) as caught:
            await runtime.run(ana, KEY.session, "The first turn.")
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert await store.load(KEY, _ctx()) is None
        again = await runtime.run(ana, KEY.session, "The first turn, again.")
        assert again.committed and again.snapshot_revision == OLD + 1
    finally:
        await runtime.aclose()
