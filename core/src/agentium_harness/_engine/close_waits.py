"""Whether a close cannot end before a given task does (for :class:`~.close_once.CloseOnce`).

An ``aclose()`` made from a task the close started returns at once only when
the close waits for that task (it awaits it, directly or through a future, a
``gather``, a task group it hosts): waiting for the close there would wait for
itself. A task the close started and left running is not part of it: its
``aclose()`` waits for the close like any other caller. Found by following who
waits for what (asyncio: the callbacks on each task and future; trio: the
nurseries; a worker thread the close awaits, through ``to_thread`` or
``from_thread``: the future or task its job reports to), never by guessing:
what cannot be followed counts as not waited for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import sys
import threading
from types import FrameType
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


def close_waits_for_current_task(closer: Any, library: str, outer: frozenset[int] = frozenset()) -> bool:
    """True when ``closer`` (the task running the close) cannot end before the current task does.

    ``outer``: the ids of the trio nurseries ``closer`` had open as the close
    began (on trio the first caller's own task runs the close): a task started
    in one of those is not waited for by the close, only by the caller after it.
    """
    task = current_task_or_none(library)
    if task is None or closer is None:
        return False
    return _waits_for(closer, task, outer)


def _waits_for(waiter: Any, awaited: Any, outer: frozenset[int] = frozenset()) -> bool:
    """True when ``waiter`` waits for ``awaited``, through what each future, task or thread leads to."""
    seen: set[int] = set()
    todo: list[Any] = [awaited]
    while todo and len(seen) < _MOST:
        node = todo.pop()
        if node is waiter:
            return True
        if id(node) in seen:
            continue
        seen.add(id(node))
        todo.extend(_next(node, outer))
    return False


def _next(node: Any, outer: frozenset[int]) -> list[Any]:
    """What waits for ``node`` to end: the futures and tasks it wakes, the task or thread ending after it."""
    if isinstance(node, asyncio.Future):
        found: list[Any] = []
        for callback, _context in getattr(node, "_callbacks", None) or ():
            if callback is _RUN_UNTIL_COMPLETE_CB:
                # The future a loop runs until complete (asyncio.run's main task): its thread's job.
                found.extend(_jobs(_frame_of(getattr(node.get_loop(), "_thread_id", None))))
            found.extend(_owners(callback))
        return found
    if isinstance(node, concurrent.futures.Future):
        # A future of another thread (run_coroutine_threadsafe, an executor's): what it is chained to,
        # and the job of a thread blocked on its result (from_thread.run in a to_thread worker).
        found = [
            owner for callback in getattr(node, "_done_callbacks", None) or () for owner in _owners(callback)
        ]
        for frame in sys._current_frames().values():
            if _blocked_on(frame, node):
                found.extend(_jobs(frame))
        return found
    trio = sys.modules.get("trio")
    if trio is not None and isinstance(node, trio.lowlevel.Task):
        # A task of a nursery ends before the nursery's task goes on; the root task before its run does.
        nursery = node.parent_nursery
        if nursery is not None:
            return [] if id(nursery) in outer else [nursery.parent_task]
        try:
            here = trio.lowlevel.current_root_task() is node
        except RuntimeError:  # not in a trio run: another thread's run is not followed
            here = False
        return _jobs(sys._getframe()) if here else []
    return []


def _owners(callback: Any) -> list[Any]:
    """The futures and tasks a done callback wakes: an awaiting task, a gather's future, a group's host."""
    held: list[Any] = []
    try:  # a callable object whose __getattr__ raises is not followed (see _host_of)
        held.append(getattr(callback, "__self__", None))
        if isinstance(callback, functools.partial):
            held.extend(callback.args)
            callback = callback.func
        cells = getattr(callback, "__closure__", None) or ()
    except Exception:
        cells = ()
    for cell in cells:
        try:
            held.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    found: list[Any] = []
    for value in held:
        if isinstance(value, (asyncio.Future, concurrent.futures.Future)):
            found.append(value)  # a task awaiting it, or a future one does (gather, wait, shield, a chain)
            continue
        # A task group: its host task waits for every task in it (asyncio's, then anyio's).
        host = _host_of(value)
        if isinstance(host, asyncio.Future):
            found.append(host)
    return found


def _host_of(value: object) -> object:
    """The task hosting ``value`` if it is a task group, else ``None``.

    ``value`` is whatever a done callback holds: an object whose ``__getattr__``
    raises (a KeyError of an attribute-style mapping) is not followed, never
    an error of the ``aclose()`` that asked.
    """
    try:
        host = getattr(value, "_parent_task", None)
        if host is None:
            host = getattr(getattr(value, "cancel_scope", None), "_host_task", None)
    except Exception:
        return None
    return host


_RUN_UNTIL_COMPLETE_CB = getattr(asyncio.base_events, "_run_until_complete_cb", None)


def _frame_of(thread_id: object) -> FrameType | None:
    """The running frame of the thread ``thread_id``, or ``None``."""
    if not isinstance(thread_id, int):
        return None
    if thread_id == threading.get_ident():
        return sys._getframe()
    return sys._current_frames().get(thread_id)


def _blocked_on(frame: FrameType | None, future: concurrent.futures.Future[Any]) -> bool:
    """True when the thread running ``frame`` waits for ``future``'s result."""
    result = concurrent.futures.Future.result.__code__
    while frame is not None:
        if frame.f_code is result and frame.f_locals.get("self") is future:
            return True
        frame = frame.f_back
    return False


def _jobs(frame: FrameType | None) -> list[Any]:
    """What waits for the job the thread running ``frame`` does (a worker thread): a future, a trio task."""
    executor = sys.modules.get("concurrent.futures.thread")
    anyio_asyncio = sys.modules.get("anyio._backends._asyncio")
    codes = {
        getattr(getattr(getattr(executor, "_WorkItem", None), "run", None), "__code__", None): "executor",
        getattr(
            getattr(getattr(anyio_asyncio, "WorkerThread", None), "run", None), "__code__", None
        ): "anyio",
    }
    found: list[Any] = []
    while frame is not None:
        code = frame.f_code
        kind = codes.get(code)
        if kind == "executor":  # an executor's work item (asyncio.to_thread, run_in_executor)
            found.append(getattr(frame.f_locals.get("self"), "future", None))
        elif kind == "anyio":  # anyio's worker thread on asyncio: the future its caller awaits
            found.append(frame.f_locals.get("future"))
        elif code.co_qualname == "to_thread_run_sync.<locals>.worker_fn" and (
            frame.f_globals.get("__name__") == "trio._threads"
        ):
            register = frame.f_locals.get("task_register")  # the trio task waiting for this thread
            found.extend(register if isinstance(register, list) else ())
        frame = frame.f_back
    return [job for job in found if job is not None]
