"""What a call leaves running: child processes and busy threads, for the verifier suite's leak check.

Nothing here imports pytest. Child processes are read from ``/proc`` (Linux);
elsewhere :func:`child_processes` returns ``None`` and only threads are
checked. A thread counts as *busy* when its stack holds a frame of code
outside the standard library and the async libraries' own pools (anyio,
trio, sniffio, outcome): an idle worker of a thread pool waits inside those,
while a worker still running an abandoned call has a frame of the caller's
code on its stack.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import threading
from collections.abc import Iterable
from types import FrameType

__all__ = ["busy_threads", "child_processes", "describe_thread"]

_LIBRARY_PACKAGES = ("anyio", "trio", "sniffio", "outcome")


def _library_roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(standard library roots, async library package roots), each ending in a separator."""
    paths = sysconfig.get_paths()
    stdlib = {os.path.realpath(paths["stdlib"]) + os.sep, os.path.realpath(paths["platstdlib"]) + os.sep}
    packages: list[str] = []
    for name in _LIBRARY_PACKAGES:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            packages.append(os.path.realpath(os.path.dirname(path)) + os.sep)
    return tuple(stdlib), tuple(packages)


@functools.lru_cache(maxsize=4096)
def _is_library(filename: str, roots: tuple[tuple[str, ...], tuple[str, ...]]) -> bool:
    if filename.startswith("<"):
        return True  # frozen importlib and the like
    real = os.path.realpath(filename)
    stdlib, packages = roots
    if real.startswith(packages):
        return True
    # Installed distributions may live under the standard library's folder: they are not it.
    return real.startswith(stdlib) and "-packages" + os.sep not in real


def busy_threads(ignore: Iterable[int] = ()) -> dict[int, str]:
    """``{thread ident: innermost frame of non-library code}`` for every busy thread, the caller's aside."""
    roots = _library_roots()
    skipped = {threading.get_ident(), *ignore}
    busy: dict[int, str] = {}
    for ident, frame in sys._current_frames().items():
        if ident in skipped:
            continue
        current: FrameType | None = frame
        while current is not None:
            code = current.f_code
            if not _is_library(code.co_filename, roots):
                busy[ident] = f"{code.co_filename}:{current.f_lineno} in {code.co_name}"
                break
            current = current.f_back
    return busy


def describe_thread(ident: int) -> str:
    """The thread's name, for messages."""
    for thread in threading.enumerate():
        if thread.ident == ident:
            return thread.name
    return f"thread {ident}"


def child_processes() -> dict[int, str] | None:
    """``{pid: command}`` of every running descendant of this process, or ``None`` without ``/proc``.

    Zombies (ended, not yet reaped) do not count: they run nothing.
    """
    if not os.path.isdir("/proc/self"):
        return None
    parents: dict[int, int] = {}
    states: dict[int, str] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode("utf-8", "replace")
        except OSError:
            continue  # ended while we looked
        # The command sits in parentheses and may hold spaces or parentheses itself.
        name_end = stat.rfind(")")
        fields = stat[name_end + 2 :].split()
        if len(fields) < 2:
            continue
        pid = int(entry)
        states[pid], parents[pid] = fields[0], int(fields[1])
        names[pid] = stat[stat.find("(") + 1 : name_end]
    found: dict[int, str] = {}
    frontier = [os.getpid()]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                frontier.append(pid)
                if states[pid] != "Z":
                    found[pid] = names[pid]
    return found
