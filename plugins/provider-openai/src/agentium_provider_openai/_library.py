"""The ``openai`` library, imported on first use in a worker thread, never on an event loop.

The plugin does not import ``openai`` when it loads (listing plugins must
not pay for it). Importing it — ``httpx`` and the client's own modules — takes
about half a second of module loading; done by a call on the event loop's
thread, it stalled every other task of the host's loop that long. A call
awaits :func:`load_openai` first instead (inside its deadline and signal); the
imports of ``openai`` elsewhere in the plugin then find it loaded.
"""

from __future__ import annotations

import importlib
import threading
from typing import Final

import anyio

__all__ = ["is_openai_client", "load_openai", "openai_loaded"]

#: Set once ``openai`` is imported whole (``sys.modules`` holds it earlier, while a thread
#: still runs its code); the lock makes concurrent first calls import it once.
_LOADED: Final = threading.Event()
_LOCK: Final = threading.Lock()


def _import_openai() -> None:
    """Import the client library; runs in a worker thread (see :func:`load_openai`)."""
    with _LOCK:
        if not _LOADED.is_set():
            importlib.import_module("openai")
            _LOADED.set()


def openai_loaded() -> bool:
    """Whether ``openai`` is imported whole (by :func:`load_openai`): a call then needs no thread."""
    return _LOADED.is_set()


async def load_openai() -> None:
    """Import ``openai`` in a worker thread, once per process; returns at once when it is loaded.

    Concurrent first calls, on one loop or several, each wait for the one
    import. The wait is abandoned when the caller is cancelled (its deadline
    passed, its signal was cancelled): the thread finishes the import on its
    own, and the next call finds the library loaded.
    """
    if not _LOADED.is_set():
        await anyio.to_thread.run_sync(_import_openai, abandon_on_cancel=True)


def is_openai_client(value: object) -> bool:
    """Whether ``value`` is an ``openai.AsyncOpenAI`` (the library is loaded: the host made it)."""
    from openai import AsyncOpenAI

    return isinstance(value, AsyncOpenAI)
