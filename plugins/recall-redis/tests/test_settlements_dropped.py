"""``Settlements`` dropping a closed event loop's work: nothing kept, nothing left to the collector.

Found by an adversarial review of the change that drops a closed loop's
tasks. Only tasks still pending were dropped: a task that finished in its
loop's last iteration (its done callback, which forgets it, scheduled but
never run before the loop closed) was kept for the store's lifetime, and
its loop with it. And a pending task, once dropped, was left to the cyclic
garbage collector: asyncio logged "Task was destroyed but it is pending!"
at ERROR on top of the store's own WARNING, and its coroutine's cleanup
(``finally``: a shielded disconnect, a tenant's collection marked done) ran
whenever and on whichever thread the collector happened to run, failing
there ("Exception ignored in ...").
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest
from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import OpContext
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore
from agentium_recall_redis.keys import tenant_prefix
from agentium_recall_redis.writes import Settlements

pytestmark = pytest.mark.anyio  # on asyncio (conftest's anyio_backend)


def _closed_after(
    settlements: Settlements, *works: Callable[[], Coroutine[Any, Any, Any]]
) -> weakref.ref[Any]:
    """Start ``works`` in a new loop of another thread that then stops and is closed; a weak ref to it."""
    loop = asyncio.new_event_loop()

    async def begin() -> None:
        for work in works:
            settlements.start(work(), settles_by=time.monotonic() + 5)

    def run() -> None:
        loop.run_until_complete(begin())
        loop.close()  # without running its leftovers out

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    return weakref.ref(loop)


async def test_a_task_that_finished_as_its_loop_stopped_is_not_kept() -> None:
    settlements = Settlements()

    async def quick() -> None:  # ends in the loop's last iteration: its done callback never runs
        return None

    freed = _closed_after(settlements, quick)
    assert len(settlements) == 0  # was 1, for the store's lifetime
    gc.collect()
    assert freed() is None  # nor is its loop kept


async def test_a_dropped_task_is_closed_at_once_without_asyncio_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settlements = Settlements()
    cleaned: list[str] = []
    unraisable: list[Any] = []

    async def settling() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append("finally")  # as _collect marks its tenant's collection done
            with anyio.CancelScope(shield=True):  # as the link's disconnect: needs a running loop
                await asyncio.sleep(0)

    hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    gc.disable()  # the collector runs at its own times: here, only where the test says
    try:
        with caplog.at_level(logging.WARNING):
            _closed_after(settlements, settling)
            assert len(settlements) == 0
            at_drop = list(cleaned)
            gc.enable()
            gc.collect()
    finally:
        gc.enable()
        sys.unraisablehook = hook
    assert at_drop == ["finally"]  # at once; was only whenever the collector ran, on its thread
    assert unraisable == []  # was "Exception ignored in <coroutine ...>": NoEventLoopError
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []  # was "Task was destroyed but it is pending!" from asyncio
    said = [r.getMessage() for r in caplog.records if r.name == "agentium.plugins.recall_redis"]
    assert any("dropped unfinished" in m for m in said), said  # the store still says it


async def test_a_settlement_dropped_with_its_loop_is_warned_of_when_the_loop_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A loop closed without cancelling its tasks (not asyncio.run, which cancels them: the settlement's
    # own WARNING then). Before, the store said so only at its next write, erase or close (a sweep), so
    # a host that closed a request's loop and made no further call never heard it.
    settlements = Settlements()

    async def settling() -> None:
        await asyncio.sleep(60)

    with caplog.at_level(logging.WARNING, logger="agentium.plugins.recall_redis"):
        _closed_after(settlements, settling)  # the loop's thread stopped and closed it
        said = [r.getMessage() for r in caplog.records if r.name == "agentium.plugins.recall_redis"]
    assert any("dropped unfinished" in m for m in said), said  # nothing of the store was called since
    assert not settlements._tasks  # dropped there too, its bound kept: an erase still counts it
    assert (settlements._pending()[0].stranded, len(settlements)) == (1, 0)


def test_a_loop_closed_where_no_thread_can_start_still_warns_and_closes_its_settlements(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Closing a loop at interpreter shutdown (a host's atexit handler; Python 3.12 starts no thread
    # there): the dropped coroutines were closed on a new thread only, so closing the loop raised inside
    # the watch's finalizer, which swallowed it. No WARNING, the coroutine left to the collector (asyncio's
    # "Task was destroyed but it is pending!" at ERROR), and its bound already moved: no later sweep said it.
    settlements = Settlements()
    loop = asyncio.new_event_loop()
    cleaned: list[str] = []

    async def settling() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append("finally")

    async def begin() -> None:
        settlements.start(settling(), settles_by=time.monotonic() + 5)
        await asyncio.sleep(0)  # its first step taken: it waits in its sleep

    loop.run_until_complete(begin())

    def no_thread(self: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    with caplog.at_level(logging.WARNING, logger="agentium.plugins.recall_redis"):
        loop.close()  # no loop runs on this thread, as at exit
    monkeypatch.undo()
    said = [r.getMessage() for r in caplog.records if r.name == "agentium.plugins.recall_redis"]
    assert any("dropped unfinished" in m for m in said), said
    assert cleaned == ["finally"]  # closed there, on this thread
    assert (settlements._pending()[0].stranded, len(settlements)) == (1, 0)


def test_a_loop_closed_after_the_interpreters_exit_began_is_still_warned_of(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A host's atexit handler that closes its loop, registered before the first weakref.finalize was
    # made, runs after weakref's own exit hook (last in, first out), which stops every finalizer from
    # running. The watch was one: closing the loop there said nothing and dropped nothing (the task
    # kept; asyncio's "Task was destroyed but it is pending!" at ERROR as the process ended).
    settlements = Settlements()
    loop = asyncio.new_event_loop()

    async def begin() -> None:
        settlements.start(asyncio.sleep(60), settles_by=time.monotonic() + 5)

    loop.run_until_complete(begin())
    monkeypatch.setattr(weakref.finalize, "_shutdown", True)  # as once weakref's exit hook has run
    with caplog.at_level(logging.WARNING, logger="agentium.plugins.recall_redis"):
        loop.close()
    monkeypatch.undo()
    said = [r.getMessage() for r in caplog.records if r.name == "agentium.plugins.recall_redis"]
    assert any("dropped unfinished" in m for m in said), said
    assert not settlements._tasks


async def test_a_settlement_that_ended_cancels_its_loops_watch() -> None:
    # The watch is a timer a day away on the settlement's loop: left there, each settlement kept one.
    settlements = Settlements()
    loop = asyncio.get_running_loop()
    settlements.start(asyncio.sleep(0), settles_by=time.monotonic() + 5)
    scheduled: list[asyncio.TimerHandle] = loop._scheduled  # type: ignore[attr-defined]
    [watch] = [t for t in scheduled if t.when() > loop.time() + 3600]
    assert not watch.cancelled()
    assert await settlements.settle(1.0) == 0
    assert watch.cancelled()


async def test_a_collection_dropped_before_it_ran_does_not_stop_the_tenants_later_ones(
    server: ServerProcess,
) -> None:
    # A tenant's background collection is claimed (Writer._collecting) so only one runs at a time, and
    # released by the collection itself when it ends. One whose loop closed before its first step
    # never ran its release: no background collection for that tenant ever ran again in this store.
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    writer = store._writer
    prefix = tenant_prefix(store.config.key_prefix, "acme")
    loop = asyncio.new_event_loop()

    def last_request() -> None:
        link = loop.run_until_complete(store._ready(OpContext.with_timeout(10), "test"))

        def collect_then_stop() -> None:  # the request's last step: its loop stops before the task's first
            writer.collect_later(link, prefix, 1)
            loop.stop()

        loop.call_soon(collect_then_stop)
        loop.run_forever()
        loop.close()

    thread = threading.Thread(target=last_request)
    thread.start()
    thread.join(10)
    try:
        assert len(writer.settlements) == 0  # dropped with its loop
        link = await store._ready(OpContext.with_timeout(10), "test")
        writer.collect_later(link, prefix, 1)
        assert len(writer.settlements) == 1  # was 0: the tenant's claim was never released
    finally:
        await store.aclose()
