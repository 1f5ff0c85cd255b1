"""Files read whole by a child process: a test may read a database its own process holds locks on.

POSIX advisory locks belong to a process and a file, and closing *any*
descriptor of the file in the process drops every lock the process holds on
it, its SQLite connections' locks included: a test that opened and closed a
store's database file to search its bytes left the store's transaction
unlocked, and another process could write beside it. A child process's
descriptors are its own, so its reads drop nothing here.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Final

__all__ = ["read_in_child"]

#: Run in the child: each file named, concatenated (a missing one as empty).
_CAT: Final = (
    "import sys\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        with open(name, 'rb') as f: sys.stdout.buffer.write(f.read())\n"
    "    except FileNotFoundError: pass\n"
)


def read_in_child(names: Sequence[str]) -> bytes:
    """The bytes of the files ``names``, concatenated in order (a missing file read as empty).

    Read by a child process, so this process's POSIX locks on them stay held (module docs).
    Raises :class:`subprocess.CalledProcessError` when the child fails (a file it may not read),
    :class:`subprocess.TimeoutExpired` past 30 seconds.
    """
    # A constant program of this module; the paths are its arguments, never code.
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", _CAT, *names], capture_output=True, check=True, timeout=30
    )
    return done.stdout
