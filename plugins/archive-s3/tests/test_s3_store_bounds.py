"""The session store's own bounds: a save of another session's snapshot, a folder of stray objects, close.

- A save whose snapshot's memory scope (or a resident group's retained scope)
  names another session than its key is refused with
  :class:`~agentium_archive_s3.S3ScopeMismatchError` before any request:
  nothing is written (the engine's load would refuse it later, after it was stored).
- ``list_sessions`` examines at most ``max_listed_sessions`` objects of the
  user's folder, whatever they are: a folder filled with objects not named like
  snapshots is refused with a typed error, not paged through without end; a
  page the server says is not the last, without a continuation token, is
  refused too (code ``ListingIncomplete``), not taken for the end; so is such
  a page in the erasures' scope listings and the archive's read listing.
- ``aclose`` waits at most ``close_timeout_s`` for requests still running,
  whatever ``read_timeout_s`` is; a write in flight meanwhile still completes,
  and its caller hears truthfully that it landed. A call after ``aclose`` is
  refused at once (code ``closed``), even a load or an erase of that write's
  session, which the write fence would otherwise hold up; and ``aclose``
  needs no worker thread of anyio's default pool (all may be taken).

Behaviour here is the adapter's own, the same on every server: moto only.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import attrs
import pytest
from s3_fault_proxy import Fault, FaultProxy
from s3_helpers import BUCKET, live_keys, make_config, raw_client
from s3_servers import S3Server

from agentium_archive_s3 import (
    S3Archive,
    S3ArchiveError,
    S3Config,
    S3ScopeMismatchError,
    S3SessionStore,
    S3SessionStoreError,
    S3UnavailableError,
)
from agentium_archive_s3.erasure import list_scope
from agentium_archive_s3.link import make_client
from agentium_harness import ScopeMismatchError
from agentium_harness.plugin_api import EraseTarget, OpContext, SessionKey, SessionStoreError, seal_snapshot
from agentium_harness.testing import plain_group, scoped_snapshot

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "bounds")
OTHER = SessionKey("acme", "bob", "bounds")


@pytest.fixture
def config(moto_server: S3Server) -> S3Config:
    """A config on the shared moto server under a prefix of its own."""
    return make_config(moto_server)


@pytest.fixture
def admin(moto_server: S3Server) -> Iterator[Any]:
    """A plain boto3 client on the shared moto server."""
    client = raw_client(moto_server)
    yield client
    client.close()


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


# -- a snapshot of another session ------------------------------------------------------------------


async def test_a_save_of_another_sessions_snapshot_is_refused_and_writes_nothing(
    config: S3Config, admin: Any
) -> None:
    store = S3SessionStore(config)
    # Another user's, another session's (same user), and one whose resident group was retained
    # under another session's scope (its memory scope is the key's own).
    sibling = SessionKey(KEY.tenant, KEY.user, "other-session")
    own = scoped_snapshot(KEY, " mine", groups=1)
    foreign_group = scoped_snapshot(sibling, " theirs", groups=1).resident[0]
    mixed = seal_snapshot(attrs.evolve(own, resident=(foreign_group,), digest=None))
    try:
        with anyio.fail_after(30):
            for snapshot in (scoped_snapshot(OTHER, " theirs"), scoped_snapshot(sibling), mixed):
                for expected in (None, 1):
                    with pytest.raises(S3ScopeMismatchError, match="nothing was written") as caught:
                        await store.save(KEY, snapshot, expected, _ctx())
                    # In the store's family and the core's: a host catching either catches it.
                    assert isinstance(caught.value, SessionStoreError)
                    assert isinstance(caught.value, ScopeMismatchError)
            assert live_keys(admin, config.prefix) == []
            # The key's own snapshot is saved as ever, and loads.
            assert await store.save(KEY, own, None, _ctx()) == 1
            loaded = await store.load(KEY, _ctx())
    finally:
        await store.aclose()
    assert loaded is not None and loaded.snapshot == own


# -- stray objects in a user's folder ---------------------------------------------------------------


async def test_a_listing_examines_at_most_max_listed_sessions_objects_of_any_name(
    config: S3Config, admin: Any
) -> None:
    bounded = attrs.evolve(config, max_listed_sessions=3)
    store = S3SessionStore(bounded)
    folder = f"{config.prefix}/sessions/v1/acme/ana/"
    try:
        with anyio.fail_after(30):
            await store.save(KEY, scoped_snapshot(KEY), None, _ctx())
            # Within the bound, strays are skipped as ever.
            admin.put_object(Bucket=BUCKET, Key=f"{folder}notes.txt", Body=b"x")
            admin.put_object(Bucket=BUCKET, Key=f"{folder}a/deep/tree.bin", Body=b"x")
            assert await store.list_sessions("acme", "ana", 10, _ctx()) == [KEY.session]
            # Past it: a folder holding more objects than the bound is refused, not paged through.
            for n in range(3):
                admin.put_object(Bucket=BUCKET, Key=f"{folder}junk-{n}.txt", Body=b"x")
            before = sorted(live_keys(admin, config.prefix))
            with pytest.raises(S3SessionStoreError, match="max_listed_sessions=3") as caught:
                await store.list_sessions("acme", "ana", 10, _ctx())
            assert caught.value.code == "TooMany"
            assert sorted(live_keys(admin, config.prefix)) == before  # nothing changed
    finally:
        await store.aclose()


# -- close ------------------------------------------------------------------------------------------


async def test_aclose_returns_within_close_timeout_and_a_write_in_flight_still_lands_truthfully(
    moto_server: S3Server, config: S3Config
) -> None:
    # read_timeout_s (10 s here, 30 s by default, up to an hour) no longer bounds close: close_timeout_s does.
    proxy = FaultProxy(moto_server.port)
    release = threading.Event()
    held = proxy.add(Fault("hold", "PUT", "/sessions/", count=1, seconds=8.0, release=release))
    store = S3SessionStore(attrs.evolve(config, endpoint_url=proxy.endpoint, close_timeout_s=0.1))
    revisions: list[int] = []

    async def save() -> None:
        revisions.append(await store.save(KEY, scoped_snapshot(KEY, " late"), None, _ctx()))

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(save)
                # The save's write has reached the proxy, and waits there.
                assert await anyio.to_thread.run_sync(held.arrived.wait, 20)
                await store.aclose()
                # Returned while the write was still held, before the server had even seen it: the
                # old close waited for it (up to read_timeout_s), whatever the caller's own bound.
                assert held.forwarded_at is None
                assert store.link.closed
                release.set()
            # The write on the wire was not cut by the close: it landed, and its caller was told so.
            assert revisions == [1]
            # ... and, the last request the close left running, it closed the client as it finished.
            assert store.link._client is None
            with pytest.raises(S3SessionStoreError, match="closed"):
                await store.load(KEY, _ctx())
            fresh = S3SessionStore(config)
            try:
                loaded = await fresh.load(KEY, _ctx())
            finally:
                await fresh.aclose()
    finally:
        release.set()
        proxy.close()
    assert loaded is not None and loaded.revision == 1 and loaded.snapshot == scoped_snapshot(KEY, " late")


async def test_a_call_after_aclose_is_refused_at_once_even_with_a_write_of_its_session_still_running(
    moto_server: S3Server, config: S3Config, admin: Any
) -> None:
    # A write running past close_timeout_s is still counted by the write fence: a load of its session
    # waited for it (its whole deadline, then "its caller had given up", which it had not) and an
    # erase covering it failed "WritesInFlight", on an adapter that was closed and took no calls.
    proxy = FaultProxy(moto_server.port)
    release = threading.Event()
    held_save = proxy.add(Fault("hold", "PUT", "/sessions/", count=1, seconds=8.0, release=release))
    held_append = proxy.add(Fault("hold", "PUT", "/archive/", count=1, seconds=8.0, release=release))
    through_proxy = attrs.evolve(config, endpoint_url=proxy.endpoint, close_timeout_s=0.05)
    store, archive = S3SessionStore(through_proxy), S3Archive(through_proxy)
    landed: list[object] = []

    async def save() -> None:
        landed.append(await store.save(KEY, scoped_snapshot(KEY, " held"), None, _ctx()))

    async def append() -> None:
        landed.append(len(await archive.append(KEY, [plain_group(0, " held")], _ctx())))

    target = EraseTarget.session(KEY.tenant, KEY.user, KEY.session)
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(save)
                tasks.start_soon(append)
                for held in (held_save, held_append):
                    assert await anyio.to_thread.run_sync(held.arrived.wait, 20)
                await store.aclose()
                await archive.aclose()
                # A short deadline: the old source spent it (or half of it) waiting for the held write.
                for call, family in (
                    (lambda ctx: store.load(KEY, ctx), S3SessionStoreError),
                    (lambda ctx: store.erase(target, ctx), S3SessionStoreError),
                    (lambda ctx: archive.erase(target, ctx), S3ArchiveError),
                ):
                    with pytest.raises(family, match="closed") as caught:
                        await call(OpContext.with_timeout(1.0))
                    assert caught.value.code == "closed"
                # Refused with both writes still held: nothing was waited for, nothing erased.
                assert held_save.forwarded_at is None and held_append.forwarded_at is None
                release.set()
            assert sorted(map(str, landed)) == ["1", "1"]  # revision 1; one group archived
            assert sorted(k.rsplit("/", 1)[-1] for k in live_keys(admin, config.prefix)) == [
                "00000000000000000000.json",
                "bounds.json",
            ]
    finally:
        release.set()
        proxy.close()


async def test_a_second_aclose_while_the_first_is_closing_returns_only_once_the_client_is_closed(
    moto_server: S3Server, config: S3Config
) -> None:
    # The second aclose() saw the link closed and returned at once, while the first still waited for a
    # request in flight: its caller was told the adapter was closed with the client still open.
    proxy = FaultProxy(moto_server.port)
    release = threading.Event()
    held = proxy.add(Fault("hold", "PUT", "/sessions/", count=1, seconds=8.0, release=release))
    store = S3SessionStore(attrs.evolve(config, endpoint_url=proxy.endpoint, close_timeout_s=5.0))
    client_when_second_returned: list[object] = []

    async def second_close() -> None:
        await store.aclose()
        client_when_second_returned.append(store.link._client)

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(store.save, KEY, scoped_snapshot(KEY, " held"), None, _ctx())
                assert await anyio.to_thread.run_sync(held.arrived.wait, 20)
                tasks.start_soon(store.aclose)
                await anyio.wait_all_tasks_blocked()
                assert store.link.closed  # the first close has begun, and waits for the held write
                tasks.start_soon(second_close)
                await anyio.sleep(0.2)
                assert client_when_second_returned == []  # still waiting for the first
                release.set()
            assert client_when_second_returned == [None]  # returned once the client was closed
    finally:
        release.set()
        proxy.close()


async def test_a_second_aclose_after_the_first_was_cancelled_natively_waits_for_its_close(
    moto_server: S3Server, config: S3Config
) -> None:
    # A native asyncio Task.cancel() of the first aclose() (anyio's shield does not stop it) abandoned
    # its worker thread, still waiting for the request in flight, and marked the close done: a second
    # aclose() returned at once, its caller told the adapter closed with the client still open.
    proxy = FaultProxy(moto_server.port)
    release = threading.Event()
    held = proxy.add(Fault("hold", "PUT", "/sessions/", count=1, seconds=8.0, release=release))
    store = S3SessionStore(attrs.evolve(config, endpoint_url=proxy.endpoint, close_timeout_s=5.0))
    client_when_second_returned: list[object] = []

    async def second_close() -> None:
        await store.aclose()
        client_when_second_returned.append(store.link._client)

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(store.save, KEY, scoped_snapshot(KEY, " held"), None, _ctx())
                assert await anyio.to_thread.run_sync(held.arrived.wait, 20)
                first = asyncio.get_running_loop().create_task(store.aclose())
                await anyio.wait_all_tasks_blocked()
                assert store.link.closed  # the first close has begun, and waits for the held write
                first.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await first
                tasks.start_soon(second_close)
                await anyio.sleep(0.2)
                assert client_when_second_returned == []  # still waiting for the first's close
                release.set()
            assert client_when_second_returned == [None]  # returned once the client was closed
    finally:
        release.set()
        proxy.close()


async def test_aclose_is_bounded_when_the_default_worker_threads_are_all_taken(config: S3Config) -> None:
    # aclose waited for its requests in a worker thread of anyio's default pool, shielded: with every
    # token of that pool held (a host's blocking calls, threads their callers abandoned), it waited,
    # uncancellable, for one to come free, whatever close_timeout_s said.
    store = S3SessionStore(attrs.evolve(config, close_timeout_s=0.05))
    pool = anyio.to_thread.current_default_thread_limiter()
    tokens = pool.total_tokens
    blocker, holding = threading.Event(), threading.Event()
    closed = anyio.Event()

    def hold() -> None:
        holding.set()
        blocker.wait(25.0)

    async def close() -> None:
        await store.aclose()
        closed.set()

    try:
        with anyio.fail_after(30):
            assert await store.load(KEY, _ctx()) is None  # the client exists: aclose has one to close
            pool.total_tokens = 1
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(anyio.to_thread.run_sync, hold)
                # Waited for outside the pool, whose one token that thread holds from now on.
                assert await anyio.to_thread.run_sync(holding.wait, 20, limiter=anyio.CapacityLimiter(1))
                tasks.start_soon(close)
                # A hang detector, not a timing claim: the close needs no token of the pool.
                with anyio.move_on_after(10):
                    await closed.wait()
                returned = closed.is_set()
                blocker.set()
            assert returned, "aclose waited for a worker thread of the default pool"
            assert store.link._client is None
    finally:
        blocker.set()
        pool.total_tokens = tokens


async def test_a_listing_the_server_says_goes_on_without_a_continuation_token_is_refused(
    moto_server: S3Server, config: S3Config
) -> None:
    # "IsTruncated" with no "NextContinuationToken" (S3-compatible servers have answered so, with a
    # Delimiter as the listing now sends) was read as the end: a partial listing returned as whole.
    proxy = FaultProxy(moto_server.port)
    store = S3SessionStore(attrs.evolve(config, endpoint_url=proxy.endpoint))
    try:
        with anyio.fail_after(30):
            for session in ("a", "b"):
                key = SessionKey(KEY.tenant, KEY.user, session)
                await store.save(key, scoped_snapshot(key), None, _ctx())
            assert await store.list_sessions(KEY.tenant, KEY.user, 10, _ctx()) == ["a", "b"]
            truncated = proxy.add(
                Fault(
                    "edit_response",
                    "GET",
                    "list-type=2",
                    edit=lambda body: body.replace(
                        b"<IsTruncated>false</IsTruncated>", b"<IsTruncated>true</IsTruncated>"
                    ),
                )
            )
            with pytest.raises(S3SessionStoreError, match="continuation") as caught:
                await store.list_sessions(KEY.tenant, KEY.user, 10, _ctx())
            assert truncated.applied == 1 and caught.value.code == "ListingIncomplete"
    finally:
        await store.aclose()
        proxy.close()


def _more_follows(body: bytes) -> bytes:
    """A listing answer saying it is not the last page, with no marker to read on from."""
    return body.replace(b"<IsTruncated>false</IsTruncated>", b"<IsTruncated>true</IsTruncated>")


async def test_erasures_and_archive_reads_refuse_a_listing_that_goes_on_without_a_marker(
    moto_server: S3Server, config: S3Config, admin: Any
) -> None:
    # The same end as list_sessions' in the erasures' scope listings (versions and current objects)
    # and the archive's read: an erase would report complete with objects left, a read stop short.
    proxy = FaultProxy(moto_server.port)
    through_proxy = attrs.evolve(config, endpoint_url=proxy.endpoint)
    store, archive = S3SessionStore(through_proxy), S3Archive(through_proxy)
    plain = make_client(through_proxy)
    try:
        with anyio.fail_after(30):
            await store.save(KEY, scoped_snapshot(KEY), None, _ctx())
            await archive.append(KEY, [plain_group(0, " kept")], _ctx())
            before = sorted(live_keys(admin, config.prefix))
            target = EraseTarget.user(KEY.tenant, KEY.user)
            cases: list[tuple[str, Callable[[], Awaitable[object]]]] = [
                ("versions", lambda: store.erase(target, _ctx())),
                ("versions", lambda: archive.erase(target, _ctx())),
                ("list-type=2", lambda: archive.read_groups(KEY, 0, 10, _ctx())),
                # A bucket without versions: its erasures list current objects alone.
                (
                    "list-type=2",
                    lambda: anyio.to_thread.run_sync(
                        lambda: list_scope(plain, BUCKET, f"{config.prefix}/", 10, versions=False)
                    ),
                ),
            ]
            for path, call in cases:
                edited = proxy.add(Fault("edit_response", "GET", path, edit=_more_follows))
                with pytest.raises(S3UnavailableError, match="gave no Next") as caught:
                    await call()
                assert edited.applied == 1 and caught.value.code == "ListingIncomplete"
            assert sorted(live_keys(admin, config.prefix)) == before  # nothing erased
    finally:
        plain.close()
        await store.aclose()
        await archive.aclose()
        proxy.close()


def test_two_threads_closing_at_once_start_one_close_and_both_callers_hear_its_failure(
    config: S3Config,
) -> None:
    # aclose() checked and set its closed flag without a lock: two threads closing at once both saw it
    # unset, each started a close thread, and either could be handed the other's failure. Then the
    # second caller returned without a word once the close had ended: only the first heard it failed.
    store = S3SessionStore(config)
    link = store.link
    closes: list[int] = []
    both_in = threading.Event()

    def failing_release() -> None:
        closes.append(1)
        both_in.wait(2)  # the second caller is in aclose() while the close runs
        raise OSError("the client's close failed")

    link._release = failing_release
    outcomes: list[str] = []

    def close_in_a_thread() -> None:
        try:
            anyio.run(link.aclose)
            outcomes.append("returned")
        except OSError:
            outcomes.append("failed")

    threads = [threading.Thread(target=close_in_a_thread) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    both_in.set()
    for thread in threads:
        thread.join(10)
    assert closes == [1]  # one close
    assert outcomes == ["failed", "failed"]  # its failure reaches both callers


def test_a_natively_cancelled_first_aclose_leaves_its_failure_logged_and_raised_to_the_next(
    config: S3Config, caplog: pytest.LogCaptureFixture
) -> None:
    # The close's thread kept its failure in _close_failure, which only the first caller read: cancelled
    # natively (anyio's shield does not stop Task.cancel()), no one heard it and nothing logged it.
    store = S3SessionStore(config)
    link = store.link
    release = threading.Event()

    def failing_release() -> None:
        release.wait(2)
        raise OSError("the client's close failed")

    link._release = failing_release

    async def main() -> None:
        first = asyncio.get_running_loop().create_task(link.aclose())
        await asyncio.sleep(0.02)
        first.cancel()  # native: passes anyio's shield
        with pytest.raises(asyncio.CancelledError):
            await first
        release.set()
        with pytest.raises(OSError, match="close failed"):
            await link.aclose()

    with caplog.at_level(logging.WARNING, logger="agentium.plugins.archive_s3"):
        asyncio.run(main())
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("s3 session store" in m and "OSError" in m for m in warned), warned


def test_an_aclose_cut_off_as_its_loop_ends_still_releases_the_client(config: S3Config) -> None:
    # The close's thread was started in the close's asyncio task, at its first step: asyncio.run
    # returning just as aclose() made that task cancelled it first, and the client was never released.
    store = S3SessionStore(config)
    link = store.link
    real_release = link._release
    released = threading.Event()

    def release() -> None:
        real_release()
        released.set()

    link._release = release

    async def main() -> None:
        asyncio.get_running_loop().create_task(link.aclose())  # its first step runs as the loop stops

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a coroutine of the cut-off close never awaited
        asyncio.run(main())
    assert released.wait(1)  # the close's thread ran all the same
