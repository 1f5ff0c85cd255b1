"""Erasure readings are taken and checked from many threads at once: one registry, under a lock.

A host's readings (``manager.erasure_reading``) are recorded in one
process-wide registry of the readings each manager took, held weakly; a
``BlockingRuntime`` takes them on its loop's thread while hosts check them
(``extract_in_background(..., reading=)``) from theirs, and readings dropped
in any thread leave it through weakref callbacks run by whichever thread's
collection finds them. Its accesses were not locked. On CPython with the GIL
each was one dict operation, so no run here failed on the old source: this
test is not a failing-first proof of a race, it drives the path the lock now
guards (takes, checks of readings taken on other threads, forged and foreign
readings refused, collections freeing dropped ones, all interleaved) and
checks every answer and that the registry keeps nothing of a dropped reading.
"""

from __future__ import annotations

import gc
import queue
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import anyio
import pytest

from agentium_harness import ErasureReading, InvalidArgumentError, MemoryManager, MemoryScope
from agentium_harness._engine.memory import erasure_reading as registry
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.plugin_api import GroupRef, Message, Role

ANA = MemoryScope("acme", "ana")
SOURCES = (GroupRef("s1", 0, "sha256:" + "0" * 64),)
SAID = [Message(Role.USER, "hi")]
THREADS = 6
ROUNDS = 300
GUARD_S = 30.0


@pytest.fixture
def switching() -> Iterator[None]:
    # Threads switch as often as the interpreter allows: the accesses of one interleave with the others'.
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _registered() -> int:
    with registry._TAKEN_LOCK:
        return len(registry._TAKEN)


def test_readings_taken_and_checked_from_many_threads_at_once(switching: None) -> None:
    gc.collect()
    before = _registered()
    manager, other = MemoryManager(InMemoryMemoryStore()), MemoryManager(InMemoryMemoryStore())
    handed: queue.SimpleQueue[ErasureReading] = queue.SimpleQueue()  # taken on one thread, checked on another
    failures: list[BaseException] = []
    checked = [0] * THREADS
    start = threading.Barrier(THREADS)

    def accepted(reading: ErasureReading) -> bool:
        # No extractor: a valid call returns None once its reading is checked; a bad one is refused.
        try:
            assert manager.extract_in_background(ANA, SAID, "ex", sources=SOURCES, reading=reading) is None
        except InvalidArgumentError:
            return False
        return True

    async def rounds(index: int) -> None:
        for n in range(ROUNDS):
            mine = await manager.erasure_reading(ANA, sessions=["s1"])
            foreign = await other.erasure_reading(ANA, sessions=["s1"])
            forged = ErasureReading(ANA, ("s1",), (), (), datetime.now(UTC))
            handed.put(mine)
            assert accepted(mine)
            assert not accepted(foreign) and not accepted(forged)
            try:
                theirs = handed.get_nowait()  # most often another thread's
            except queue.Empty:
                pass
            else:
                assert accepted(theirs)
                checked[index] += 1
            # Dropped: their entries leave through weakref callbacks run on this thread meanwhile.
            del mine, foreign, forged
            if n % 10 == 0:
                gc.collect(0)  # and a young collection, as an allocation in any thread may start one

    def thread(index: int) -> None:
        try:
            start.wait(GUARD_S)
            anyio.run(rounds, index)
        except BaseException as exc:  # handed to the test below
            failures.append(exc)

    threads = [threading.Thread(target=thread, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(GUARD_S)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    if failures:
        raise failures[0]
    assert sum(checked) > 0
    while True:  # what the threads left in the queue is dropped too
        try:
            assert accepted(handed.get_nowait())
        except queue.Empty:
            break
    gc.collect()
    assert _registered() == before  # no dropped reading of any thread is still recorded
