"""A write its caller abandoned past its deadline, still held in the link's worker thread, never lands
behind a completed erasure.

The link runs each request in a worker thread with ``abandon_on_cancel``: a
caller cancelled at its deadline returns at once, so the engine sees the call
end (it is not one of its late calls, docs/erasure.md step 3) while the
thread may still send it. Here the thread is held deterministically, after
the link's own deadline check and just before the request leaves (a
``before-send`` handler registered after the link's, waiting on an event),
so the write lands only when the test says so. The adapter's write fence
(:mod:`agentium_archive_s3.erasure`) must make an erase of its scope wait for
it, or fail typed before removing anything, and the engine must then keep
the erasure pending until a resume completes it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest
from s3_helpers import make_config, versions
from s3_servers import S3Server

from agentium_archive_s3 import S3Archive, S3ArchiveError, S3Config, S3SessionStore, S3SessionStoreError
from agentium_archive_s3.link import S3Client, make_client
from agentium_harness import (
    EraseTarget,
    ErasureIncompleteError,
    ErasureState,
    OperatorAttestation,
    RuntimeLimits,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import EraseStatus, OpContext, OperationCancelledError
from agentium_harness.testing import plain_group, scoped_snapshot

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "late")
TARGET = EraseTarget.session("acme", "ana", "late")
_ids = itertools.count()


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


class Gate:
    """Holds the first ``PutObject`` whose URL ``wanted`` accepts, in its worker thread, until released.

    Registered on ``before-send.s3`` after the link's own handler (same event, later registration,
    so botocore runs it second; the adapter must have made a call first, which registers the
    link's): the link has already checked the caller's deadline, and the request leaves as soon as
    this returns. ``early``: on ``before-send.s3.PutObject`` instead, which botocore runs before the
    link's handler, so the link checks the caller once the gate opens.
    """

    def __init__(self, client: S3Client, wanted: Callable[[str], bool], *, early: bool = False) -> None:
        self.client = client
        self.wanted = wanted
        self.held = threading.Event()
        self.release = threading.Event()
        self._fired = False
        self._id = f"late-gate-{next(_ids)}"
        self._event = "before-send.s3.PutObject" if early else "before-send.s3"
        client.meta.events.register(self._event, self._hold, unique_id=self._id)

    def _hold(self, request: Any, event_name: str = "", **_: Any) -> None:
        if self._fired or not event_name.endswith(".PutObject") or not self.wanted(str(request.url)):
            return
        self._fired = True
        self.held.set()
        # Bounded, so a failing test never leaves a thread behind forever; teardown releases it.
        self.release.wait(60)

    def close(self) -> None:
        self.release.set()
        self.client.meta.events.unregister(self._event, unique_id=self._id)


@pytest.fixture
def late_config(server: S3Server) -> S3Config:
    """Short request timeouts: an erase waits at most one request's time ((1 + 2) s x 2 attempts)."""
    return make_config(server, connect_timeout_s=1.0, read_timeout_s=2.0, max_attempts=2)


@pytest.fixture
def client(late_config: S3Config) -> Iterator[S3Client]:
    """A client lent to the adapter under test, so the test can hook it."""
    lent = make_client(late_config)
    yield lent
    lent.close()


async def _wait_held(gate: Gate) -> None:
    assert await anyio.to_thread.run_sync(gate.held.wait, 30), "the write never reached the gate"


async def _wait_until(check: Callable[[], bool]) -> None:
    with anyio.fail_after(30):
        # Polled: what is awaited is the server's state, or a worker thread with no loop to signal.
        while not check():  # noqa: ASYNC110
            await anyio.sleep(0.05)


def _left(admin: Any, config: S3Config) -> dict[str, int]:
    return versions(admin, f"{config.prefix}/")


async def test_an_abandoned_append_held_in_its_thread_never_lands_behind_a_completed_erase(
    late_config: S3Config, client: S3Client, admin: Any
) -> None:
    archive = S3Archive(late_config, client=client)
    gate: Gate | None = None
    try:
        with anyio.fail_after(120):
            assert await archive.read_groups(KEY, 0, 1, _ctx()) == []  # the link's handler is registered
            gate = Gate(client, lambda url: "/archive/" in url)
            with pytest.raises(OperationCancelledError):
                await archive.append(KEY, [plain_group(0, " late")], OpContext.with_timeout(2.0))
            await _wait_held(gate)  # the caller is gone; its thread is about to send the PUT
            # While the write may still land, the erase fails typed and removes nothing.
            with pytest.raises(S3ArchiveError, match="still in flight") as caught:
                await archive.erase(TARGET, _ctx())
            assert caught.value.code == "WritesInFlight"
            gate.release.set()
            await _wait_until(lambda: bool(_left(admin, late_config)))  # it landed
            report = await archive.erase(TARGET, _ctx())
            assert report.status is EraseStatus.COMPLETE and report.count("group") == 1
            assert _left(admin, late_config) == {}
            assert await archive.read_groups(KEY, 0, 10, _ctx()) == []
    finally:
        if gate is not None:
            gate.close()
        await archive.aclose()


async def test_an_abandoned_save_held_in_its_thread_never_lands_behind_a_completed_erase(
    late_config: S3Config, client: S3Client, admin: Any
) -> None:
    store = S3SessionStore(late_config, client=client)
    gate: Gate | None = None
    try:
        with anyio.fail_after(120):
            assert await store.load(KEY, _ctx()) is None
            gate = Gate(client, lambda url: "/sessions/" in url)
            with pytest.raises(OperationCancelledError):
                await store.save(KEY, scoped_snapshot(KEY, "late"), None, OpContext.with_timeout(2.0))
            await _wait_held(gate)
            with pytest.raises(S3SessionStoreError, match="still in flight") as caught:
                await store.erase(TARGET, _ctx())
            assert caught.value.code == "WritesInFlight"
            gate.release.set()
            await _wait_until(lambda: any("/sessions/" in k for k in _left(admin, late_config)))
            report = await store.erase(TARGET, _ctx())
            assert report.status is EraseStatus.COMPLETE and report.count("snapshot") == 1
            assert not [k for k in _left(admin, late_config) if "/sessions/v1/" in k]
            assert await store.load(KEY, _ctx()) is None
    finally:
        if gate is not None:
            gate.close()
        await store.aclose()


async def test_a_caller_cancelled_by_its_own_scope_with_its_context_live_sends_nothing_more(
    late_config: S3Config, client: S3Client, admin: Any
) -> None:
    # The engine, shut down, cancels a call without cancelling its context's signal; a host may do
    # the same. The link's thread must see it: otherwise a write still waiting in its thread (for a
    # slot another event loop holds, say) could be sent after an erase that never saw it in flight.
    archive = S3Archive(late_config, client=client)
    gate: Gate | None = None
    try:
        with anyio.fail_after(120):
            assert await archive.read_groups(KEY, 0, 1, _ctx()) == []
            gate = Gate(client, lambda url: "/archive/" in url, early=True)
            async with anyio.create_task_group() as tg:
                tg.start_soon(archive.append, KEY, [plain_group(0, " late")], _ctx())
                await _wait_held(gate)
                tg.cancel_scope.cancel()
            gate.release.set()
            await _wait_until(lambda: not archive._fence.busy(KEY))  # the thread has ended
            assert _left(admin, late_config) == {}, "a cancelled caller's write was sent"
    finally:
        if gate is not None:
            gate.close()
        await archive.aclose()


async def test_the_engine_keeps_the_erasure_pending_while_a_held_append_may_land_and_a_resume_completes_it(
    late_config: S3Config, client: S3Client, admin: Any
) -> None:
    archive, store = S3Archive(late_config, client=client), S3SessionStore(late_config)
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(op_timeout_s=30),
    )
    operator = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "ticket 9")
    gate: Gate | None = None
    try:
        with anyio.fail_after(180):
            assert (await runtime.run(VerifiedIdentity("acme", "ana", "auth"), "late", "Hello.")).committed
            assert await archive.read_groups(KEY, 0, 1, _ctx()) == []  # the link's handler is registered
            gate = Gate(client, lambda url: "/archive/" in url)
            # An append the caller walked away from: the link's cancellation returned at once, so no
            # one but the adapter knows its thread is still about to write.
            with pytest.raises(OperationCancelledError):
                await archive.append(KEY, [plain_group(40, " late")], OpContext.with_timeout(2.0))
            await _wait_held(gate)
            with pytest.raises(ErasureIncompleteError) as caught:
                await runtime.erase(TARGET, reason="data subject request", attestation=operator)
            record = caught.value.record
            assert record is not None and record.state is ErasureState.PENDING
            assert isinstance(caught.value.__cause__, S3ArchiveError)
            assert caught.value.__cause__.code == "WritesInFlight"
            gate.release.set()
            await _wait_until(lambda: any("/archive/" in k for k in _left(admin, late_config)))
            resumed = await runtime.resume_erasures(operator)
            assert len(resumed) == 1
            tombstone = resumed[0].tombstone
            assert tombstone is not None and tombstone.state is ErasureState.COMPLETE
            tenant, user, session = KEY.key_segments()
            assert not [k for k in _left(admin, late_config) if f"/{tenant}/{user}/{session}" in k]
    finally:
        if gate is not None:
            gate.close()
        await runtime.aclose()
