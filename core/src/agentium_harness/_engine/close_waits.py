"""Whether a close cannot end before a given task does (for :class:`~.close_once.CloseOnce`).

An ``aclose()`` made from a task the close started returns at once only when
the close waits for that task (it awaits it, directly or through a future, a
``gather``, a task group it hosts): waiting for the close there would wait for
itself. A task the close started and left running is not part of it: its
``aclose()`` waits for the close like any other caller. Found by following who
waits for what (asyncio: the callbacks on each task and future; trio: the
nurseries), never by guessing: what cannot be followed counts as not waited for.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

__all__ = ["close_waits_for_current_task", "current_task_or_none"]

# How many futures and tasks the search looks at, at most (a close waits through a handful).
_MOST = 500


def current_task_or_none(library: str) -> Any:
    """The running task (an asyncio ``Task`` or a trio task), or ``None``."""
    if library == "asyncio":
        return asyncio.current_task()
    if library == "trio":
        import trio

        return trio.lowlevel.current_task()
    return None  # pragma: no cover - anyio runs asyncio or trio only


def close_waits_for_current_task(closer: Any, library: str) -> bool:
    """True when ``closer`` (the task running the close) cannot end before the current task does."""
    task = current_task_or_none(library)
    if task is None or closer is None:
        return False
    if task is closer:
        return True
    if library == "trio":
        # A task of a nursery the close opened (or of one nested in it) ends before the close goes on.
        while task is not None:
            if task is closer:
                return True
            nursery = task.parent_nursery
            task = None if nursery is None else nursery.parent_task
        return False
    return isinstance(task, asyncio.Future) and _waits_for(closer, task)


def _waits_for(waiter: asyncio.Future[Any], awaited: asyncio.Future[Any]) -> bool:
    """True when ``waiter`` waits for ``awaited``, through what the callbacks on each future lead to."""
    seen: set[int] = set()
    todo: list[asyncio.Future[Any]] = [awaited]
    while todo and len(seen) < _MOST:
        future = todo.pop()
        if id(future) in seen:
            continue
        seen.add(id(future))
        for callback, _context in getattr(future, "_callbacks", None) or ():
            for owner in _owners(callback):
                if owner is waiter:
                    return True
                todo.append(owner)
    return False


def _owners(callback: Any) -> list[asyncio.Future[Any]]:
    """The futures and tasks a done callback wakes: an awaiting task, a gather's future, a group's host."""
    held: list[Any] = [getattr(callback, "__self__", None)]
    if isinstance(callback, functools.partial):
        held.extend(callback.args)
        callback = callback.func
    for cell in getattr(callback, "__closure__", None) or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    found: list[asyncio.Future[Any]] = []
    for value in held:
        if isinstance(value, asyncio.Future):
            found.append(value)  # a task awaiting it, or a future one does (gather, wait, shield)
            continue
        # A task group: its host task waits for every task in it (asyncio's, then anyio's).
        host = getattr(value, "_parent_task", None)
        if host is None:
            host = getattr(getattr(value, "cancel_scope", None), "_host_task", None)
        if isinstance(host, asyncio.Future):
            found.append(host)
    return found
