"""ThreadBoundAdapter, the public base for adapters over blocking clients, with a tiny non-SQLite client."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from typing import ClassVar

import anyio
import pytest

from agentium_harness._errors import AgentiumError, ArchiveError, OperationCancelledError
from agentium_harness._ports import OpContext
from agentium_harness.adapters.threaded import ThreadBoundAdapter

pytestmark = pytest.mark.anyio


class ClientError(Exception):
    """What the fake client library raises."""


class BlockingClient:
    """A stand-in for boto3 and friends: every call blocks its thread."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.closed = False
        self.threads: set[int] = set()
        self.active = 0
        self.max_active = 0
        self.gate = threading.Event()
        self.gate.set()

    def call(self, op: str, key: str, value: str = "") -> str:
        assert not self.closed, "used after close"
        self.threads.add(threading.get_ident())
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            self.gate.wait()
            time.sleep(0.001)
            if op == "fail":
                raise ClientError(f"backend says no to {key}")
            if op == "put":
                self.data[key] = value
            return self.data.get(key, "")
        finally:
            self.active -= 1


class BlobStore(ThreadBoundAdapter[BlockingClient]):
    """What an S3-style adapter built on the base looks like."""

    storage_error: ClassVar[type[AgentiumError]] = ArchiveError
    adapter_name: ClassVar[str] = "blob store"
    backend_errors: ClassVar[tuple[type[BaseException], ...]] = (ClientError,)

    def __init__(self, fail_opens: int = 0) -> None:
        super().__init__()
        self.opened: list[BlockingClient] = []
        self.open_threads: list[int] = []
        self.fail_opens = fail_opens

    def open_connection(self) -> BlockingClient:
        self.open_threads.append(threading.get_ident())
        if self.fail_opens:
            self.fail_opens -= 1
            raise ClientError("endpoint unreachable")
        client = BlockingClient()
        self.opened.append(client)
        return client

    def close_connection(self, conn: BlockingClient) -> None:
        conn.closed = True


class AbandoningBlobStore(BlobStore):
    abandon_on_cancel: ClassVar[bool] = True
    close_timeout_s: ClassVar[float] = 0.2


async def test_building_does_nothing_and_the_first_call_opens_once_in_a_worker_thread() -> None:
    store = BlobStore()
    assert store.opened == []
    await store.run(OpContext(), "put", lambda c: c.call("put", "k", "v"))
    assert await store.run(OpContext(), "get", lambda c: c.call("get", "k")) == "v"
    assert len(store.opened) == 1
    assert store.open_threads[0] != threading.get_ident()
    assert threading.get_ident() not in store.opened[0].threads
    await store.aclose()


async def test_a_failed_open_is_a_typed_error_and_the_next_call_retries() -> None:
    store = BlobStore(fail_opens=1)
    with pytest.raises(ArchiveError, match="blob store: get failed: endpoint unreachable"):
        await store.run(OpContext(), "get", lambda c: c.call("get", "k"))
    assert await store.run(OpContext(), "get", lambda c: c.call("get", "k")) == ""
    assert len(store.opened) == 1
    await store.aclose()


async def test_an_expired_context_is_refused_before_anything_opens() -> None:
    store = BlobStore()
    ctx = OpContext()
    ctx.signal.cancel("host said stop")
    with pytest.raises(OperationCancelledError, match="host said stop"):
        await store.run(ctx, "put", lambda c: c.call("put", "k", "v"))
    with pytest.raises(OperationCancelledError):
        await store.run(OpContext.with_timeout(-1), "put", lambda c: c.call("put", "k", "v"))
    assert store.opened == []


async def test_backend_errors_become_the_ports_family_and_agentium_errors_pass_through() -> None:
    store = BlobStore()
    with pytest.raises(ArchiveError, match="backend says no to k") as info:
        await store.run(OpContext(), "fail", lambda c: c.call("fail", "k"))
    assert isinstance(info.value.__cause__, ClientError)

    def refuse(conn: BlockingClient) -> str:
        raise OperationCancelledError("checked between steps", "deadline passed")

    with pytest.raises(OperationCancelledError, match="between steps"):
        await store.run(OpContext(), "steps", refuse)
    await store.aclose()


async def test_a_call_raising_stop_iteration_ends_with_an_error_instead_of_waiting_forever() -> None:
    # An asyncio future refuses StopIteration; the caller got no outcome at all and waited for good.
    store = BlobStore()

    def stop(conn: BlockingClient) -> str:
        raise StopIteration

    with anyio.fail_after(30):
        with pytest.raises(RuntimeError, match="StopIteration") as info:
            await store.run(OpContext(), "stop", stop)
    assert isinstance(info.value.__cause__, StopIteration)
    assert await store.run(OpContext(), "get", lambda c: c.call("get", "k")) == ""  # the adapter still works
    await store.aclose()


async def test_a_backend_error_after_the_deadline_reports_the_deadline() -> None:
    store = BlobStore()
    ctx = OpContext.with_timeout(0.05)

    def slow_then_fail(conn: BlockingClient) -> str:
        time.sleep(0.1)
        return conn.call("fail", "k")

    with pytest.raises(OperationCancelledError, match="deadline passed; nothing was written"):
        await store.run(ctx, "slow", slow_then_fail)
    await store.aclose()


async def test_calls_never_use_the_connection_at_the_same_time() -> None:
    store = BlobStore()
    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(store.run, OpContext(), "put", lambda c, i=i: c.call("put", f"k{i}", "v"))
    assert store.opened[0].max_active == 1
    assert len(store.opened[0].data) == 8
    await store.aclose()


async def test_a_call_waiting_behind_another_on_its_loop_is_refused_at_its_deadline_and_frees_its_place() -> (
    None
):
    """The contended path: a second call on the same loop waits for the first (not in a thread), bounded.

    The refusal names the adapter (the wait on the loop), not the connection
    (the lock inside the worker thread): the wait really happened on the loop.
    """
    store = BlobStore()
    await store.run(OpContext(), "warm up", lambda c: c.call("get", "k"))
    client = store.opened[0]
    client.gate.clear()  # the next call holds the adapter until the gate opens
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.run, OpContext(), "held", lambda c: c.call("put", "k", "held"))
        for _ in range(500):
            if client.active:
                break
            await anyio.sleep(0.01)
        assert client.active == 1
        started = time.monotonic()
        with pytest.raises(OperationCancelledError, match="previous call on this adapter was still running"):
            await store.run(OpContext.with_timeout(0.2), "next", lambda c: c.call("put", "k", "late"))
        assert time.monotonic() - started < 10, "the wait must end at the deadline (the gate holds for good)"
        # A waiter whose caller is cancelled leaves the queue too.
        with anyio.move_on_after(0.1) as scope:
            await store.run(OpContext(), "cancelled", lambda c: c.call("put", "k", "cancelled"))
        assert scope.cancelled_caught
        client.gate.set()
    # Neither refused call ran, and no token was lost: the next calls run at once, one at a time.
    assert client.data == {"k": "held"}
    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(
                store.run, OpContext.with_timeout(30), "put", lambda c, i=i: c.call("put", f"n{i}", "v")
            )
    assert client.max_active == 1 and len(client.data) == 5
    await store.aclose()


async def test_aclose_is_idempotent_closes_once_and_refuses_later_calls() -> None:
    store = BlobStore()
    await store.run(OpContext(), "get", lambda c: c.call("get", "k"))
    await store.aclose()
    await store.aclose()
    assert store.closed and store.opened[0].closed
    with pytest.raises(ArchiveError, match="refused: the adapter is closed"):
        await store.run(OpContext(), "get", lambda c: c.call("get", "k"))


async def test_aclose_before_use_opens_nothing() -> None:
    store = BlobStore()
    await store.aclose()
    assert store.opened == []


async def test_a_stuck_call_is_abandoned_close_is_bounded_and_the_thread_closes_after_it() -> None:
    store = AbandoningBlobStore()
    await store.run(OpContext(), "warm up", lambda c: c.call("get", "k"))
    client = store.opened[0]
    client.gate.clear()  # the next call hangs in the backend
    started = time.monotonic()
    with anyio.move_on_after(0.2) as scope:
        await store.run(OpContext(), "stuck", lambda c: c.call("get", "k"))
    assert scope.cancelled_caught
    assert time.monotonic() - started < 10, "an abandoning adapter must not hold the cancelled caller"
    # The next call waits for the stuck one only until its own deadline.
    with pytest.raises(OperationCancelledError, match="still running"):
        await store.run(OpContext.with_timeout(0.2), "next", lambda c: c.call("get", "k"))
    started = time.monotonic()
    with pytest.raises(ArchiveError, match=r"close did not finish within 0\.2s"):
        await store.aclose()
    assert time.monotonic() - started < 10  # the stuck call holds until the gate opens
    assert not client.closed, "the connection is still in use by the stuck call"
    client.gate.set()
    for _ in range(1000):  # up to 10 s: the thread returns at once, unless the machine stalls
        if client.closed:
            break
        await anyio.sleep(0.01)
    assert client.closed, "the stuck call's thread closes the connection when it returns"
    await store.aclose()


async def test_aclose_is_shielded_from_the_callers_cancellation() -> None:
    store = BlobStore()
    await store.run(OpContext(), "warm up", lambda c: c.call("get", "k"))
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.aclose()
    assert store.opened[0].closed


def _put_and_get_on_asyncio(value: str) -> str:
    """A fresh store's put and get on a plain asyncio loop (the worker-pool path)."""
    import asyncio

    async def use() -> str:
        store = BlobStore()
        try:
            await store.run(OpContext(), "put", lambda c: c.call("put", "k", value))
            return await store.run(OpContext(), "get", lambda c: c.call("get", "k"))
        finally:
            await store.aclose()

    return asyncio.run(use())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_process_forked_after_calls_ran_on_asyncio_still_gets_worker_threads() -> None:
    # The parent's worker threads do not exist in a forked child: it must start its own,
    # not queue its calls to threads that will never run them.
    assert _put_and_get_on_asyncio("parent") == "parent"
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_put_and_get_on_asyncio, ("child",)).get(timeout=60) == "child"
