"""Lifecycle hooks from the engine: what it needs from the plugin registry, and the bounded broadcast."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Sequence
from functools import partial
from typing import Any, Protocol

import anyio

from .loops import ThreadSafeEvent
from .results import Diagnostic, Severity

__all__ = ["HookBroadcaster", "broadcast"]


class HookBroadcaster(Protocol):
    """Anything that can broadcast a lifecycle hook and return the failures (the plugin registry)."""

    def broadcast(self, hook: str, /, **kwargs: Any) -> Sequence[object]:
        """Call every implementation of ``hook``; return one record per implementation that raised."""
        ...


async def broadcast(hooks: HookBroadcaster, hook: str, timeout_s: float, **kwargs: Any) -> list[Diagnostic]:
    """Broadcast a lifecycle hook in a worker thread, bounded, and report failures as diagnostics.

    Hook implementations are plain functions that may block (a recall index
    writing to its backend), so they run off the event loop in a thread the
    caller abandons at ``timeout_s`` — the configured close timeout for the
    runtime's hooks, the drain timeout for the memory manager's — reporting a
    slower broadcast (``hook_timeout``) instead of hanging.

    The thread is a daemon of its own, not one of anyio's workers: those are
    joined when the interpreter exits, so a hook that never returns would keep
    the process from ever exiting (the adapters' own calls are bounded at exit
    the same way, ``adapters/_worker_pool.py``).
    """
    call = partial(contextvars.copy_context().run, partial(hooks.broadcast, hook, **kwargs))
    outcome: list[tuple[bool, object]] = []
    done = ThreadSafeEvent()

    def work() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the waiting caller; nothing escapes the thread
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=work, name="agentium-hook", daemon=True).start()
    with anyio.move_on_after(timeout_s) as scope:
        await done.wait()
    if scope.cancelled_caught:
        return [
            Diagnostic(
                "hook_timeout",
                f"{hook} did not return within {timeout_s}s; not awaited further",
                Severity.WARNING,
            )
        ]
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value  # the registry's broadcast itself failed (it reports each hook's failure instead)
    failures: Sequence[object] = value  # type: ignore[assignment]  # what HookBroadcaster.broadcast returns
    return [Diagnostic("hook_failed", str(f), Severity.WARNING) for f in failures]
