"""Opening evidence confined to the root, and reading it within size and time bounds.

Everything here is blocking and runs in a worker thread, but for
:class:`RootPin`, opened when the verifier is built. The walk never
interprets a path as a string: the root is opened once, checked against the
directory the pin holds open, and each component is opened relative to the
directory opened before it (``dir_fd=``) with
``O_NOFOLLOW``, so a symbolic link anywhere on the way — to a file or a
directory, inside or outside the root — is refused by the kernel at the
moment of the open. The final file is opened with ``O_NOFOLLOW |
O_NONBLOCK`` (a FIFO cannot block the open), then ``fstat`` of that
descriptor decides: only a regular file with exactly one link is read, and
the bytes hashed are the descriptor's. Swapping the file for a symlink
between any check and the open therefore cannot make the outside file's
bytes count.

Hardlink policy: a file with ``st_nlink > 1`` is refused (``unknown``). A
hard link to a file outside the root looks exactly like a file inside it,
so the only safe rule is to read files that have no other name. The link
count is checked on the descriptor right after the open, and again after
the read together with the name (see :meth:`OpenedFile.check_still_in_place`),
so a link that existed only while the file was being opened is caught too.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from ._lease import drop_lease, lease_held, take_lease

__all__ = [
    "CHUNK_BYTES",
    "SUPPORTED",
    "EvidenceUnavailable",
    "OpenedFile",
    "PinClosed",
    "RootPin",
    "hash_file",
    "last_changed",
    "open_confined",
    "read_file",
    "root_descriptor",
    "unreadable",
]

#: Bytes read per step; the cancel and time checks run between steps.
CHUNK_BYTES: Final = 1024 * 1024

_POSIX_FLAGS: Final = ("O_DIRECTORY", "O_NOFOLLOW", "O_CLOEXEC", "O_NONBLOCK", "O_NOCTTY")

#: Whether this system has what the confined walk needs (POSIX): the flags, ``open`` and
#: ``stat`` relative to a directory descriptor, and ``stat`` that does not follow a symlink.
#: The module imports without them (Windows has no ``O_NOFOLLOW``), so the verifier can
#: refuse to be built with a typed error instead of the import failing with AttributeError.
SUPPORTED: Final = (
    all(hasattr(os, flag) for flag in _POSIX_FLAGS)
    and {os.open, os.stat} <= os.supports_dir_fd
    and os.stat in os.supports_follow_symlinks
)


def _flags(*names: str) -> int:
    value = os.O_RDONLY
    for name in names:
        value |= getattr(os, name, 0)
    return value


_DIR_FLAGS: Final = _flags("O_DIRECTORY", "O_NOFOLLOW", "O_CLOEXEC")
_FILE_FLAGS: Final = _flags("O_NOFOLLOW", "O_NONBLOCK", "O_NOCTTY", "O_CLOEXEC")


class EvidenceUnavailable(Exception):
    """A piece of evidence could not be read as evidence; ``reason`` says why (it becomes ``unknown``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RootPin:
    """The root directory held open for a verifier's lifetime, so the directory it names stays itself.

    A directory's ``(st_dev, st_ino)`` names it only while it exists: once it
    is deleted, the file system may give its inode number to the next
    directory created (ext4 does at once), and a new directory at the root's
    path would then look like the one the verifier was built on. An open
    descriptor keeps the deleted directory's inode allocated, so no other
    directory can get its number while the pin is held: a directory seen with
    the pin's identity *is* the pinned directory.

    One descriptor per pin (``O_CLOEXEC``: a program a forked child executes
    does not inherit it), held until :meth:`close`. Its identity is read once,
    when it is opened: a held descriptor's inode keeps its device and number.
    Closing and comparing take one lock, so a comparison never passes once
    ``close`` released the directory; nothing under the lock touches the file
    system, so a call hung in a worker thread (a root on an unresponsive NFS
    server) never holds ``close``, which runs on the event loop's thread.
    """

    __slots__ = ("_fd", "_identity", "_lock")

    def __init__(self, root: str) -> None:
        """Open ``root`` (through any symlink on its path, as the build resolves it) and hold it.

        :raises OSError: it cannot be opened as a directory (``NotADirectoryError``, ``FileNotFoundError``…).
        """
        fd = os.open(root, _flags("O_DIRECTORY", "O_CLOEXEC"))
        try:
            pinned = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        self._identity: tuple[int, int] = (pinned.st_dev, pinned.st_ino)
        self._fd: int | None = fd
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran: the pin no longer holds the directory."""
        return self._fd is None

    def is_pinned(self, opened: os.stat_result) -> bool:
        """Whether ``opened`` (``fstat`` of a descriptor the caller holds open) is the pinned directory.

        Both are open at the moment of the comparison, so equal identities are
        one inode, never a reused number. The pinned identity was read when the
        pin was opened: no file-system call is made under the lock ``close`` takes.

        :raises PinClosed: the pin was closed; nothing is compared.
        """
        with self._lock:
            if self._fd is None:
                raise PinClosed
            return self._identity == (opened.st_dev, opened.st_ino)

    def close(self) -> None:
        """Release the descriptor; idempotent (later calls do nothing)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class PinClosed(Exception):
    """The :class:`RootPin` was closed before a verification compared the root with it."""


@contextmanager
def root_descriptor(root: str, pin: RootPin) -> Iterator[int]:
    """The root directory opened once for a verification; closed at exit.

    The root itself is the host's own configured path and may be reached
    through a symlink; everything below it may not. The path is opened
    afresh, so the directory it names is checked against ``pin``, the one it
    named when the verifier was built and held open since: a symlink on the
    path repointed since (or the directory replaced, even by one that got a
    deleted directory's inode number) would otherwise make another
    directory's files count as this root's evidence.

    :raises EvidenceUnavailable: the root cannot be opened, or is another directory now.
    :raises PinClosed: the verifier was closed.
    """
    try:
        fd = os.open(root, _flags("O_DIRECTORY", "O_CLOEXEC"))
    except OSError as exc:
        raise EvidenceUnavailable(f"root cannot be opened: {_why(exc)}") from exc
    try:
        if not pin.is_pinned(os.fstat(fd)):
            # Checked on the descriptor every read goes through, so a repoint after this
            # check cannot matter either. The path stays out: the reason reaches the model.
            raise EvidenceUnavailable(
                "refused: root is no longer the directory the verifier was built on (it was "
                "replaced, or a symbolic link on its path now points elsewhere); build the "
                "verifier again to verify the directory there now"
            )
        yield fd
    finally:
        os.close(fd)


class OpenedFile:
    """A confined, opened regular file: its descriptor, the ``fstat`` taken on it, and where it was opened."""

    __slots__ = ("_name", "_parent", "_shown", "fd", "stat")

    def __init__(self, fd: int, st: os.stat_result, parent: int, name: str, shown: str) -> None:
        self.fd = fd
        self.stat = st
        self._parent = parent
        self._name = name
        self._shown = shown

    @contextmanager
    def leased(self, check: Callable[[], None]) -> Iterator[Callable[[], None]]:
        """Hold a read lease on the file while the body reads it; no write can land unseen.

        Chunked reads, even read twice and compared, can be fooled by a writer
        that watches them (inotify reports each read) and rewrites each chunk
        in step with both reads, every write within one tick of the timestamp
        clock, ``mtime`` set back: both reads then agree on bytes the file
        never held. The lease closes that on Linux: it is granted only while no
        descriptor has the file open for writing, and any open for writing or
        truncate while it is held breaks it (the writer waits for the release).
        Where no lease can be had (another user's file, NFS, not Linux) the
        reads are checked as before (:meth:`read_again`, :meth:`check_still_in_place`).

        Yields ``check`` extended for the reads to call before each chunk: it also
        stops the read as soon as the lease is broken, so a writer waiting on the
        break (the host's own test runner, say) is let in after one more chunk,
        not after both reads (up to ``read_timeout_s``, or the kernel's 45 s).

        :raises EvidenceUnavailable: the file is open for writing (``busy``), or was
            opened for writing while it was read (``changed``).
        """
        try:
            held = take_lease(self.fd)
        except OSError:
            raise EvidenceUnavailable(
                f"busy: {self._shown!r} is open for writing, so it could change while it is read; not read"
            ) from None

        def still_leased() -> None:
            if held and not lease_held(self.fd):
                raise EvidenceUnavailable(
                    f"changed: {self._shown!r} was opened for writing while it was read"
                )

        def watched() -> None:
            check()
            still_leased()

        try:
            yield watched
            still_leased()
        finally:
            if held:
                drop_lease(self.fd)

    def read_again(self, first: bytes, max_bytes: int, option: str, check: Callable[[], None]) -> None:
        """Read the descriptor again from its start: its SHA-256 must be ``first``, that of the first read.

        A same-size write within one tick of the file system's timestamp clock
        (a few milliseconds on Linux before 6.13's fine-grained change times)
        leaves the size, ``mtime`` and ``ctime`` as they were, so comparing
        them cannot see it; a writer can set ``mtime`` back besides. The first
        read may then hold a mix of old and new bytes the file never held at
        one moment; the second read holds the new bytes, and differs. Where no
        lease is held (:meth:`leased`), a writer that rewrites each chunk back
        and forth in step with both reads, every write within one tick, goes
        unseen. The same bounds hold: the
        size bound, and ``check()`` before each chunk.

        :raises EvidenceUnavailable: the bytes differ, or the descriptor cannot be read again.
        """
        try:
            os.lseek(self.fd, 0, os.SEEK_SET)
        except OSError as exc:
            raise EvidenceUnavailable(f"unreadable: {_why(exc)}") from exc
        again = hashlib.sha256()
        for chunk in _chunks(self.fd, max_bytes, option, check):
            again.update(chunk)
        if again.digest() != first:
            raise EvidenceUnavailable(f"changed: {self._shown!r} was written while it was read")

    def check_still_in_place(self) -> None:
        """After reading: the file is unchanged and has one link, the name it was opened by.

        Without this a hard link to an outside file, opened in the moment it
        existed and then removed (so ``st_nlink`` is back to 1 when
        ``fstat`` runs), would have its bytes counted. When the opened inode
        has exactly one link and that link is the confined name, the bytes
        read are those of a file under the root. The link count is read from
        the name's lookup too, which gives the name's inode and its count
        together: the descriptor's count and a later lookup's inode, each fine
        at its own moment, let through an outside file whose second link was
        removed before the ``fstat`` and made again before the lookup.

        The bytes are read in chunks, so a file written while it is read gives
        a mix of its old and new bytes, which it may never have held at any
        one moment: a writer that puts the expected first half in place, then
        (after that chunk was read) the expected second half while undoing the
        first, made the file pass that never held the expected bytes. So its
        size, modification and change times must be what they were when it was
        opened. A write within one tick of the file system's timestamp clock
        that keeps the size leaves them as they were: :meth:`read_again` is
        what sees that one, and runs first.

        :raises EvidenceUnavailable: the file, its link count or its name changed while it was read.
        """
        now = os.fstat(self.fd)
        was = self.stat
        if (now.st_size, now.st_mtime_ns, now.st_ctime_ns) != (was.st_size, was.st_mtime_ns, was.st_ctime_ns):
            raise EvidenceUnavailable(f"changed: {self._shown!r} was written while it was read")
        try:
            named = os.stat(self._name, dir_fd=self._parent, follow_symlinks=False)
        except OSError:
            named = None
        same = named is not None and (named.st_dev, named.st_ino) == (now.st_dev, now.st_ino)
        # The name's own lookup must find one link too: the descriptor's count and the name's
        # inode, each read at its own moment, were both fine for an outside file whose link was
        # removed before the fstat and made again before the lookup.
        if now.st_nlink != 1 or not same or named is None or named.st_nlink != 1:
            raise EvidenceUnavailable(
                f"refused: {self._shown!r} was replaced or linked elsewhere while it was read"
            )


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def unreadable(exc: OSError) -> EvidenceUnavailable:
    """``exc`` from a call on an already opened descriptor (``fstat``, ``close``) as ``unreadable``.

    Those calls fail only on troubled file systems (an NFS file deleted on the
    server answers ``ESTALE``, a failing disk ``EIO``): the evidence is
    unknown, and the verification goes on with the other items.
    """
    return EvidenceUnavailable(f"unreadable: {_why(exc)}")


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _open_dir(name: str, parent: int, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError as exc:
        raise EvidenceUnavailable(f"missing: directory {shown!r} does not exist") from exc
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
            # Linux answers ENOTDIR for a symlink opened with O_DIRECTORY | O_NOFOLLOW;
            # lstat only names what was refused, the refusal itself was the kernel's.
            raise EvidenceUnavailable(f"refused: {shown!r} is {_entry_kind(name, parent)}") from exc
        raise EvidenceUnavailable(f"unreadable: directory {shown!r}: {_why(exc)}") from exc


def _entry_kind(name: str, parent: int) -> str:
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except OSError:
        return "not a directory"
    return "a symbolic link" if stat.S_ISLNK(mode) else "not a directory"


@contextmanager
def open_confined(root_fd: int, parts: tuple[str, ...]) -> Iterator[OpenedFile]:
    """Open ``parts`` under ``root_fd`` without following any symlink; yield the checked file.

    :raises EvidenceUnavailable: the file is missing, unreadable, reached through a
        symlink, not a regular file, or has more than one link.
    """
    if not parts or any(p in ("", ".", "..") or "/" in p or "\x00" in p for p in parts):
        # The config refuses such paths; this is the walk's own guard, not the first line.
        raise EvidenceUnavailable("refused: the path is not a confined relative path")
    opened: list[int] = []
    try:
        parent = root_fd
        for index, name in enumerate(parts[:-1]):
            child = _open_dir(name, parent, "/".join(parts[: index + 1]))
            if opened:
                # Only the last directory is needed (the file is opened and re-checked in it):
                # a path 500 components deep holds two descriptors, not 500.
                os.close(opened.pop())
            opened.append(child)
            parent = child
        yield _open_file(parts[-1], parent, "/".join(parts), opened)
    finally:
        for fd in reversed(opened):
            os.close(fd)


def _open_file(name: str, parent: int, shown: str, opened: list[int]) -> OpenedFile:
    # lstat first so a FIFO or device is refused without ever being opened
    # (opening a device can have effects of its own); the fstat below is the
    # check that counts, because the entry can change between the two.
    try:
        before = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError as exc:
        raise EvidenceUnavailable("missing: no such file") from exc
    except OSError as exc:
        raise EvidenceUnavailable(f"unreadable: {_why(exc)}") from exc
    if not stat.S_ISREG(before.st_mode):
        raise EvidenceUnavailable(f"refused: {shown!r} is {_kind(before.st_mode)}")
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
    except FileNotFoundError as exc:
        raise EvidenceUnavailable("missing: no such file") from exc
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise EvidenceUnavailable(f"refused: {shown!r} is a symbolic link") from exc
        if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EISDIR):
            raise EvidenceUnavailable(f"refused: {shown!r} is not a regular file") from exc
        raise EvidenceUnavailable(f"unreadable: {_why(exc)}") from exc
    opened.append(fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise EvidenceUnavailable(f"refused: {shown!r} is {_kind(st.st_mode)}")
    if st.st_nlink > 1:
        raise EvidenceUnavailable(
            f"refused: {shown!r} has {st.st_nlink} hard links (files with other names are not read)"
        )
    return OpenedFile(fd, st, parent, name, shown)


def hash_file(opened: OpenedFile, max_bytes: int, check: Callable[[], None]) -> str:
    """sha256 hex of the descriptor's bytes, read in chunks with ``check()`` before each.

    Read under a read lease where the file system grants one (:meth:`OpenedFile.leased`), and
    twice (:meth:`OpenedFile.read_again`): a same-size write the times cannot show is seen.

    :raises EvidenceUnavailable: the file is (or grows) larger than ``max_bytes``, or a read fails.
    """
    size = opened.stat.st_size
    if size > max_bytes:
        raise EvidenceUnavailable(f"too large: {size} bytes, more than max_file_bytes={max_bytes}; not read")
    digest = hashlib.sha256()
    with opened.leased(check) as watched:
        for chunk in _chunks(opened.fd, max_bytes, "max_file_bytes", watched):
            digest.update(chunk)
        opened.read_again(digest.digest(), max_bytes, "max_file_bytes", watched)
    opened.check_still_in_place()
    return digest.hexdigest()


def last_changed(opened: OpenedFile) -> float:
    """When the opened file last changed, as read from its descriptor now (after reading it).

    The later of its modification and status-change times: ``mtime`` can be
    set back by anyone who can write the file (``touch -d``), but doing so
    moves ``ctime`` to now, so the pair cannot make a change look older.
    """
    now = os.fstat(opened.fd)
    return max(now.st_mtime, now.st_ctime)


def read_file(opened: OpenedFile, max_bytes: int, check: Callable[[], None]) -> bytes:
    """The descriptor's bytes (at most ``max_bytes``), read in chunks with ``check()`` between them.

    Leased and read twice, like :func:`hash_file`'s.
    """
    size = opened.stat.st_size
    if size > max_bytes:
        raise EvidenceUnavailable(
            f"too large: {size} bytes, more than max_record_bytes={max_bytes}; not read"
        )
    with opened.leased(check) as watched:
        data = b"".join(_chunks(opened.fd, max_bytes, "max_record_bytes", watched))
        opened.read_again(hashlib.sha256(data).digest(), max_bytes, "max_record_bytes", watched)
    opened.check_still_in_place()
    return data


def _chunks(fd: int, max_bytes: int, option: str, check: Callable[[], None]) -> Iterator[bytes]:
    total = 0
    while True:
        check()
        try:
            chunk = os.read(fd, CHUNK_BYTES)
        except OSError as exc:
            raise EvidenceUnavailable(f"unreadable: {_why(exc)}") from exc
        if not chunk:
            return
        total += len(chunk)
        if total > max_bytes:
            # The file grew after fstat: the bound holds for what is read, not what was promised.
            raise EvidenceUnavailable(f"too large: grew past {option}={max_bytes} while being read")
        yield chunk
