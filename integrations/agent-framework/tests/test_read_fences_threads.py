"""One provider's read fences, used from several threads at once, never lose a load a save must follow.

The SDK's concurrent-access pattern (several threads, each with its own event
loop, one provider object) reaches :class:`ReadFences` from each thread. A
load moved its session id to the end of the kept ids by taking the entry out
and putting it back; a save starting on another thread between the two found
no load of the id and followed no fence, so an erasure since the load went
unchecked. The fences now change and answer under one lock.
"""

from __future__ import annotations

import sys
import threading

from agentium_agent_framework._read_fences import ReadFences
from agentium_harness import ReadFence

#: Saves begun while another thread loads (the old code let about 4 in 10 follow no load at all).
SAVES = 100_000


def _fence() -> ReadFence:
    # Opaque to the fences: only its identity is compared.
    return object.__new__(ReadFence)


def test_a_save_always_finds_the_load_it_follows_while_another_thread_loads() -> None:
    fences = ReadFences(16)
    first = _fence()
    fences.loaded("s1", first)  # one load waits for its save from the start
    stop, loading = threading.Event(), threading.Event()
    loads = [0]
    followed: list[object] = []
    errors: list[BaseException] = []

    def loader() -> None:
        try:
            while not stop.is_set():
                fences.loaded("s1", _fence())
                loads[0] += 1
                loading.set()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def saver() -> None:
        try:
            loading.wait(timeout=30)  # the loads are under way before the saves begin
            for _ in range(SAVES):
                following = fences.follow("s1")
                followed.append(None if following is None else following.fence)
        finally:
            stop.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between any two bytecodes, as they may at worst
    try:
        threads = [threading.Thread(target=loader), threading.Thread(target=saver)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    assert len(followed) == SAVES and loads[0] > 1000  # the saves ran while loads did
    # No save ended, so every save follows the oldest load still waiting: the first.
    missed = sum(1 for fence in followed if fence is not first)
    assert missed == 0, f"{missed} of {len(followed)} saves followed no load or another one"
