"""A Linux read lease on an opened evidence file: taken, checked and released without signalling anyone.

Everything here runs in the reading worker thread. Elsewhere than Linux
there are no leases: :func:`take_lease` answers False and the reads are
checked on their own (see :class:`~agentium_verifier_fs._confined.OpenedFile`).
"""

from __future__ import annotations

import errno
import sys
import threading
from typing import Final

__all__ = ["LEASES_ONLY_WITH_A_CACHE_GRANT", "drop_lease", "file_system", "lease_held", "take_lease"]

#: File systems whose lease refusal ``EAGAIN`` does not mean "open for writing": the NFSv4
#: client grants a lease only while it holds a delegation, the SMB client only while it holds
#: an oplock (``nfs4_add_lease``, ``cifs_setlease``), and answer ``EAGAIN`` otherwise.
LEASES_ONLY_WITH_A_CACHE_GRANT: Final = frozenset({"nfs", "nfs4", "cifs", "smb3"})


def file_system(fd: int) -> str | None:
    """The type of the file system ``fd`` is open on (``"ext4"``, ``"nfs4"``), or None when unknown.

    Read from ``/proc/self/fdinfo`` (the descriptor's mount) and ``/proc/self/mountinfo``.
    """
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as info:
            mount = next((line.split()[1] for line in info if line.startswith("mnt_id:")), None)
        if mount is None:
            return None
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                if fields and fields[0] == mount and "-" in fields:
                    return fields[fields.index("-") + 1]
    except (OSError, IndexError, ValueError):
        return None
    return None


if sys.platform == "linux":
    import fcntl
    import signal
    import struct

    #: ``fcntl`` commands and owner type of ``<linux/fcntl.h>`` the module does not name.
    _F_SETOWN_EX: Final = getattr(fcntl, "F_SETOWN_EX", 15)
    _F_OWNER_TID: Final = 0

    def take_lease(fd: int) -> bool:
        """Take a read lease on ``fd``: True when held, False when this file cannot have one.

        The kernel grants it only while no descriptor anywhere has the file open
        for writing (``EAGAIN``: raised, the caller refuses the file), and
        breaks it when one is opened for writing or the file is truncated, so
        while it holds nothing can change the bytes, whatever the timestamps
        say. Refused (``EACCES``: the file is another user's and the process
        lacks ``CAP_LEASE``; ``EINVAL``: NFS, leases switched off by
        ``fs.leases-enable``; ``EAGAIN`` from an NFSv4 or SMB client, which grant
        one only while the server lets them cache the file: see
        :data:`LEASES_ONLY_WITH_A_CACHE_GRANT`) it is not held, and the other
        checks stand alone.

        No signal reaches the host process. A break is announced with a signal
        (SIGIO unless ``F_SETSIG`` names another; its default action ends the
        process) to the descriptor's owner, and granting the lease makes the
        process the owner unless one is set already: a writer opening the file
        between ``F_SETLEASE`` and clearing the owner would signal the process,
        and a handler the host has for that signal would run in its main
        thread. So the owner is first this thread alone (``F_SETOWN_EX``,
        ``F_OWNER_TID``), the signal SIGURG, blocked in this thread while the
        lease is taken; the owner is then cleared (later breaks signal nobody),
        and a SIGURG that a break in between left pending here is taken
        (``sigtimedwait``) before the thread's mask is restored.

        :raises OSError: ``EAGAIN`` on a local file system: the file is open for writing.
        """
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGURG})
        try:
            return _take_lease_signalling_this_thread(fd)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def _take_lease_signalling_this_thread(fd: int) -> bool:
        try:
            owner = struct.pack("ii", _F_OWNER_TID, threading.get_native_id())
            fcntl.fcntl(fd, _F_SETOWN_EX, owner)
            fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        except OSError:
            return False  # no lease is taken unless a break can only signal this thread
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                if file_system(fd) in LEASES_ONLY_WITH_A_CACHE_GRANT:
                    return False  # no delegation or oplock held: not a writer, no lease here
                raise
            return False
        try:
            fcntl.fcntl(fd, fcntl.F_SETOWN, 0)
        except OSError:
            drop_lease(fd)
            return False
        finally:
            if not lease_held(fd):
                # Broken before the owner was cleared: its SIGURG is pending on this thread
                # (blocked here); taken now, it never reaches a handler of the host's.
                signal.sigtimedwait({signal.SIGURG}, 0)
        return True

    def lease_held(fd: int) -> bool:
        """Whether the read lease is still held: not broken by an open for writing or a truncate."""
        try:
            return fcntl.fcntl(fd, fcntl.F_GETLEASE) == fcntl.F_RDLCK
        except OSError:
            return False

    def drop_lease(fd: int) -> None:
        """Release the lease at once, so a writer waiting on its break goes on (closing would too)."""
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        except OSError:
            pass

else:

    def take_lease(fd: int) -> bool:
        """No file leases here: the other checks stand alone."""
        return False

    def lease_held(fd: int) -> bool:
        """Nothing is held."""
        return False

    def drop_lease(fd: int) -> None:
        """Nothing is held."""
